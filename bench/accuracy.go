package bench

import (
	"errors"
	"fmt"
	"io"
	"runtime"
	"slices"
	"strings"
	"time"

	"golang.org/x/time/rate"

	"github.com/sluice-go/sluice/algo"
	"github.com/sluice-go/sluice/engine"
)

// Phase is one part of a Trace: a name for the report and the times of its
// requests, as offsets from the trace's start.
type Phase struct {
	Name    string
	Offsets []time.Duration
}

// Trace is a sequence of requests from one client, replayed against a
// limiter of Limit per Window.
type Trace struct {
	Limit  int64
	Window time.Duration
	Phases []Phase
}

// Times returns the offsets of every request of every phase, in order.
func (tr Trace) Times() []time.Duration {
	var out []time.Duration
	for _, p := range tr.Phases {
		out = append(out, p.Offsets...)
	}
	return out
}

// Validate reports whether the trace can be replayed: a positive limit and
// window, and request times that never go backwards.
func (tr Trace) Validate() error {
	if tr.Limit <= 0 || tr.Window <= 0 {
		return fmt.Errorf("bench: a trace needs a positive limit and window, got %d per %v", tr.Limit, tr.Window)
	}
	times := tr.Times()
	if len(times) == 0 {
		return errors.New("bench: the trace has no requests")
	}
	for i, t := range times {
		if t < 0 {
			return fmt.Errorf("bench: request %d is at %v, before the trace's start", i, t)
		}
		if i > 0 && t < times[i-1] {
			return fmt.Errorf("bench: request %d at %v comes before request %d at %v", i, t, i-1, times[i-1])
		}
	}
	return nil
}

// every returns n offsets from start, step apart.
func every(start, step time.Duration, n int) []time.Duration {
	out := make([]time.Duration, n)
	for i := range out {
		out[i] = start + time.Duration(i)*step
	}
	return out
}

// BurstyTrace is the accuracy trace: 10 requests per 1 s window, and
//
//   - burst: 15 requests 5 ms apart into a fresh key;
//   - boundary: after an idle gap, 10 requests 20 ms apart just before the
//     3 s boundary (2.80-2.98 s) and 10 just after it (3.02-3.20 s);
//   - opened boundary: one request at 5 s, then 9 just before 6 s and 10
//     just after it, so that a fixed window opened by a request (rather
//     than aligned to the clock) also sees a boundary under the burst;
//   - steady: 44 requests 45 ms apart from 7.5 s, about 22 a second for
//     2 s, over twice the rate.
//
// No two requests are exactly a window apart, so whether a window's ends
// are open or closed never changes an answer.
func BurstyTrace() Trace {
	ms := time.Millisecond
	return Trace{
		Limit:  10,
		Window: time.Second,
		Phases: []Phase{
			{"burst", every(0, 5*ms, 15)},
			{"boundary", append(every(2800*ms, 20*ms, 10), every(3020*ms, 20*ms, 10)...)},
			{"opened boundary", append(append([]time.Duration{5000 * ms}, every(5820*ms, 20*ms, 9)...), every(6020*ms, 20*ms, 10)...)},
			{"steady", every(7500*ms, 45*ms, 44)},
		},
	}
}

// IdealAdmits returns what a strict limit of limit per any window admits of
// requests at times (in order): a request at t is admitted if and only if
// fewer than limit requests were admitted in the window before it, the
// interval (t-window, t]. Admitting greedily like this keeps every interval
// of length window at limit or fewer admitted, and no schedule that does so
// admits more requests of the trace: swapping any admitted request for an
// earlier one that greedy admits never breaks a window.
func IdealAdmits(times []time.Duration, limit int64, window time.Duration) []bool {
	out := make([]bool, len(times))
	var admitted []time.Duration
	first := 0 // the first admitted request still inside the window
	for i, t := range times {
		for first < len(admitted) && admitted[first] <= t-window {
			first++
		}
		if int64(len(admitted)-first) < limit {
			admitted = append(admitted, t)
			out[i] = true
		}
	}
	return out
}

