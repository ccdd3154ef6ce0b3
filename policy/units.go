package policy

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode"
)

// Bytes is a size written as humans write it: "8GiB", "512MiB", "1.5GB", "4096", "0".
type Bytes uint64

var byteUnits = []struct {
	suffix string
	mult   float64
}{
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
	{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12},
	{"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}, {"T", 1 << 40},
	{"B", 1},
}

// ParseBytes parses a human size. Binary (KiB) and decimal (KB) units are both accepted;
// bare K/M/G/T mean binary units, as Kubernetes quantities' Ki/Mi/Gi do.
func ParseBytes(s string) (Bytes, error) {
	t := strings.TrimSpace(s)
	if t == "" {
		return 0, fmt.Errorf("size is empty")
	}
	mult := 1.0
	num := t
	for _, u := range byteUnits {
		if strings.HasSuffix(t, u.suffix) {
			mult, num = u.mult, strings.TrimSpace(strings.TrimSuffix(t, u.suffix))
			break
		}
	}
	if strings.HasSuffix(num, "i") { // Kubernetes style "8Gi"
		return 0, fmt.Errorf("size %q: write binary units as KiB, MiB, GiB", s)
	}
	v, err := strconv.ParseFloat(num, 64)
	if err != nil || v < 0 || math.IsInf(v, 0) || math.IsNaN(v) {
		return 0, fmt.Errorf("size %q is not a non-negative number with an optional unit (B, KiB, MiB, GiB, TiB, KB, MB, GB, TB)", s)
	}
	b := v * mult
	if b >= math.MaxUint64/2 {
		return 0, fmt.Errorf("size %q is too large", s)
	}
	return Bytes(math.Round(b)), nil
}

// UnmarshalText lets TOML values decode into Bytes. A non-zero size needs a unit so that
// a forgotten one ("memory_limit = 8") is an error rather than 8 bytes.
func (b *Bytes) UnmarshalText(text []byte) error {
	v, err := ParseBytes(string(text))
	if err != nil {
		return err
	}
	if t := strings.TrimSpace(string(text)); v != 0 && strings.IndexFunc(t, unicode.IsLetter) < 0 {
		return fmt.Errorf("size %q needs a unit, like \"%sGiB\" or \"%sB\"", t, t, t)
	}
	*b = v
	return nil
}

// MarshalText writes the largest exact binary unit.
func (b Bytes) MarshalText() ([]byte, error) { return []byte(b.String()), nil }

func (b Bytes) String() string {
	v := uint64(b)
	for _, u := range []struct {
		s string
		m uint64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if v != 0 && v%u.m == 0 {
			return strconv.FormatUint(v/u.m, 10) + u.s
		}
	}
	return strconv.FormatUint(v, 10) + "B"
}

// Duration is a time span written like Go durations: "100ms", "30s", "5m".
type Duration time.Duration

// UnmarshalText parses a Go duration string; negative durations are refused.
func (d *Duration) UnmarshalText(text []byte) error {
	v, err := time.ParseDuration(strings.TrimSpace(string(text)))
	if err != nil {
		return fmt.Errorf("duration %q is not like \"100ms\", \"30s\" or \"5m\"", string(text))
	}
	if v < 0 {
		return fmt.Errorf("duration %q is negative", string(text))
	}
	*d = Duration(v)
	return nil
}

// MarshalText writes the duration in Go's notation.
func (d Duration) MarshalText() ([]byte, error) { return []byte(time.Duration(d).String()), nil }

// D returns the value as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// Percent is a share written "30%"; it holds 0..100 (validated by the section that uses it).
type Percent float64

// UnmarshalText parses "30%" or "12.5%"; the % sign is required so that 0.3 and 30 are
// never confused.
func (p *Percent) UnmarshalText(text []byte) error {
	s := strings.TrimSpace(string(text))
	if !strings.HasSuffix(s, "%") {
		return fmt.Errorf("percentage %q must end in %%, like \"30%%\"", s)
	}
	v, err := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(s, "%")), 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
		return fmt.Errorf("percentage %q is not a number followed by %%", s)
	}
	if v < 0 || v > 100 {
		return fmt.Errorf("percentage %q is outside 0%%..100%%", s)
	}
	*p = Percent(v)
	return nil
}

// MarshalText writes the value with a % sign.
func (p Percent) MarshalText() ([]byte, error) {
	return []byte(strconv.FormatFloat(float64(p), 'f', -1, 64) + "%"), nil
}

// Fraction returns the share as 0..1.
func (p Percent) Fraction() float64 { return float64(p) / 100 }
