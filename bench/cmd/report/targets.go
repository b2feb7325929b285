package main

import (
	"fmt"
	"io"
	"math"
	"regexp"
	"strconv"
	"strings"

	"github.com/sluice-go/sluice/bench"
)

// Status is the outcome of a target.
type Status int

// The outcomes of a target.
const (
	NotMeasured Status = iota // the data it needs is not in this run
	Hit
	Missed
)

// Line is one target's outcome as the report prints it.
type Line struct {
	Status Status
	// Goal states the target.
	Goal string
	// Measured gives the figures compared.
	Measured string
	// Margin is how far past (Hit) or short of (Missed) the bound the
	// measure is, "by 18%"; for NotMeasured, why.
	Margin string
}

// String formats l as a list item's text, such as
// "**missed** — HotKey, token_bucket below every peer: 88.4 ns/op against golimiter's 69.4 — missed by 27%".
func (l Line) String() string {
	switch l.Status {
	case Hit:
		return fmt.Sprintf("**hit** — %s: %s — hit %s", l.Goal, l.Measured, l.Margin)
	case Missed:
		return fmt.Sprintf("**missed** — %s: %s — missed %s", l.Goal, l.Measured, l.Margin)
	}
	if l.Margin == "" {
		return fmt.Sprintf("**not measured in this run** — %s", l.Goal)
	}
	return fmt.Sprintf("**not measured in this run** — %s (%s)", l.Goal, l.Margin)
}

// pct formats a relative margin: "by 18%", or with one decimal under 10%.
func pct(f float64) string {
	f = math.Abs(100 * f)
	if f < 10 {
		return fmt.Sprintf("by %.1f%%", f)
	}
	return fmt.Sprintf("by %.0f%%", f)
}

// below compares a measure v that must stay strictly under bound:
// the margin is relative to the bound.
func below(v, bound float64) (Status, string) {
	if bound <= 0 {
		if v < bound {
			return Hit, fmt.Sprintf("by %s", num(bound-v))
		}
		return Missed, fmt.Sprintf("by %s", num(v-bound))
	}
	if v < bound {
		return Hit, pct((bound - v) / bound)
	}
	return Missed, pct((v - bound) / bound)
}

// allocMiss is the outcome of a target requiring 0 allocs/op that
// allocates a: missed by a allocs/op, with the time's outcome beside.
func allocMiss(a float64, timeStatus Status, timeMargin string) (Status, string) {
	word := "hit"
	if timeStatus == Missed {
		word = "missed"
	}
	return Missed, fmt.Sprintf("by %s allocs/op (0 required; time %s %s)", trim(a), word, timeMargin)
}

// PeerWorkloads are the workloads in which Sluice's memory token bucket
// and GCRA must be faster than every peer, with no allocation.
var PeerWorkloads = bench.MemoryWorkloads

// PeerAlgorithms are the Sluice implementations those targets are about.
var PeerAlgorithms = []string{"token_bucket", "gcra"}

// MaxBytesPerKeyRatio bounds Sluice's B/key at 1M keys over the best
// peer's.
const MaxBytesPerKeyRatio = 0.5

// MiddlewarePeers are the middlewares whose overhead Sluice's must be
// under.
var MiddlewarePeers = []string{"httprate", "golimiter"}

// MaxServeOverhead bounds what `sluice serve` adds to the p50 latency of a
// direct request, as a fraction.
const MaxServeOverhead = 0.15