// WorstWindow returns the largest number of admitted requests in any
// interval [s, s+window): the number a user sees pass in the worst window.
func WorstWindow(times []time.Duration, admitted []bool, window time.Duration) int {
	var at []time.Duration
	for i, ok := range admitted {
		if ok {
			at = append(at, times[i])
		}
	}
	slices.Sort(at)
	worst, j := 0, 0
	for i := range at {
		for j < len(at) && at[j] < at[i]+window {
			j++
		}
		worst = max(worst, j-i)
	}
	return worst
}

// AccuracyResult is one library's answers to a Trace.
type AccuracyResult struct {
	Library   string
	Algorithm string
	// Exact is true when the limiter was driven at the trace's own times;
	// false when it read the wall clock during a real-time replay.
	Exact bool
	// Times are the offsets, in the trace's time, at which the requests
	// were made: the trace's own for an exact replay, the measured ones
	// (scaled back) for a real-time replay.
	Times []time.Duration
	// Admitted are the answers, one per request.
	Admitted []bool
}

// Allowed returns the number of admitted requests.
func (r AccuracyResult) Allowed() int { return countTrue(r.Admitted) }

func countTrue(b []bool) int {
	n := 0
	for _, ok := range b {
		if ok {
			n++
		}
	}
	return n
}

// accuracyKey is the one client of a trace.
const accuracyKey = "client-1"

// traceStart is where the exact replays put the trace: a whole second, so
// that windows aligned to the clock start with the trace.
var traceStart = time.Unix(1_700_000_000, 0)

// accuracyAlgorithms are Sluice's algorithms, in the benchmarks' order.
var accuracyAlgorithms = []algo.Name{
	algo.TokenBucketName, algo.GCRAName, algo.LeakyBucketName,
	algo.FixedWindowName, algo.SlidingCounterName, algo.SlidingLogName,
}

// ReplayExact replays tr against every limiter that can be driven at given
// times, at tr.Limit per tr.Window: Sluice's six algorithms through the
// engine with an engine.FakeClock, x/time/rate through AllowN, throttled's
// GCRA through memstore.SetTimeNow, and httprate's counter, which is told
// the window. Each gets a fresh limiter and one key.
func ReplayExact(tr Trace) ([]AccuracyResult, error) {
	if err := tr.Validate(); err != nil {
		return nil, err
	}
	r := Rate{Limit: tr.Limit, Window: tr.Window}
	times := tr.Times()
	var out []AccuracyResult

	// replay drives l, moving set to each request's time first.
	replay := func(lib, alg string, l Limiter, set func(time.Time)) error {
		defer l.Close()
		res := AccuracyResult{Library: lib, Algorithm: alg, Exact: true, Times: times, Admitted: make([]bool, len(times))}
		for i, off := range times {
			set(traceStart.Add(off))
			ok, err := l.Allow(accuracyKey)
			if err != nil {
				return fmt.Errorf("%s %s, request %d: %w", lib, alg, i, err)
			}
			res.Admitted[i] = ok
		}
		out = append(out, res)
		return nil
	}

	for _, name := range accuracyAlgorithms {
		clock := engine.NewFakeClock(traceStart)
		s, err := NewSluice(name, r, clock, nil)
		if err != nil {
			return nil, fmt.Errorf("sluice %s: %w", name, err)
		}
		if err := replay("sluice", string(name), s, clock.Set); err != nil {
			return nil, err
		}
	}

	xl := rate.NewLimiter(rate.Limit(float64(tr.Limit)/tr.Window.Seconds()), int(tr.Limit))
	res := AccuracyResult{Library: "x/time/rate", Algorithm: "token_bucket", Exact: true, Times: times, Admitted: make([]bool, len(times))}
	for i, off := range times {
		res.Admitted[i] = xl.AllowN(traceStart.Add(off), 1)
	}
	out = append(out, res)

	now := traceStart
	clock := func() time.Time { return now }
	set := func(t time.Time) { now = t }
	th, err := NewThrottled(r, clock)
	if err != nil {
		return nil, err
	}
	if err := replay("throttled", "gcra", th, set); err != nil {
		return nil, err
	}
	now = traceStart
	hr, err := NewHTTPRate(r, clock)
	if err != nil {
		return nil, err
	}
	if err := replay("httprate", "sliding_counter", hr, set); err != nil {
		return nil, err
	}
	return out, nil
}

