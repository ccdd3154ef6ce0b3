package measure

import "testing"

func TestMedian(t *testing.T) {
	x := []float64{3, 1, 2, 10}
	if m := Median(x); m != 3 {
		t.Errorf("Median = %v, want 3", m)
	}
	if x[0] != 3 {
		t.Error("Median sorted its input")
	}
	if c := CPUSeconds(); c <= 0 {
		t.Errorf("CPUSeconds = %v", c)
	}
}