// PeerTargets checks the targets set against the peers, in report order:
// speed and allocations per workload and algorithm, bytes per key,
// middleware overhead, and the latency `sluice serve` adds (from load, nil
// when the load test did not run).
func PeerTargets(res *Results, load *Fragment) []Line {
	_, names := res.workloads()
	var out []Line
	for _, wl := range PeerWorkloads {
		for _, a := range PeerAlgorithms {
			out = append(out, fasterThanPeers(res, names[wl], wl, a))
		}
	}
	for _, wl := range PeerWorkloads {
		out = append(out, bestRatio(res, names[wl], wl))
	}
	out = append(out, parallelAgainst(res, names["Parallel10k"], false), parallelAgainst(res, names["Parallel10k"], true))
	for _, a := range PeerAlgorithms {
		out = append(out, bytesPerKey(res, names["BytesPerKey"], a))
	}
	for _, path := range []string{"allowed", "denied"} {
		out = append(out, middlewareOverhead(res, path))
	}
	return append(out, serveOverhead(load))
}

func fasterThanPeers(res *Results, names []string, wl, algo string) Line {
	l := Line{Goal: fmt.Sprintf("%s, sluice-%s: fewer ns/op than every peer, 0 allocs/op", wl, algo)}
	n := benchName(wl, "sluice-"+algo)
	v, ok := res.Median(n, "ns/op")
	if !ok {
		return l
	}
	peer, pv, ok := res.fastestPeer(names, "ns/op")
	if !ok {
		l.Margin = "no peer measured"
		return l
	}
	a, _ := res.Median(n, "allocs/op")
	l.Measured = fmt.Sprintf("%s ns/op, %s allocs/op; fastest peer %s %s ns/op", num(v), trim(a), peer, num(pv))
	l.Status, l.Margin = below(v, pv)
	if a != 0 {
		l.Status, l.Margin = allocMiss(a, l.Status, l.Margin)
	}
	return l
}

// MaxBestRatio bounds, on every PeerWorkload, the best Sluice row's ns/op
// (any variant) over the fastest peer's.
const MaxBestRatio = 0.85

// ParallelPeer is the peer Parallel10k is held against by MaxBestRatio.
const ParallelPeer = "xtimerate"

// isDefault reports whether a Sluice implementation runs as users run it by
// default: engine.Apply with the system clock, no "+variant" suffix.
func isDefault(impl string) bool {
	return kindOf(impl) == KindSluice && !strings.Contains(impl, "+") && !isFake(impl)
}

// isFake reports whether impl runs with a clock that never moves, which no
// deployment has: it shows the clock's share, and is never "best".
func isFake(impl string) bool { return strings.HasSuffix(impl, "-fakeclock") }

// bestSluice returns, among names, the Sluice implementation with the
// smallest median ns/op: of every variant, or only of the defaults.
func (r *Results) bestSluice(names []string, defaults bool) (impl string, v float64, ok bool) {
	for _, n := range names {
		_, im := split(n)
		if kindOf(im) != KindSluice || isFake(im) || defaults && !isDefault(im) {
			continue
		}
		if m, found := r.Median(n, "ns/op"); found && (!ok || m < v) {
			impl, v, ok = im, m, true
		}
	}
	return impl, v, ok
}

// Variant returns the variant suffix of a Sluice implementation, "default"
// when it has none: "sluice-gcra+coarse+key" is "+coarse+key".
func Variant(impl string) string {
	if i := strings.IndexByte(impl, '+'); i >= 0 {
		return impl[i:]
	}
	return "default"
}

func bestRatio(res *Results, names []string, wl string) Line {
	l := Line{Goal: fmt.Sprintf("%s: the best Sluice row ≤ %s× the fastest peer's ns/op, 0 allocs/op", wl, trim(MaxBestRatio))}
	im, v, ok := res.bestSluice(names, false)
	if !ok {
		return l
	}
	peer, pv, ok := res.fastestPeer(names, "ns/op")
	if !ok {
		l.Margin = "no peer measured"
		return l
	}
	n := benchName(wl, im)
	a, _ := res.Median(n, "allocs/op")
	l.Measured = fmt.Sprintf("%s %s ns/op = %.2f× %s's %s, %s allocs/op", im, num(v), v/pv, peer, num(pv), trim(a))
	if dim, dv, ok := res.bestSluice(names, true); ok {
		l.Measured += fmt.Sprintf(" (default: %s %.2f×)", dim, dv/pv)
	}
	l.Status, l.Margin = atMost(v/pv, MaxBestRatio)
	if a != 0 {
		l.Status, l.Margin = allocMiss(a, l.Status, l.Margin)
	}
	return l
}

