package harness

import (
	"cmp"
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/image/font"
	"golang.org/x/image/font/basicfont"
	"golang.org/x/image/math/fixed"
)

// Series is one line of a plot panel.
type Series struct {
	Name  string
	Color color.RGBA
	T     []time.Duration
	V     []float64 // NaN leaves a gap
	// Dashed draws a reference line (a baseline) rather than a measurement.
	Dashed bool
}

// Panel is one plot with a shared time axis.
type Panel struct {
	Title  string
	YLabel string
	Series []Series
	// YMax fixes the top of the axis; 0 fits the data.
	YMax float64
	// Markers are events drawn as coloured ticks along the panel's bottom, with one
	// legend entry per label.
	Markers []Marker
}

// Marker is one event on a panel's time axis.
type Marker struct {
	T     time.Duration
	Label string
	Color color.RGBA
}

// reasonColors colour muxd's reasons for a ceiling change (a "/fallback" suffix is
// drawn as fallback).
var reasonColors = map[string]color.RGBA{
	"burst":      {0xd6, 0x27, 0x28, 0xff},
	"burst over": {0xff, 0x7f, 0x0e, 0xff},
	"new level":  {0xe3, 0x77, 0xc2, 0xff},
	"calm":       {0x7f, 0x7f, 0x7f, 0xff},
	"give back":  {0x2c, 0xa0, 0x2c, 0xff},
	"pattern":    {0x94, 0x67, 0xbd, 0xff},
	"fallback":   {0x00, 0x00, 0x00, 0xff},
	"health":     {0x8c, 0x56, 0x4b, 0xff},
	"static":     {0xbc, 0xbd, 0x22, 0xff},
	"idle":       {0x17, 0xbe, 0xcf, 0xff},
}

func reasonColor(key string) (string, color.RGBA) {
	if strings.HasSuffix(key, "/fallback") {
		key = "fallback"
	}
	if c, ok := reasonColors[key]; ok {
		return key, c
	}
	return key, colAxis
}

// ceilingPanel draws muxd's offline ceiling as it changed (every change, not only the
// sampled values) and the online demand estimate at each change and each sample (muxd
// records a change only when the ceiling or its reason moves, so the demand's samples
// fill in between), with a marker per change coloured by its reason, and NVML's GPU
// utilisation from the samples.
func ceilingPanel(changes []CeilingChange, ts []time.Duration, demand, util []float64, end time.Duration) Panel {
	var ct []time.Duration
	var cv []float64
	type point struct {
		t time.Duration
		v float64
	}
	var dp []point
	for i, c := range changes {
		if i == 0 {
			ct, cv = append(ct, 0), append(cv, c.From)
		}
		ct, cv = append(ct, c.T, c.T), append(cv, cv[len(cv)-1], c.To)
		dp = append(dp, point{c.T, c.Demand})
	}
	ct, cv = append(ct, end), append(cv, cv[len(cv)-1])
	for i, t := range ts {
		if !math.IsNaN(demand[i]) {
			dp = append(dp, point{t, demand[i]})
		}
	}
	slices.SortStableFunc(dp, func(a, b point) int { return cmp.Compare(a.t, b.t) })
	dt, dv := make([]time.Duration, len(dp)), make([]float64, len(dp))
	for i, p := range dp {
		dt[i], dv[i] = p.t, p.v
	}
	p := Panel{Title: "offline ceiling, online demand and the reason for each change (muxd)", YLabel: "%", YMax: 100, Series: []Series{
		{Name: "offline ceiling", Color: colShare, T: ct, V: cv},
		{Name: "online demand", Color: colDemand, T: dt, V: dv},
		{Name: "GPU util", Color: colUtil, T: ts, V: util},
	}}
	for _, c := range changes {
		label, col := reasonColor(c.Reason)
		p.Markers = append(p.Markers, Marker{T: c.T, Label: label, Color: col})
	}
	return p
}

