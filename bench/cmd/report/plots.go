package main

import (
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// PlotFile is a plot WritePlots wrote.
type PlotFile struct {
	Title string
	// Caption says what the plot shows and leaves out.
	Caption string
	// Path is relative to the plots directory.
	Path string
}

// PlotFormats are the file formats WritePlots can write.
var PlotFormats = []string{"svg", "png", "pdf"}

// WritePlots writes the plots of res into dir, as files of the given format
// (one of PlotFormats), and returns them: ns/op
// per implementation per workload, throughput against concurrency of the
// durable backends, and bytes per key. A plot whose data is absent is not
// written (and a stale file of that name is removed).
func WritePlots(res *Results, dir, format string) ([]PlotFile, error) {
	if !slices.Contains(PlotFormats, format) {
		return nil, fmt.Errorf("plot format %q: want one of %s", format, strings.Join(PlotFormats, ", "))
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var out []PlotFile
	for i, mk := range []func(*Results) (*plot.Plot, string, vg.Length, vg.Length, bool){nsPlot, throughputPlot, bytesPlot} {
		p, file, wd, ht, ok := mk(res)
		file = strings.TrimSuffix(file, ".svg") + "." + format
		path := filepath.Join(dir, file)
		if !ok {
			if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
				return nil, err
			}
			continue
		}
		if err := p.Save(wd, ht, path); err != nil {
			return nil, fmt.Errorf("plot %s: %w", path, err)
		}
		out = append(out, PlotFile{Title: p.Title.Text, Caption: captions[i], Path: file})
	}
	return out, nil
}

// captions describe the plots WritePlots makes, in its order.
var captions = []string{
	"Median ns/op of every workload that has a peer, on a log scale when the values span more than a factor of 20. " +
		"Sluice appears as its memory token bucket and GCRA (and as `sluice` in the middleware workloads); its other algorithms are in the tables. " +
		"Grey bars are floors, not libraries.",
	"Decisions per second against the number of concurrent callers, both axes on a log scale. " +
		"Lines: Sync mode per store (SyncConcurrency: every decision fsynced, callers sharing commits). " +
		"Points: Interval mode per store and the memory engine (DurableParallel, token bucket), which run GOMAXPROCS goroutines, so they sit at that one concurrency; their rate is 10⁹ ÷ ns/op.",
	"Heap bytes per key with 1,000,000 keys live (BytesPerKey), on a linear scale unless the values span more than a factor of 20. The grey bar is the floor, a striped map of 16-byte values.",
}

// bar is one horizontal bar.
type bar struct {
	series string // legend entry and colour
	label  string // drawn at the bar's end
	value  float64
}

// group is a row of bars sharing a label on the Y axis.
type group struct {
	label string
	bars  []bar
}

// hbars draws grouped horizontal bars from base (0, or a power of ten under
// every value on a log scale) to each value.
type hbars struct {
	groups []group
	colors map[string]color.Color
	base   float64
	// barH is a bar's height in Y units; a group occupies len(bars) of
	// them and a gap of one.
	barH float64
	text draw.TextStyle
}

// layout returns the Y position of the centre of each bar, group by group,
// top to bottom, and the Y position of each group's centre.
func (h *hbars) layout() (bars [][]float64, centres []float64) {
	y := 0.0
	for i := len(h.groups) - 1; i >= 0; i-- { // first group at the top
		g := h.groups[i]
		ys := make([]float64, len(g.bars))
		for j := range g.bars {
			ys[len(g.bars)-1-j] = y + float64(j)*h.barH + h.barH/2
		}
		centres = append(centres, y+float64(len(g.bars))*h.barH/2)
		bars = append(bars, ys)
		y += float64(len(g.bars))*h.barH + h.barH
	}
	slices.Reverse(bars)
	slices.Reverse(centres)
	return bars, centres
}

// Plot implements plot.Plotter.
func (h *hbars) Plot(c draw.Canvas, plt *plot.Plot) {
	trX, trY := plt.Transforms(&c)
	ys, _ := h.layout()
	for i, g := range h.groups {
		for j, b := range g.bars {
			y := ys[i][j]
			x0, x1 := trX(h.base), trX(b.value)
			y0, y1 := trY(y-h.barH*0.45), trY(y+h.barH*0.45)
			c.FillPolygon(h.colors[b.series], []vg.Point{{X: x0, Y: y0}, {X: x1, Y: y0}, {X: x1, Y: y1}, {X: x0, Y: y1}})
			if b.label != "" {
				c.FillText(h.text, vg.Point{X: x1 + vg.Points(3), Y: (y0 + y1) / 2}, b.label)
			}
		}
	}
}

// DataRange implements plot.DataRanger.
func (h *hbars) DataRange() (xmin, xmax, ymin, ymax float64) {
	xmin, xmax = h.base, h.base
	n := 0
	for _, g := range h.groups {
		for _, b := range g.bars {
			xmax = max(xmax, b.value)
		}
		n += len(g.bars) + 1
	}
	return xmin, xmax, 0, float64(n-1) * h.barH
}

// humanTicks wraps a Ticker and labels its major ticks compactly: 250,
// 1k, 10k, 1M.
type humanTicks struct{ plot.Ticker }

// Ticks implements plot.Ticker.
func (t humanTicks) Ticks(min, max float64) []plot.Tick {
	ts := t.Ticker.Ticks(min, max)
	for i := range ts {
		if ts[i].Label != "" {
			ts[i].Label = human(ts[i].Value)
		}
	}
	return ts
}

// human formats v compactly: 0.5, 25, 250, 2.5k, 10k, 1M, 1G.
func human(v float64) string {
	for _, u := range []struct {
		f float64
		s string
	}{{1e9, "G"}, {1e6, "M"}, {1e3, "k"}} {
		if math.Abs(v) >= u.f {
			return strconv.FormatFloat(v/u.f, 'g', 3, 64) + u.s
		}
	}
	return strconv.FormatFloat(v, 'g', 3, 64)
}

// swatch is a legend thumbnail: a filled square.
type swatch struct{ c color.Color }

// Thumbnail implements plot.Thumbnailer.
func (s swatch) Thumbnail(c *draw.Canvas) {
	c.FillPolygon(s.c, []vg.Point{{X: c.Min.X, Y: c.Min.Y}, {X: c.Max.X, Y: c.Min.Y}, {X: c.Max.X, Y: c.Max.Y}, {X: c.Min.X, Y: c.Max.Y}})
}

// palette gives distinguishable colours; Sluice's series come first and
// take the blues, the floor takes grey.
var palette = []color.Color{
	color.RGBA{0x1f, 0x4e, 0x9a, 0xff}, color.RGBA{0x56, 0x9c, 0xd8, 0xff}, color.RGBA{0x9e, 0xc9, 0xef, 0xff},
	color.RGBA{0xd9, 0x5f, 0x02, 0xff}, color.RGBA{0x1b, 0x9e, 0x77, 0xff}, color.RGBA{0xe7, 0x29, 0x8a, 0xff},
	color.RGBA{0x66, 0xa6, 0x1e, 0xff}, color.RGBA{0xe6, 0xab, 0x02, 0xff}, color.RGBA{0xa6, 0x76, 0x1d, 0xff},
	color.RGBA{0x75, 0x70, 0xb3, 0xff}, color.RGBA{0xb2, 0x22, 0x22, 0xff}, color.RGBA{0x2f, 0x4f, 0x4f, 0xff},
}

// floorGreys colour the floors, which are no library.
var floorGreys = []color.Color{
	color.RGBA{0x99, 0x99, 0x99, 0xff}, color.RGBA{0x55, 0x55, 0x55, 0xff}, color.RGBA{0xc8, 0xc8, 0xc8, 0xff},
}

// seriesOrder sorts implementation names: Sluice first, then peers, then
// the floor, then models, each in order of appearance.
func seriesOrder(impls []string) []string {
	var out []string
	for _, k := range []Kind{KindSluice, KindPeer, KindFloor, KindModel} {
		for _, im := range impls {
			if kindOf(im) == k && !slices.Contains(out, im) {
				out = append(out, im)
			}
		}
	}
	return out
}

// colorsFor assigns a colour to each series.
func colorsFor(series []string) map[string]color.Color {
	m := map[string]color.Color{}
	i, f := 0, 0
	for _, s := range series {
		if kindOf(s) == KindFloor {
			m[s] = floorGreys[f%len(floorGreys)]
			f++
			continue
		}
		m[s] = palette[i%len(palette)]
		i++
	}
	return m
}

// newBarPlot returns a plot of groups as horizontal bars, on a log scale
// when the values span more than a factor of logSpread, and its height.
func newBarPlot(title, xLabel string, groups []group, legend bool) (*plot.Plot, vg.Length) {
	var series []string
	lo, hi := math.Inf(1), 0.0
	for _, g := range groups {
		for _, b := range g.bars {
			series = append(series, b.series)
			lo, hi = min(lo, b.value), max(hi, b.value)
		}
	}
	series = seriesOrder(series)
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = xLabel
	h := &hbars{groups: groups, colors: colorsFor(series), barH: 1}
	h.text = p.X.Tick.Label
	h.text.Font.Size = vg.Points(7)
	h.text.XAlign = draw.XLeft
	h.text.YAlign = draw.YCenter
	if lo > 0 && hi/lo > logSpread {
		h.base = math.Pow(10, math.Floor(math.Log10(lo)))
		p.X.Scale = plot.LogScale{}
		p.X.Tick.Marker = humanTicks{plot.LogTicks{Prec: -1}}
		p.X.Label.Text += " (log scale)"
		p.X.Max = hi * 3 // room for the value labels
	} else {
		p.X.Max = hi * 1.25
		p.X.Tick.Marker = humanTicks{plot.DefaultTicks{}}
	}
	p.X.Min = h.base
	p.Add(h, plotter.NewGrid())
	_, centres := h.layout()
	var ticks []plot.Tick
	for i, g := range groups {
		ticks = append(ticks, plot.Tick{Value: centres[i], Label: g.label})
	}
	p.Y.Tick.Marker = plot.ConstantTicks(ticks)
	p.Y.Padding = 0
	_, _, _, ymax := h.DataRange()
	p.Y.Max = ymax + h.barH/2
	if legend {
		p.Y.Max += float64(len(series)) * h.barH // room for the legend above the bars
		for _, s := range series {
			p.Legend.Add(s, swatch{h.colors[s]})
		}
		p.Legend.Top = true
		p.Legend.Left = false
		p.Legend.Padding = vg.Points(2)
	}
	bars := 0
	for _, g := range groups {
		bars += len(g.bars) + 1
	}
	if legend {
		bars += len(series)
	}
	return p, vg.Points(float64(120 + 11*bars))
}

// logSpread is the ratio of largest to smallest value past which a bar
// plot goes to a log scale.
const logSpread = 20

// nsPlot plots ns/op per implementation in every workload compared by
// ns/op that has a peer, Sluice's headline implementations only.
func nsPlot(res *Results) (*plot.Plot, string, vg.Length, vg.Length, bool) {
	order, names := res.workloads()
	var groups []group
	for _, wl := range order {
		if isDurable(wl) || res.unitOf(names[wl]) != "ns/op" {
			continue
		}
		if _, _, ok := res.fastestPeer(names[wl], "ns/op"); !ok {
			continue
		}
		var impls []string
		for _, n := range names[wl] {
			_, im := split(n)
			if kindOf(im) != KindSluice || slices.Contains(headline, im) {
				impls = append(impls, im)
			}
		}
		g := group{label: wl}
		for _, im := range seriesOrder(impls) {
			if v, ok := res.Median(benchName(wl, im), "ns/op"); ok {
				g.bars = append(g.bars, bar{series: im, label: num(v), value: v})
			}
		}
		groups = append(groups, g)
	}
	if len(groups) == 0 {
		return nil, "", 0, 0, false
	}
	p, h := newBarPlot("Time per decision, by workload (median of runs)", "ns/op", groups, true)
	return p, "ns-per-op.svg", vg.Points(720), max(h, vg.Points(360)), true
}

// bytesPlot plots B/key per implementation of BytesPerKey.
func bytesPlot(res *Results) (*plot.Plot, string, vg.Length, vg.Length, bool) {
	_, names := res.workloads()
	var impls []string
	for _, n := range names["BytesPerKey"] {
		_, im := split(n)
		impls = append(impls, im)
	}
	var groups []group
	for _, im := range seriesOrder(impls) {
		if v, ok := res.Median(benchName("BytesPerKey", im), "B/key"); ok {
			groups = append(groups, group{label: im, bars: []bar{{series: im, label: num(v), value: v}}})
		}
	}
	if len(groups) == 0 {
		return nil, "", 0, 0, false
	}
	p, h := newBarPlot("Heap per key with 1,000,000 keys live (median of runs)", "bytes per key", groups, false)
	return p, "bytes-per-key.svg", vg.Points(600), max(h, vg.Points(240)), true
}

// throughputPlot plots decisions per second against concurrent callers:
// Sync mode per store from SyncConcurrency (one line per store), and the
// Interval mode and memory engine from DurableParallel, which runs
// GOMAXPROCS goroutines (one point per configuration).
func throughputPlot(res *Results) (*plot.Plot, string, vg.Length, vg.Length, bool) {
	_, names := res.workloads()
	p := plot.New()
	p.Title.Text = "Durable backends: decisions per second against concurrent callers"
	p.X.Label.Text = "concurrent callers (log scale)"
	p.Y.Label.Text = "decisions/s (median of runs, log scale)"
	p.X.Scale, p.Y.Scale = plot.LogScale{}, plot.LogScale{}
	p.Y.Tick.Marker = humanTicks{plot.LogTicks{Prec: -1}}
	p.Legend.Top, p.Legend.Left = true, true
	i := 0
	xs := map[float64]bool{}
	// Sync mode: store/callers-N.
	var stores []string
	points := map[string]plotter.XYs{}
	for _, n := range names["SyncConcurrency"] {
		_, impl := split(n)
		store, callers, ok := strings.Cut(impl, "/callers-")
		c, err := strconv.Atoi(callers)
		v, okv := res.Median(n, "decisions/s")
		if !ok || err != nil || c <= 0 || !okv || v <= 0 {
			continue
		}
		if !slices.Contains(stores, store) {
			stores = append(stores, store)
		}
		points[store] = append(points[store], plotter.XY{X: float64(c), Y: v})
		xs[float64(c)] = true
	}
	for _, s := range stores {
		pts := points[s]
		slices.SortFunc(pts, func(a, b plotter.XY) int { return int(a.X - b.X) })
		l, sc, err := plotter.NewLinePoints(pts)
		if err != nil {
			continue
		}
		l.Color, sc.Color = palette[i%len(palette)], palette[i%len(palette)]
		l.Width = vg.Points(1.5)
		sc.Shape = draw.CircleGlyph{}
		i++
		p.Add(l, sc)
		p.Legend.Add(s+", sync mode (SyncConcurrency)", l, sc)
	}
	// Interval mode and memory: DurableParallel at GOMAXPROCS.
	procs, err := strconv.Atoi(res.Config["gomaxprocs"])
	if err != nil || procs <= 0 {
		procs = 0
	}
	shapes := []draw.GlyphDrawer{draw.PyramidGlyph{}, draw.BoxGlyph{}, draw.CircleGlyph{}, draw.TriangleGlyph{}, draw.SquareGlyph{}, draw.RingGlyph{}}
	j := 0
	for _, n := range names["DurableParallel"] {
		_, impl := split(n)
		cfg, ok := strings.CutSuffix(impl, "-token_bucket")
		v, okv := res.Median(n, "ns/op")
		if !ok || procs == 0 || !okv || v <= 0 {
			continue
		}
		sc, err := plotter.NewScatter(plotter.XYs{{X: float64(procs), Y: 1e9 / v}})
		if err != nil {
			continue
		}
		sc.Color = palette[(i+2)%len(palette)] // past the light blue
		sc.Shape = shapes[j%len(shapes)]
		sc.Radius = vg.Points(4)
		i++
		j++
		p.Add(sc)
		p.Legend.Add(fmt.Sprintf("%s (DurableParallel: %d goroutines, token_bucket)", cfg, procs), sc)
		xs[float64(procs)] = true
	}
	if len(xs) == 0 {
		return nil, "", 0, 0, false
	}
	var ticks []plot.Tick
	for x := range xs {
		ticks = append(ticks, plot.Tick{Value: x, Label: strconv.Itoa(int(x))})
	}
	slices.SortFunc(ticks, func(a, b plot.Tick) int { return int(a.Value - b.Value) })
	p.X.Tick.Marker = plot.ConstantTicks(ticks)
	p.X.Min, p.X.Max = p.X.Min/1.5, p.X.Max*1.5
	p.Y.Min, p.Y.Max = p.Y.Min/2, p.Y.Max*30 // room for the legend
	p.Add(plotter.NewGrid())
	return p, "durable-throughput.svg", vg.Points(640), vg.Points(420), true
}
