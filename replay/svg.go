package replay

import (
	"fmt"
	"html"
	"math"
	"strconv"
	"strings"
	"time"
)

// The plots are drawn by hand as SVG: a few lines, polylines and labels,
// so that a report needs no script and no library and prints as it shows.

const (
	plotW, plotH                  = 720, 300
	marginL, marginR, marginT, mB = 64, 24, 36, 48
)

var palette = []string{"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2"}

// svgDoc collects one plot's elements.
type svgDoc struct {
	b strings.Builder
}

func (s *svgDoc) printf(format string, args ...any) { fmt.Fprintf(&s.b, format, args...) }

func (s *svgDoc) start(title string) {
	s.printf(`<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 %d %d" width="%d" height="%d" font-family="sans-serif" font-size="12">`+"\n", plotW, plotH, plotW, plotH)
	s.printf(`<rect width="%d" height="%d" fill="#fff"/>`+"\n", plotW, plotH)
	s.printf(`<text x="%d" y="20" font-size="14" font-weight="bold">%s</text>`+"\n", marginL, esc(title))
}

func (s *svgDoc) end() string {
	s.printf("</svg>\n")
	return s.b.String()
}

func esc(s string) string { return html.EscapeString(s) }

// f writes a coordinate with one decimal.
func f(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) }

// frame draws the axes' box.
func (s *svgDoc) frame() {
	s.printf(`<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#888"/>`+"\n", marginL, marginT, plotW-marginL-marginR, plotH-marginT-mB)
}

// niceTicks returns about n round tick values covering [lo, hi].
func niceTicks(lo, hi float64, n int) []float64 {
	if hi <= lo {
		hi = lo + 1
	}
	raw := (hi - lo) / float64(n)
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	step := mag
	for _, m := range []float64{1, 2, 5, 10} {
		if m*mag >= raw {
			step = m * mag
			break
		}
	}
	var out []float64
	for v := math.Ceil(lo/step) * step; v <= hi+step*1e-9; v += step {
		out = append(out, v)
	}
	return out
}

// logTicks returns 1, 2, 5 times the powers of ten within [lo, hi].
func logTicks(lo, hi float64) []float64 {
	var out []float64
	for p := math.Floor(math.Log10(lo)); p <= math.Ceil(math.Log10(hi)); p++ {
		for _, m := range []float64{1, 2, 5} {
			v := m * math.Pow(10, p)
			if v >= lo*(1-1e-9) && v <= hi*(1+1e-9) {
				out = append(out, v)
			}
		}
	}
	return out
}

func fmtCount(v float64) string {
	switch {
	case v >= 1e6 && math.Mod(v, 1e6) == 0:
		return strconv.FormatFloat(v/1e6, 'f', -1, 64) + "M"
	case v >= 1e3 && math.Mod(v, 1e3) == 0:
		return strconv.FormatFloat(v/1e3, 'f', -1, 64) + "k"
	}
	return strconv.FormatFloat(v, 'f', -1, 64)
}

// series to plot over time.
type timeLine struct {
	name   string
	color  string
	dashed bool
	values []int64
}

// denialsSVG plots denials per bucket over the replay's span, one line
// per rule.
func denialsSVG(title string, origin int64, res time.Duration, lines []timeLine) string {
	var s svgDoc
	s.start(title)
	s.frame()
	x0, x1 := float64(marginL), float64(plotW-marginR)
	y0, y1 := float64(plotH-mB), float64(marginT)
	buckets := 1
	peak := int64(1)
	for _, l := range lines {
		buckets = max(buckets, len(l.values))
		for _, v := range l.values {
			peak = max(peak, v)
		}
	}
	yt := niceTicks(0, float64(peak), 5)
	top := yt[len(yt)-1]
	if top < float64(peak) {
		top = float64(peak)
	}
	px := func(i int) float64 { return x0 + (x1-x0)*float64(i)/float64(buckets) }
	py := func(v float64) float64 { return y0 - (y0-y1)*v/top }
	for _, v := range yt {
		s.printf(`<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="#eee"/>`+"\n", f(x0), f(py(v)), f(x1), f(py(v)))
		s.printf(`<text x="%s" y="%s" text-anchor="end">%s</text>`+"\n", f(x0-6), f(py(v)+4), fmtCount(v))
	}
	// Time ticks: about six, on whole buckets.
	span := time.Duration(buckets) * res
	layout := "15:04"
	if span > 48*time.Hour {
		layout = "Jan 2"
	}
	step := max(1, buckets/6)
	for i := 0; i <= buckets; i += step {
		t := time.Unix(0, origin+int64(i)*int64(res)).UTC()
		s.printf(`<text x="%s" y="%s" text-anchor="middle">%s</text>`+"\n", f(px(i)), f(y0+16), t.Format(layout))
	}
	s.printf(`<text x="%s" y="%d" text-anchor="middle">time (UTC), denials per %v</text>`+"\n", f((x0+x1)/2), plotH-10, res)
	for k, l := range lines {
		var pts strings.Builder
		for i, v := range l.values {
			// A step per bucket: flat across it.
			fmt.Fprintf(&pts, "%s,%s %s,%s ", f(px(i)), f(py(float64(v))), f(px(i+1)), f(py(float64(v))))
		}
		dash := ""
		if l.dashed {
			dash = ` stroke-dasharray="5,3"`
		}
		s.printf(`<polyline fill="none" stroke="%s" stroke-width="1.5"%s points="%s"/>`+"\n", l.color, dash, strings.TrimSpace(pts.String()))
		ly := marginT + 14 + 16*k
		s.printf(`<line x1="%s" y1="%d" x2="%s" y2="%d" stroke="%s" stroke-width="2"%s/>`+"\n", f(x1-150), ly-4, f(x1-130), ly-4, l.color, dash)
		s.printf(`<text x="%s" y="%d">%s</text>`+"\n", f(x1-124), ly, esc(l.name))
	}
	return s.end()
}