var (
	colLoad   = color.RGBA{0x1f, 0x77, 0xb4, 0xff}
	colTrace  = color.RGBA{0x9e, 0xc5, 0xe0, 0xff}
	colShare  = color.RGBA{0x2c, 0xa0, 0x2c, 0xff}
	colDemand = color.RGBA{0xd6, 0x27, 0x28, 0xff}
	colUtil   = color.RGBA{0x94, 0x67, 0xbd, 0xff}
	colLat    = color.RGBA{0xff, 0x7f, 0x0e, 0xff}
	colBase   = color.RGBA{0x55, 0x55, 0x55, 0xff}
	colGrid   = color.RGBA{0xe4, 0xe4, 0xe4, 0xff}
	colAxis   = color.RGBA{0x33, 0x33, 0x33, 0xff}
)

// TimelinePanels are the muxflow run's panels: online load, offline ceiling against the
// online demand with the reason for each change (every change muxd reported; the sampled
// values when it reported none), and online request latency (with its GPU-side p99) against the
// online-alone baseline.
func (r *Report) TimelinePanels(st Strategy) ([]Panel, error) {
	res, ok := r.Result(st)
	if !ok || res.Skipped != "" {
		return nil, fmt.Errorf("no %s run to plot", st)
	}
	if len(res.Samples) < 2 {
		return nil, errors.New("too few samples to plot; is the duration shorter than two sample periods?")
	}
	n := len(res.Samples)
	ts := make([]time.Duration, n)
	qps, trace, share, demand, util, lat := make([]float64, n), make([]float64, n), make([]float64, n), make([]float64, n), make([]float64, n), make([]float64, n)
	for i, s := range res.Samples {
		ts[i] = s.T
		qps[i], share[i], demand[i], util[i], lat[i] = s.OnlineQPS, s.OfflineShare, s.OnlineDemand, 100*s.Util, s.OnlineGPUms
		trace[i] = r.Scenario.RateAt(s.T)
	}
	// The nominal trace is drawn finely so bursts keep their shape.
	var ft []time.Duration
	var fv []float64
	step := r.Scenario.Duration.D() / 400
	for t := time.Duration(0); t <= r.Scenario.Duration.D(); t += step {
		ft, fv = append(ft, t), append(fv, r.Scenario.RateAt(t))
	}
	panels := []Panel{
		{Title: "online load", YLabel: "requests/s", Series: []Series{
			{Name: "trace", Color: colTrace, T: ft, V: fv},
			{Name: "served", Color: colLoad, T: ts, V: qps},
		}},
		{Title: "GPU time shares (muxd)", YLabel: "%", YMax: 100, Series: []Series{
			{Name: "offline share", Color: colShare, T: ts, V: share},
			{Name: "online demand", Color: colDemand, T: ts, V: demand},
			{Name: "GPU util", Color: colUtil, T: ts, V: util},
		}},
	}
	if len(res.Changes) > 0 {
		panels[1] = ceilingPanel(res.Changes, ts, demand, util, max(ts[n-1], res.Changes[len(res.Changes)-1].T))
	}
	base, haveBase := r.Result(OnlineAlone)
	haveBase = haveBase && base.Skipped == ""
	if len(res.Trace) > 0 {
		p50, p99 := windowPercentiles(res.Trace, ts, func(q Request) float64 { return q.ReqMs })
		_, g99 := windowPercentiles(res.Trace, ts, func(q Request) float64 { return q.GPUMs })
		latP := Panel{Title: "online request latency (arrival to completion, queueing included) per sample period", YLabel: "ms", Series: []Series{
			{Name: "p99", Color: colLat, T: ts, V: p99},
			{Name: "p50", Color: colLoad, T: ts, V: p50},
			{Name: "GPU-side p99", Color: colTrace, T: ts, V: g99},
		}}
		if haveBase {
			latP.Series = append(latP.Series, Series{Name: "alone p99 (run)", Color: colBase, T: []time.Duration{0, ts[n-1]}, V: []float64{base.ReqP99, base.ReqP99}, Dashed: true})
		}
		return append(panels, latP), nil
	}
	// Without a per-request trace (an infer built without --trace), gpusim's counters
	// still give the online service's kernel time per request: the slowdown sharing
	// causes, though not the waiting.
	latP := Panel{Title: "online kernel time per request (mean per sample; infer has no --trace for percentiles)", YLabel: "ms", Series: []Series{
		{Name: string(st), Color: colLat, T: ts, V: lat},
	}}
	if haveBase {
		if m := meanFinite(base.Samples, func(s Sample) float64 { return s.OnlineGPUms }); !math.IsNaN(m) {
			latP.Series = append(latP.Series, Series{Name: "online alone (mean)", Color: colBase, T: []time.Duration{0, ts[n-1]}, V: []float64{m, m}, Dashed: true})
		}
	}
	return append(panels, latP), nil
}