// ReplayRealTime replays tr on the wall clock against the limiters that
// read it and cannot be told the time: go-limiter's memorystore, ulule's
// memory store and tollbooth. Times and the window are multiplied by scale
// (0.3 runs a 1 s window in 300 ms), so the run lasts the trace's length
// times scale. Every limiter is asked at each request, one after the
// other, and the time of each call is recorded and scaled back.
func ReplayRealTime(tr Trace, scale float64) ([]AccuracyResult, error) {
	if err := tr.Validate(); err != nil {
		return nil, err
	}
	if !(scale > 0 && scale <= 1) {
		return nil, fmt.Errorf("bench: the real-time scale must be in (0, 1], got %v", scale)
	}
	w := time.Duration(float64(tr.Window) * scale)
	if w < 50*time.Millisecond {
		return nil, fmt.Errorf("bench: a scaled window of %v is too short to replay on a shared machine; raise the scale", w)
	}
	r := Rate{Limit: tr.Limit, Window: w}
	gl, err := NewGoLimiter(r)
	if err != nil {
		return nil, err
	}
	ul, err := NewUlule(r)
	if err != nil {
		return nil, err
	}
	tb, err := NewTollbooth(r)
	if err != nil {
		return nil, err
	}
	limiters := []struct {
		lib, alg string
		l        Limiter
	}{
		{"go-limiter", "fixed_window", gl},
		{"ulule", "fixed_window", ul},
		{"tollbooth", "token_bucket", tb},
	}
	times := tr.Times()
	out := make([]AccuracyResult, len(limiters))
	for j, lim := range limiters {
		defer lim.l.Close()
		out[j] = AccuracyResult{Library: lim.lib, Algorithm: lim.alg, Times: make([]time.Duration, len(times)), Admitted: make([]bool, len(times))}
	}
	start := time.Now()
	for i, off := range times {
		sleepUntil(start.Add(time.Duration(float64(off) * scale)))
		for j, lim := range limiters {
			at := time.Since(start)
			ok, err := lim.l.Allow(accuracyKey)
			if err != nil {
				return nil, fmt.Errorf("%s, request %d: %w", lim.lib, i, err)
			}
			out[j].Times[i] = time.Duration(float64(at) / scale)
			out[j].Admitted[i] = ok
		}
	}
	return out, nil
}

// sleepUntil returns at t: it sleeps until shortly before, then yields
// until t, so that a late wake-up does not move a request across a window
// boundary.
func sleepUntil(t time.Time) {
	for {
		d := time.Until(t)
		if d <= 0 {
			return
		}
		if d > 2*time.Millisecond {
			time.Sleep(d - time.Millisecond)
		} else {
			runtime.Gosched()
		}
	}
}

