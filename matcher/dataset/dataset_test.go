package dataset

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLoadLucidSharedData(t *testing.T) {
	dir, err := SharedDir("lucid-colocation")
	if err != nil {
		t.Fatal(err)
	}
	l, err := LoadLucid(dir)
	if err != nil {
		t.Fatal(err)
	}
	// The published subset: 51 solo configurations, 713 pairs.
	if len(l.Solo) != 51 || len(l.Pairs) != 713 {
		t.Fatalf("got %d solo profiles and %d pairs, want 51 and 713", len(l.Solo), len(l.Pairs))
	}
	p := l.Solo[LucidKey{Model: "ResNet50", Dataset: "ImageNet", BatchSize: 64, AMP: true}]
	if p.GPUUtil != 97.735 || p.MemoryMiB != 5376 || p.Model != "ResNet50" {
		t.Errorf("ResNet50/bs64/amp solo profile = %+v", p)
	}
	if c := l.Pairs[0]; c.A.Model != "MobileNetV3" || c.B.Model != "ResNet18" || c.ANormTput != 0.983 || c.BNormTput != 1.034 {
		t.Errorf("first pair = %+v", c)
	}
}

func TestLoadLucidRejectsBadFiles(t *testing.T) {
	solo := "model,dataset,batchsize,amp,speed,gpu_util,gmem_util,gmem,label\nM,D,32,0,10,50,20,1000,0\n"
	pairsHeader := "id,model1,dataset1,gpu_num1,batchsize1,amp1,speed1,model2,dataset2,gpu_num2,batchsize2,amp2,speed2,gpu_util,gmem_util,gmem\n"
	tests := []struct {
		name, solo, pairs, want string
	}{
		{"unknown configuration", solo, pairsHeader + "0,M,D,1,32,0,0.9,X,D,1,32,0,0.8,1,1,1\n", "no solo profile"},
		{"bad number", solo, pairsHeader + "0,M,D,1,32,0,fast,M,D,1,32,0,0.8,1,1,1\n", `"fast" is not a number`},
		{"bad amp", solo, pairsHeader + "0,M,D,1,32,2,0.9,M,D,1,32,0,0.8,1,1,1\n", `"2" is not 0 or 1`},
		{"missing column", "model,dataset\nM,D\n", pairsHeader, `lacks column "batchsize"`},
		{"utilisation out of range", strings.Replace(solo, ",50,", ",150,", 1), pairsHeader, "gpu_util"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			os.WriteFile(filepath.Join(dir, "solo.csv"), []byte(tc.solo), 0o600)
			os.WriteFile(filepath.Join(dir, "pairs.csv"), []byte(tc.pairs), 0o600)
			_, err := LoadLucid(dir)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one containing %q", err, tc.want)
			}
		})
	}
}
