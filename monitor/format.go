package monitor

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// WriteStatus prints one line per GPU: health, why, and the latest metrics.
// Unavailable metrics print as "-". `muxctl status` and nvmlprobe use it.
func WriteStatus(w io.Writer, gpus []GPUStatus, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "GPU\tSTATE\tFOR\tUTIL\tSM-ACT\tSM-CLK\tMEM\tTEMP\tPOWER\tTHROTTLE\tPROCS\tREASON")
	for _, g := range gpus {
		s := g.Sample
		if s == nil {
			s = &Sample{}
		}
		clock := "-"
		if pct, ok := s.SMClockPercent(); ok {
			clock = fmt.Sprintf("%d/%dMHz(%.0f%%)", *s.SMClockMHz, *s.SMClockMaxMHz, pct)
		} else if s.SMClockMHz != nil {
			clock = fmt.Sprintf("%dMHz", *s.SMClockMHz)
		}
		mem := "-"
		if pct, ok := s.MemoryUsedPercent(); ok {
			mem = fmt.Sprintf("%s/%s(%.0f%%)", FormatBytes(*s.MemoryUsedBytes), FormatBytes(*s.MemoryTotalBytes), pct)
		}
		power := "-"
		if pct, ok := s.PowerPercent(); ok {
			power = fmt.Sprintf("%.0f/%.0fW(%.0f%%)", float64(*s.PowerMilliwatts)/1000, float64(*s.PowerLimitMilliwatts)/1000, pct)
		} else if s.PowerMilliwatts != nil {
			power = fmt.Sprintf("%.0fW", float64(*s.PowerMilliwatts)/1000)
		}
		throttle := "-"
		if s.ClockEventReasons != nil {
			throttle = "none"
			if names := ClockReasonNames(*s.ClockEventReasons); len(names) > 0 {
				throttle = strings.Join(names, ",")
			}
		}
		state := string(g.State)
		if s.Lost {
			state += "(lost)"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\n",
			g.Index, state, now.Sub(g.Since).Round(time.Second), optPercent(s.GPUUtilPercent), optFloatPercent(s.SMActivityPercent),
			clock, mem, optUnit(s.TemperatureC, "C"), power, throttle, len(s.Processes), g.Reason.Text)
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("writing GPU status: %w", err)
	}
	return nil
}

// WriteEvents prints events oldest first, one per line, each explaining
// itself: `muxctl events` and nvmlprobe use it.
func WriteEvents(w io.Writer, events []Event) error {
	for _, e := range events {
		var line string
		switch e.Kind {
		case EventTransition:
			line = fmt.Sprintf("%s gpu %d %s -> %s: %s", e.Time.Format(time.RFC3339Nano), e.GPU, e.From, e.To, e.Reason.Text)
		case EventFault:
			class := ""
			if e.Fault != nil {
				class = string(e.Fault.Class) + " "
			}
			line = fmt.Sprintf("%s gpu %d %sfault: %s", e.Time.Format(time.RFC3339Nano), e.GPU, class, e.Reason.Text)
		case EventContainer:
			line = fmt.Sprintf("%s gpu %d container %s: %s", e.Time.Format(time.RFC3339Nano), e.GPU, e.Container, e.Reason.Text)
		default:
			line = fmt.Sprintf("%s gpu %d %s: %s", e.Time.Format(time.RFC3339Nano), e.GPU, e.Kind, e.Reason.Text)
		}
		if _, err := fmt.Fprintf(w, "#%d %s\n", e.Seq, line); err != nil {
			return fmt.Errorf("writing GPU events: %w", err)
		}
	}
	return nil
}

func optPercent(v *uint32) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprintf("%d%%", *v)
}

func optFloatPercent(v *float64) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprintf("%.1f%%", *v)
}

func optUnit(v *uint32, unit string) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprintf("%d%s", *v, unit)
}

var byteUnits = [...]string{"B", "KiB", "MiB", "GiB", "TiB", "PiB"}

// FormatBytes writes a measured size to three significant digits in the largest binary
// unit it fills ("79.6GiB", "16.0GiB", "512MiB"): an exact count, as policy.Bytes writes
// a limit ("16777280KiB" for 16 GiB and 64 KiB), is unreadable for what a GPU reports.
func FormatBytes(b uint64) string {
	v, u := float64(b), 0
	for v >= 1024 && u < len(byteUnits)-1 {
		v /= 1024
		u++
	}
	switch {
	case u == 0:
		return strconv.FormatUint(b, 10) + "B"
	case v < 9.995:
		return strconv.FormatFloat(v, 'f', 2, 64) + byteUnits[u]
	case v < 99.95:
		return strconv.FormatFloat(v, 'f', 1, 64) + byteUnits[u]
	}
	return strconv.FormatFloat(v, 'f', 0, 64) + byteUnits[u]
}