// parallelAgainst checks Parallel10k against x/time/rate alone: the best
// Sluice row, or the best default row.
func parallelAgainst(res *Results, names []string, defaults bool) Line {
	which := "the best Sluice row"
	if defaults {
		which = "the best default Sluice row"
	}
	l := Line{Goal: fmt.Sprintf("Parallel10k: %s ≤ %s× %s's ns/op", which, trim(MaxBestRatio), ParallelPeer)}
	im, v, ok := res.bestSluice(names, defaults)
	if !ok {
		return l
	}
	pv, ok := res.Median(benchName("Parallel10k", ParallelPeer), "ns/op")
	if !ok {
		l.Margin = ParallelPeer + " not measured"
		return l
	}
	l.Measured = fmt.Sprintf("%s %s ns/op = %.2f× %s's %s", im, num(v), v/pv, ParallelPeer, num(pv))
	l.Status, l.Margin = atMost(v/pv, MaxBestRatio)
	return l
}

// atMost compares a ratio that must not exceed bound; the margin is
// relative to the bound.
func atMost(ratio, bound float64) (Status, string) {
	if ratio <= bound {
		return Hit, pct((bound - ratio) / bound)
	}
	return Missed, pct((ratio - bound) / bound)
}

func bytesPerKey(res *Results, names []string, algo string) Line {
	l := Line{Goal: fmt.Sprintf("BytesPerKey, sluice-%s: at most %s× the best peer's bytes per key at 1M keys", algo, trim(MaxBytesPerKeyRatio))}
	v, ok := res.Median(benchName("BytesPerKey", "sluice-"+algo), "B/key")
	if !ok {
		return l
	}
	peer, pv, ok := res.fastestPeer(names, "B/key")
	if !ok {
		l.Margin = "no peer measured"
		return l
	}
	bound := MaxBytesPerKeyRatio * pv
	l.Measured = fmt.Sprintf("%s B/key = %.2f× %s's %s", num(v), v/pv, peer, num(pv))
	if v <= bound {
		l.Status, l.Margin = Hit, pct((bound-v)/bound)
		if v == bound {
			l.Margin = "exactly"
		}
	} else {
		l.Status, l.Margin = Missed, pct((v-bound)/bound)
	}
	return l
}

func middlewareOverhead(res *Results, path string) Line {
	wl := "Middleware/" + path
	l := Line{Goal: fmt.Sprintf("Middleware, %s: Sluice's overhead over the bare handler lower than %s's", path, strings.Join(MiddlewarePeers, "'s and "))}
	floor, ok := res.Median(benchName(wl, "floor"), "ns/op")
	if !ok {
		return l
	}
	overhead := func(impl string) (float64, bool) {
		v, ok := res.Median(benchName(wl, impl), "ns/op")
		return v - floor, ok
	}
	s, ok := overhead("sluice")
	if !ok {
		return l
	}
	best, bestV := "", 0.0
	var parts []string
	for _, p := range MiddlewarePeers {
		v, ok := overhead(p)
		if !ok {
			l.Margin = p + " not measured"
			return l
		}
		parts = append(parts, fmt.Sprintf("%s %s", p, num(v)))
		if best == "" || v < bestV {
			best, bestV = p, v
		}
	}
	l.Measured = fmt.Sprintf("Sluice adds %s ns/op to the handler's %s; %s", num(s), num(floor), strings.Join(parts, ", "))
	l.Status, l.Margin = below(s, bestV)
	l.Margin += " (against " + best + ")"
	return l
}