// needSVG plots, for one rule, the share of its callers that a limit
// would have left never denied (the distribution of their needs), with
// the rule's limit and the suggested limit marked.
func needSVG(rr *RuleReport, share float64) string {
	var s svgDoc
	s.start(fmt.Sprintf("%s: callers never denied, by limit (%s %s)", rr.Name, rr.Algorithm, limitText(rr)))
	s.frame()
	x0, x1 := float64(marginL), float64(plotW-marginR)
	y0, y1 := float64(plotH-mB), float64(marginT)
	n := len(rr.Needs) + rr.Unbounded
	if n == 0 {
		s.printf(`<text x="%s" y="%s" text-anchor="middle">no callers</text>`+"\n", f((x0+x1)/2), f((y0+y1)/2))
		return s.end()
	}
	lo, hi := 1.0, float64(rr.Limit)
	if len(rr.Needs) > 0 {
		hi = max(hi, float64(rr.Needs[len(rr.Needs)-1]))
	}
	if rr.SuggestedLimit > 0 {
		hi = max(hi, float64(rr.SuggestedLimit))
	}
	hi *= 1.1
	logScale := hi/lo > 50
	var px func(v float64) float64
	var xt []float64
	if logScale {
		lhi := math.Log10(hi)
		px = func(v float64) float64 { return x0 + (x1-x0)*math.Log10(max(v, lo))/lhi }
		xt = logTicks(lo, hi)
	} else {
		px = func(v float64) float64 { return x0 + (x1-x0)*v/hi }
		xt = niceTicks(0, hi, 8)
	}
	py := func(q float64) float64 { return y0 - (y0-y1)*q }
	for _, q := range []float64{0, 0.25, 0.5, 0.75, 1} {
		s.printf(`<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="#eee"/>`+"\n", f(x0), f(py(q)), f(x1), f(py(q)))
		s.printf(`<text x="%s" y="%s" text-anchor="end">%d%%</text>`+"\n", f(x0-6), f(py(q)+4), int(q*100))
	}
	for _, v := range xt {
		if px(v) > x1 {
			continue
		}
		s.printf(`<text x="%s" y="%s" text-anchor="middle">%s</text>`+"\n", f(px(v)), f(y0+16), fmtCount(v))
	}
	scale := "limit"
	if logScale {
		scale = "limit (log scale)"
	}
	s.printf(`<text x="%s" y="%d" text-anchor="middle">%s; each caller's need is its peak use under the rule's %s</text>`+"\n", f((x0+x1)/2), plotH-10, scale, rr.Algorithm)
	// The empirical distribution as a step line.
	var pts strings.Builder
	fmt.Fprintf(&pts, "%s,%s ", f(px(lo)), f(py(0)))
	for i := 0; i < len(rr.Needs); {
		v := rr.Needs[i]
		j := i
		for j < len(rr.Needs) && rr.Needs[j] == v {
			j++
		}
		fmt.Fprintf(&pts, "%s,%s %s,%s ", f(px(float64(v))), f(py(float64(i)/float64(n))), f(px(float64(v))), f(py(float64(j)/float64(n))))
		i = j
	}
	fmt.Fprintf(&pts, "%s,%s", f(x1), f(py(float64(len(rr.Needs))/float64(n))))
	s.printf(`<polyline fill="none" stroke="#1f77b4" stroke-width="2" points="%s"/>`+"\n", pts.String())
	// The share asked for.
	s.printf(`<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="#2ca02c" stroke-dasharray="2,3"/>`+"\n", f(x0), f(py(share)), f(x1), f(py(share)))
	// The rule's limit.
	// A label right of its line, or left of it past the middle, so that
	// it stays inside the plot.
	label := func(x, y float64, color, text string) {
		anchor, dx := "start", 4.0
		if x > (x0+x1)/2 {
			anchor, dx = "end", -4
		}
		s.printf(`<text x="%s" y="%s" fill="%s" text-anchor="%s">%s</text>`+"\n", f(x+dx), f(y), color, anchor, esc(text))
	}
	lx := px(float64(rr.Limit))
	s.printf(`<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="#d62728" stroke-width="1.5"/>`+"\n", f(lx), f(y0), f(lx), f(y1))
	label(lx, y1+28, "#d62728", fmt.Sprintf("limit %s: %s never denied", num(rr.Limit), pctf(rr.CoveredAtLimit, n)))
	if rr.SuggestedLimit > 0 {
		sx := px(float64(rr.SuggestedLimit))
		s.printf(`<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="#2ca02c" stroke-width="1.5" stroke-dasharray="6,3"/>`+"\n", f(sx), f(y0), f(sx), f(y1))
		label(sx, y1+46, "#2ca02c", fmt.Sprintf("%s of callers: limit %s", shareLabel(share), num(rr.SuggestedLimit)))
	}
	return s.end()
}