func meanFinite(ss []Sample, f func(Sample) float64) float64 {
	var sum float64
	var k int
	for _, s := range ss {
		if v := f(s); !math.IsNaN(v) && !math.IsInf(v, 0) {
			sum += v
			k++
		}
	}
	if k == 0 {
		return math.NaN()
	}
	return sum / float64(k)
}

// Plot layout in pixels.
const (
	plotW       = 960
	panelH      = 230
	marginL     = 70
	marginR     = 170
	marginTop   = 34
	marginPanel = 30
)

// WritePNG draws panels stacked over one time axis.
func WritePNG(w io.Writer, title string, panels []Panel) error {
	if len(panels) == 0 {
		return errors.New("nothing to plot")
	}
	h := marginTop + len(panels)*(panelH+marginPanel) + 20
	img := image.NewRGBA(image.Rect(0, 0, plotW, h))
	draw.Draw(img, img.Bounds(), image.White, image.Point{}, draw.Src)
	text(img, marginL, 20, title, colAxis)
	var tmax time.Duration
	for _, p := range panels {
		for _, s := range p.Series {
			for _, t := range s.T {
				tmax = max(tmax, t)
			}
		}
	}
	if tmax <= 0 {
		return errors.New("the series span no time")
	}
	for i, p := range panels {
		top := marginTop + i*(panelH+marginPanel) + 16
		drawPanel(img, p, image.Rect(marginL, top, plotW-marginR, top+panelH-16), tmax)
	}
	if err := png.Encode(w, img); err != nil {
		return fmt.Errorf("encode PNG: %w", err)
	}
	return nil
}

func drawPanel(img *image.RGBA, p Panel, area image.Rectangle, tmax time.Duration) {
	ymax := p.YMax
	if ymax == 0 {
		for _, s := range p.Series {
			for _, v := range s.V {
				if !math.IsNaN(v) && !math.IsInf(v, 0) {
					ymax = max(ymax, v)
				}
			}
		}
		// Four grid steps of a round size.
		ymax = 4 * niceStep(ymax*1.05/4)
	}
	text(img, area.Min.X, area.Min.Y-6, p.Title+" ("+p.YLabel+")", colAxis)
	// Grid and axis labels.
	for k := 0; k <= 4; k++ {
		y := area.Max.Y - k*area.Dy()/4
		hline(img, area.Min.X, area.Max.X, y, colGrid)
		label := strconv.FormatFloat(math.Round(ymax*float64(k)/4*1000)/1000, 'f', -1, 64)
		text(img, area.Min.X-8-7*len(label), y+4, label, colAxis)
	}
	xOf := func(t time.Duration) int { return area.Min.X + int(float64(area.Dx())*t.Seconds()/tmax.Seconds()) }
	step := niceCeil(tmax.Seconds() / 8)
	for t := 0.0; t <= tmax.Seconds()+1e-9; t += step {
		x := xOf(time.Duration(t * float64(time.Second)))
		vline(img, x, area.Min.Y, area.Max.Y, colGrid)
		label := strconv.FormatFloat(t, 'g', 4, 64) + "s"
		text(img, x-7*len(label)/2, area.Max.Y+14, label, colAxis)
	}
	hline(img, area.Min.X, area.Max.X, area.Max.Y, colAxis)
	vline(img, area.Min.X, area.Min.Y, area.Max.Y, colAxis)
	yOf := func(v float64) int {
		v = math.Max(0, math.Min(v, ymax))
		return area.Max.Y - int(float64(area.Dy())*v/ymax)
	}
	for k, s := range p.Series {
		px, py, have := 0, 0, false
		for i := range s.T {
			v := s.V[i]
			if math.IsNaN(v) || math.IsInf(v, 0) {
				have = false
				continue
			}
			x, y := xOf(s.T[i]), yOf(v)
			if have {
				line(img, px, py, x, y, s.Color, s.Dashed)
			} else if i+1 == len(s.T) || math.IsNaN(s.V[i+1]) {
				dot(img, x, y, s.Color)
			}
			px, py, have = x, y, true
		}
		// Legend to the right of the panel.
		ly := area.Min.Y + 10 + 18*k
		line(img, area.Max.X+12, ly-4, area.Max.X+32, ly-4, s.Color, s.Dashed)
		text(img, area.Max.X+38, ly, s.Name, colAxis)
	}
	// Markers: a tick each along the bottom, a legend entry per label below the series'.
	var labels []string
	colors := map[string]color.RGBA{}
	for _, m := range p.Markers {
		x := xOf(m.T)
		vline(img, x, area.Max.Y-10, area.Max.Y-1, m.Color)
		vline(img, x+1, area.Max.Y-10, area.Max.Y-1, m.Color)
		if _, seen := colors[m.Label]; !seen {
			labels = append(labels, m.Label)
		}
		colors[m.Label] = m.Color
	}
	if len(labels) > 0 {
		ly := area.Min.Y + 10 + 18*len(p.Series) + 4
		text(img, area.Max.X+12, ly, "change reasons:", colAxis)
		for k, l := range labels {
			y := ly + 14*(k+1)
			if y > area.Max.Y+14 {
				break
			}
			for dx := 0; dx < 4; dx++ {
				vline(img, area.Max.X+14+dx, y-9, y-1, colors[l])
			}
			text(img, area.Max.X+24, y, l, colAxis)
		}
	}
}