// LoadLine is the machine-readable line a load-test fragment carries: an
// HTML comment, on a line of its own, holding space-separated key=value
// pairs, values in microseconds:
//
//	<!-- load: p50_direct_us=412.5 p50_proxy_us=455.0 -->
//
// p50_direct_us is the median latency of requests sent straight to the
// upstream, p50_proxy_us through `sluice serve` in front of it, at the
// same load. An optional p50_bare_us is the same proxy with no rule, the
// hop alone, so the limiter's own share can be told from the proxy's.
// Other keys (p99_direct_us, rps_proxy, limited_ok=true, …) are allowed,
// whatever their values, and ignored.
type LoadLine struct {
	P50DirectUS, P50ProxyUS float64
	// P50BareUS is 0 when the line has no valid p50_bare_us.
	P50BareUS float64
}

var loadComment = regexp.MustCompile(`<!--\s*load:(.*?)-->`)

// ParseLoadLine finds the load line in a fragment. found is false when
// there is none; err says what is wrong with one that is malformed.
func ParseLoadLine(text string) (l LoadLine, found bool, err error) {
	m := loadComment.FindStringSubmatch(text)
	if m == nil {
		return l, false, nil
	}
	raw := map[string]string{}
	for _, f := range strings.Fields(m[1]) {
		k, v, ok := strings.Cut(f, "=")
		if !ok || k == "" {
			return l, true, fmt.Errorf("load line: %q is not key=value", f)
		}
		raw[k] = v
	}
	var vals [2]float64
	for i, k := range []string{"p50_direct_us", "p50_proxy_us"} {
		v, ok := raw[k]
		if !ok {
			return l, true, fmt.Errorf("load line: no %s", k)
		}
		x, err := strconv.ParseFloat(v, 64)
		if err != nil || math.IsNaN(x) || math.IsInf(x, 0) {
			return l, true, fmt.Errorf("load line: %s=%q is not a number", k, v)
		}
		if x <= 0 {
			return l, true, fmt.Errorf("load line: %s=%v, want a positive number of microseconds", k, x)
		}
		vals[i] = x
	}
	l = LoadLine{P50DirectUS: vals[0], P50ProxyUS: vals[1]}
	if x, err := strconv.ParseFloat(raw["p50_bare_us"], 64); err == nil && x > 0 && !math.IsInf(x, 0) {
		l.P50BareUS = x
	}
	return l, true, nil
}

func serveOverhead(load *Fragment) Line {
	l := Line{Goal: fmt.Sprintf("`sluice serve` adds under %.0f%% to p50 latency", 100*MaxServeOverhead)}
	if load == nil {
		return l
	}
	ll, found, err := ParseLoadLine(load.Text)
	switch {
	case err != nil:
		l.Margin = load.Path + ": " + err.Error()
		return l
	case !found:
		l.Margin = load.Path + " has no `<!-- load: p50_direct_us=… p50_proxy_us=… -->` line"
		return l
	}
	added := ll.P50ProxyUS/ll.P50DirectUS - 1
	l.Measured = fmt.Sprintf("p50 %s µs direct, %s µs through the proxy: adds %.1f%%", num(ll.P50DirectUS), num(ll.P50ProxyUS), 100*added)
	if ll.P50BareUS > 0 {
		l.Measured += fmt.Sprintf("; the same proxy with no rule %s µs, so the limiter's own share is %+.1f%%",
			num(ll.P50BareUS), 100*(ll.P50ProxyUS/ll.P50BareUS-1))
	}
	points := math.Abs(100 * (added - MaxServeOverhead))
	if added < MaxServeOverhead {
		l.Status = Hit
	} else {
		l.Status = Missed
	}
	l.Margin = fmt.Sprintf("by %.1f percentage points", points)
	return l
}

// Target is an absolute goal of the design.
type Target struct {
	Goal  string // as stated
	Bench string // benchmark measured
	Unit  string // its metric
	Max   float64
	// ZeroAllocs also requires a median of 0 allocs/op.
	ZeroAllocs bool
}

