package nvmlsim

import (
	"bufio"
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/muxflow/muxflow/gpusim/sim"
	"github.com/muxflow/muxflow/gpusim/simd"
)

// readAnswer takes the sampler's common answers apart by hand: each must come out as
// encoding/json would decode it, whatever the reader's buffer size, and a line it does not
// recognise (or a broken one) must still be decoded, or refused, by encoding/json.
func TestReadAnswerMatchesJSON(t *testing.T) {
	answers := []simd.Response{
		{Packed: []byte("\x00\x01binary\xff stats of eight devices")},
		{},
		{Error: "no such device"},
		{Xids: []sim.XidEvent{{Seq: 7, Device: 1, Xid: 79}}},
		{Packed: bytes.Repeat([]byte{0xfb, 0xff}, 300)}, // "+/" in base64, and longer than the small buffer
	}
	var wire bytes.Buffer
	enc := json.NewEncoder(&wire) // as gpusimd writes them
	for _, a := range answers {
		if err := enc.Encode(a); err != nil {
			t.Fatal(err)
		}
	}
	for _, size := range []int{16, 64 << 10} {
		c := &conn{r: bufio.NewReaderSize(bytes.NewReader(wire.Bytes()), size)}
		for i, want := range answers {
			var got simd.Response
			if err := c.readAnswer(&got); err != nil {
				t.Fatalf("buffer %d, answer %d: %v", size, i, err)
			}
			var viaJSON simd.Response
			line, _ := json.Marshal(want)
			if err := json.Unmarshal(line, &viaJSON); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(viaJSON, got); diff != "" {
				t.Errorf("buffer %d, answer %d (-json +readAnswer):\n%s", size, i, diff)
			}
		}
	}
	for _, bad := range []string{`{"packed":"@@@@"}` + "\n", `{"packed":` + "\n", "not json\n"} {
		c := &conn{r: bufio.NewReader(strings.NewReader(bad))}
		var got simd.Response
		if err := c.readAnswer(&got); err == nil {
			t.Errorf("readAnswer(%q) = nil error, %+v", bad, got)
		}
	}
}