// niceStep rounds up to 1, 2, 2.5 or 5 times a power of ten.
func niceStep(v float64) float64 {
	if v <= 0 || math.IsNaN(v) {
		return 0.25
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if v <= m*p*(1+1e-9) {
			return m * p
		}
	}
	return 10 * p
}

// niceCeil rounds up to 1, 2 or 5 times a power of ten.
func niceCeil(v float64) float64 {
	if v <= 0 || math.IsNaN(v) {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10} {
		if v <= m*p {
			return m * p
		}
	}
	return 10 * p
}

func text(img *image.RGBA, x, y int, s string, c color.Color) {
	d := font.Drawer{Dst: img, Src: image.NewUniform(c), Face: basicfont.Face7x13, Dot: fixed.P(x, y)}
	d.DrawString(s)
}

func hline(img *image.RGBA, x0, x1, y int, c color.RGBA) {
	for x := x0; x <= x1; x++ {
		img.SetRGBA(x, y, c)
	}
}

func vline(img *image.RGBA, x, y0, y1 int, c color.RGBA) {
	for y := y0; y <= y1; y++ {
		img.SetRGBA(x, y, c)
	}
}

func dot(img *image.RGBA, x, y int, c color.RGBA) {
	for dx := -1; dx <= 1; dx++ {
		for dy := -1; dy <= 1; dy++ {
			img.SetRGBA(x+dx, y+dy, c)
		}
	}
}

// line draws a two-pixel line (Bresenham); dashed lines skip every other 6 pixels.
func line(img *image.RGBA, x0, y0, x1, y1 int, c color.RGBA, dashed bool) {
	dx, dy := abs(x1-x0), -abs(y1-y0)
	sx, sy := sign(x1-x0), sign(y1-y0)
	e := dx + dy
	for n := 0; ; n++ {
		if !dashed || (n/6)%2 == 0 {
			img.SetRGBA(x0, y0, c)
			img.SetRGBA(x0, y0+1, c)
		}
		if x0 == x1 && y0 == y1 {
			return
		}
		if e2 := 2 * e; e2 >= dy {
			e += dy
			x0 += sx
		} else {
			e += dx
			y0 += sy
		}
	}
}

func abs(v int) int {
	if v < 0 {
		return -v
	}
	return v
}

func sign(v int) int {
	switch {
	case v > 0:
		return 1
	case v < 0:
		return -1
	}
	return 0
}