// WriteAccuracy writes the accuracy fragment for results on tr: a heading,
// a paragraph saying how it was measured, and one table row per result.
// scale is the real-time replay's (see ReplayRealTime), or 0 if there was
// none.
func WriteAccuracy(w io.Writer, tr Trace, results []AccuracyResult, scale float64) error {
	if err := tr.Validate(); err != nil {
		return err
	}
	times := tr.Times()
	ideal := IdealAdmits(times, tr.Limit, tr.Window)
	idealN := countTrue(ideal)

	var b strings.Builder
	fmt.Fprintf(&b, "## Accuracy on a bursty trace\n\n")
	fmt.Fprintf(&b, "One client sends %d requests against a limit of L = %d per W = %v: ", len(times), tr.Limit, tr.Window)
	for i, p := range tr.Phases {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "*%s* (%d requests, %v to %v)", p.Name, len(p.Offsets), p.Offsets[0], p.Offsets[len(p.Offsets)-1])
	}
	fmt.Fprintf(&b, ". The burst hits a fresh key; the boundary phase puts 10 requests just before the 3 s boundary and 10 just after; "+
		"the opened-boundary phase does the same after one request that opens a window; the steady phase runs at over twice the rate. "+
		"Each library/algorithm gets a fresh limiter of L per W (capacity L where it has one) and replays the whole trace. "+
		"Rows marked *exact* are driven at the trace's own times (Sluice through the engine with `engine.FakeClock`, x/time/rate with `AllowN`, "+
		"throttled with `memstore.SetTimeNow`, httprate's local counter with the window it is given), so they are deterministic. ")
	if scale > 0 {
		fmt.Fprintf(&b, "Rows marked *real time* read the wall clock and cannot be told the time: they replay the trace with every time and W "+
			"multiplied by %g (W = %v), and their window counts use the times the calls were actually made, scaled back; "+
			"on a loaded machine a late call can shift one request across a boundary. ", scale, time.Duration(float64(tr.Window)*scale))
	}
	fmt.Fprintf(&b, "*Ideal* is what a strict limit of L in every window of length W admits: each request, in order, is admitted if and only if "+
		"fewer than L requests were admitted in the W before it (the interval (t−W, t]); no limiter that keeps every window at L or fewer "+
		"admits more of this trace (%d). *Excess* is allowed − ideal (negative: stricter than needed). "+
		"*Worst W* is the largest number admitted in any interval [s, s+W): above L, users saw more than the limit pass in one window. "+
		"The last columns count the requests admitted in each phase. "+
		"go.uber.org/ratelimit is not in the table: it never denies, it delays.\n\n", idealN)

	b.WriteString("| library | algorithm | clock | offered | allowed | ideal | excess | worst W |")
	for _, p := range tr.Phases {
		fmt.Fprintf(&b, " %s |", p.Name)
	}
	b.WriteString("\n|---|---|---|--:|--:|--:|--:|--:|")
	for range tr.Phases {
		b.WriteString("--:|")
	}
	b.WriteString("\n")

	fmt.Fprintf(&b, "| ideal | strict sliding window | — | %d | %d | %d | 0 | %d |", len(times), idealN, idealN, WorstWindow(times, ideal, tr.Window))
	writePhases(&b, tr, ideal)
	for _, r := range results {
		if len(r.Admitted) != len(times) || len(r.Times) != len(times) {
			return fmt.Errorf("bench: %s %s answered %d of %d requests", r.Library, r.Algorithm, len(r.Admitted), len(times))
		}
		clock := "exact"
		if !r.Exact {
			clock = "real time"
		}
		worst := WorstWindow(r.Times, r.Admitted, tr.Window)
		worstCell := fmt.Sprint(worst)
		if int64(worst) > tr.Limit {
			worstCell = "**" + worstCell + "**"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %d | %d | %d | %+d | %s |", r.Library, r.Algorithm, clock, len(times), r.Allowed(), idealN, r.Allowed()-idealN, worstCell)
		writePhases(&b, tr, r.Admitted)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// writePhases appends the admitted count of each phase and ends the row.
func writePhases(b *strings.Builder, tr Trace, admitted []bool) {
	i := 0
	for _, p := range tr.Phases {
		fmt.Fprintf(b, " %d |", countTrue(admitted[i:i+len(p.Offsets)]))
		i += len(p.Offsets)
	}
	b.WriteString("\n")
}