// Targets are the absolute goals set for Sluice.
var Targets = []Target{
	{Goal: "algo.Step ≤ 25 ns/op, 0 allocs", Bench: "BenchmarkStep/token_bucket", Unit: "ns/op", Max: 25, ZeroAllocs: true},
	{Goal: "algo.Step ≤ 25 ns/op, 0 allocs", Bench: "BenchmarkStep/gcra", Unit: "ns/op", Max: 25, ZeroAllocs: true},
	{Goal: "algo.Step ≤ 25 ns/op, 0 allocs", Bench: "BenchmarkStep/leaky_bucket", Unit: "ns/op", Max: 25, ZeroAllocs: true},
	{Goal: "algo.Step ≤ 25 ns/op, 0 allocs", Bench: "BenchmarkStep/fixed_window", Unit: "ns/op", Max: 25, ZeroAllocs: true},
	{Goal: "algo.Step ≤ 25 ns/op, 0 allocs", Bench: "BenchmarkStep/sliding_counter", Unit: "ns/op", Max: 25, ZeroAllocs: true},
	{Goal: "algo.Step ≤ 25 ns/op, 0 allocs", Bench: "BenchmarkStep/sliding_log", Unit: "ns/op", Max: 25, ZeroAllocs: true},
	{Goal: "engine + memory, hot key ≤ 50 ns/op, 0 allocs", Bench: "BenchmarkHotKey/sluice-token_bucket", Unit: "ns/op", Max: 50, ZeroAllocs: true},
	{Goal: "engine + memory, hot key ≤ 50 ns/op, 0 allocs", Bench: "BenchmarkHotKey/sluice-gcra", Unit: "ns/op", Max: 50, ZeroAllocs: true},
	{Goal: "Parallel10k ≤ 40 ns/op", Bench: "BenchmarkParallel10k/sluice-token_bucket", Unit: "ns/op", Max: 40},
	{Goal: "Parallel10k ≤ 40 ns/op", Bench: "BenchmarkParallel10k/sluice-gcra", Unit: "ns/op", Max: 40},
	{Goal: "≤ 80 bytes per token-bucket key at 1M keys", Bench: "BenchmarkBytesPerKey/sluice-token_bucket", Unit: "B/key", Max: 80},
}

// Check says whether res meets t, and by how much.
func (t Target) Check(res *Results) Line {
	l := Line{Goal: t.Goal + " (" + strings.TrimPrefix(t.Bench, "Benchmark") + ")"}
	v, ok := res.Median(t.Bench, t.Unit)
	if !ok {
		return l
	}
	l.Measured = num(v) + " " + t.Unit
	if v <= t.Max {
		l.Status, l.Margin = Hit, pct((t.Max-v)/t.Max)
		if v == t.Max {
			l.Margin = "exactly"
		}
	} else {
		l.Status, l.Margin = Missed, pct((v-t.Max)/t.Max)
	}
	if t.ZeroAllocs {
		a, _ := res.Median(t.Bench, "allocs/op")
		l.Measured += fmt.Sprintf(", %s allocs/op", trim(a))
		if a != 0 {
			l.Status, l.Margin = allocMiss(a, l.Status, l.Margin)
		}
	}
	return l
}

// Unmeasurable are the peers this suite cannot build, with the reason.
var Unmeasurable = [][2]string{
	{"github.com/mennanov/limiters", "refused by the Go module proxy this machine reaches, so it cannot be added to go.mod"},
	{"github.com/clipperhouse/rate", "refused by the Go module proxy this machine reaches, so it cannot be added to go.mod"},
}

// writeUnmeasurable writes the "Not measurable here" section.
func writeUnmeasurable(w io.Writer) {
	fmt.Fprintf(w, "\n## Not measurable here\n\n")
	for _, u := range Unmeasurable {
		fmt.Fprintf(w, "- `%s`: %s.\n", u[0], u[1])
	}
}
