package bench

import (
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-go/sluice/algo"
)

func TestIdealAdmits(t *testing.T) {
	ms := time.Millisecond
	times := []time.Duration{0, 1 * ms, 2 * ms, 9 * ms, 10 * ms, 11 * ms, 12 * ms, 25 * ms}
	got := IdealAdmits(times, 2, 10*ms)
	// 10 ms is admitted: the request at 0 has left (t-W, t]; 12 ms is not:
	// 10 and 11 are in (2, 12].
	want := []bool{true, true, false, false, true, true, false, true}
	if !slices.Equal(got, want) {
		t.Errorf("IdealAdmits = %v, want %v", got, want)
	}
	if w := WorstWindow(times, got, 10*ms); w != 2 {
		t.Errorf("WorstWindow of the ideal = %d, want the limit, 2", w)
	}
	all := []bool{true, true, true, true}
	if w := WorstWindow([]time.Duration{0, 5 * ms, 9 * ms, 10 * ms}, all, 10*ms); w != 3 {
		t.Errorf("WorstWindow of 0, 5, 9, 10 ms in 10 ms = %d, want 3 ([0, 10) holds three)", w)
	}
}

func TestBurstyTraceIsWellFormed(t *testing.T) {
	tr := BurstyTrace()
	if err := tr.Validate(); err != nil {
		t.Fatal(err)
	}
	times := tr.Times()
	for i := range times {
		for j := i + 1; j < len(times); j++ {
			if times[j]-times[i] == tr.Window {
				t.Errorf("requests at %v and %v are exactly a window apart: the ideal would depend on the window's ends", times[i], times[j])
			}
		}
	}
	// The boundary phase straddles a whole window: half just before, half
	// just after.
	b := tr.Phases[1].Offsets
	if b[9] >= 3*time.Second || b[10] <= 3*time.Second || b[10]-b[9] > 50*time.Millisecond {
		t.Errorf("boundary phase %v does not straddle 3 s closely", b)
	}
}

func TestTraceValidate(t *testing.T) {
	for _, tr := range []Trace{
		{Limit: 0, Window: time.Second, Phases: []Phase{{"a", []time.Duration{0}}}},
		{Limit: 1, Window: 0, Phases: []Phase{{"a", []time.Duration{0}}}},
		{Limit: 1, Window: time.Second},
		{Limit: 1, Window: time.Second, Phases: []Phase{{"a", []time.Duration{5, 4}}}},
		{Limit: 1, Window: time.Second, Phases: []Phase{{"a", []time.Duration{-1}}}},
	} {
		if err := tr.Validate(); err == nil {
			t.Errorf("Validate(%+v) = nil, want an error", tr)
		}
		if _, err := ReplayExact(tr); err == nil {
			t.Errorf("ReplayExact(%+v) returned no error", tr)
		}
	}
	for _, scale := range []float64{0, -1, 1.5, 0.01} {
		if _, err := ReplayRealTime(BurstyTrace(), scale); err == nil {
			t.Errorf("ReplayRealTime at scale %v returned no error", scale)
		}
	}
}

// exactResults replays BurstyTrace exactly and indexes the results by
// "library/algorithm".
func exactResults(t *testing.T) (Trace, map[string]AccuracyResult) {
	t.Helper()
	tr := BurstyTrace()
	res, err := ReplayExact(tr)
	if err != nil {
		t.Fatal(err)
	}
	m := make(map[string]AccuracyResult)
	for _, r := range res {
		m[r.Library+"/"+r.Algorithm] = r
	}
	if len(m) != len(accuracyAlgorithms)+3 {
		t.Fatalf("ReplayExact returned %d results, want Sluice's %d algorithms and 3 peers", len(m), len(accuracyAlgorithms))
	}
	return tr, m
}

func TestAccuracyExact(t *testing.T) {
	tr, res := exactResults(t)
	times := tr.Times()
	ideal := IdealAdmits(times, tr.Limit, tr.Window)
	L := int(tr.Limit)

	// The sliding log is the strict limit: never more than L in any
	// window, and on this trace exactly the ideal.
	log := res["sluice/"+string(algo.SlidingLogName)]
	if w := WorstWindow(times, log.Admitted, tr.Window); w > L {
		t.Errorf("sliding log admitted %d in one window, limit %d", w, L)
	}
	if !slices.Equal(log.Admitted, ideal) {
		t.Errorf("sliding log admitted %v,\nideal is %v", log.Admitted, ideal)
	}

	// The fixed window admits the 10 before the boundary and the 10 after
	// it: 2L within a fifth of a window.
	fw := res["sluice/"+string(algo.FixedWindowName)]
	if w := WorstWindow(times, fw.Admitted, tr.Window); w != 2*L {
		t.Errorf("fixed window's worst window = %d, want 2L = %d", w, 2*L)
	}
	if n := countTrue(phase(tr, fw.Admitted, "boundary")); n != 2*L {
		t.Errorf("fixed window admitted %d of the boundary burst, want all %d", n, 2*L)
	}

	// x/time/rate and Sluice's token bucket are the same algorithm at the
	// same rate and capacity: the same answer to every request.
	if tb, xr := res["sluice/"+string(algo.TokenBucketName)], res["x/time/rate/token_bucket"]; !slices.Equal(tb.Admitted, xr.Admitted) {
		t.Errorf("token buckets disagree:\nsluice      %v\nx/time/rate %v", tb.Admitted, xr.Admitted)
	}
	// So are throttled's GCRA and Sluice's, and a GCRA is a token bucket
	// seen from its theoretical arrival time.
	if g, th := res["sluice/"+string(algo.GCRAName)], res["throttled/gcra"]; !slices.Equal(g.Admitted, th.Admitted) {
		t.Errorf("GCRAs disagree:\nsluice    %v\nthrottled %v", g.Admitted, th.Admitted)
	}
	if g, tb := res["sluice/"+string(algo.GCRAName)], res["sluice/"+string(algo.TokenBucketName)]; !slices.Equal(g.Admitted, tb.Admitted) {
		t.Errorf("Sluice's GCRA and token bucket disagree:\ngcra         %v\ntoken_bucket %v", g.Admitted, tb.Admitted)
	}

	for name, r := range res {
		// A fresh key has its whole capacity: the first L of the burst pass.
		for i := range L {
			if !r.Admitted[i] {
				t.Errorf("%s denied request %d of a fresh key's burst", name, i)
			}
		}
		// No limiter that keeps every window at L admits more than the
		// ideal.
		if w := WorstWindow(times, r.Admitted, tr.Window); w <= L && r.Allowed() > countTrue(ideal) {
			t.Errorf("%s admitted %d with at most %d a window, more than the ideal %d", name, r.Allowed(), w, countTrue(ideal))
		}
		// Everyone denies part of a 15-request burst against a limit of 10.
		if n := countTrue(phase(tr, r.Admitted, "burst")); n >= 15 {
			t.Errorf("%s admitted all %d of the burst", name, n)
		}
	}
}

// phase returns the answers to the named phase's requests.
func phase(tr Trace, admitted []bool, name string) []bool {
	i := 0
	for _, p := range tr.Phases {
		if p.Name == name {
			return admitted[i : i+len(p.Offsets)]
		}
		i += len(p.Offsets)
	}
	return nil
}

func TestWriteAccuracy(t *testing.T) {
	tr, res := exactResults(t)
	var rows []AccuracyResult
	for _, r := range res {
		rows = append(rows, r)
	}
	var b strings.Builder
	if err := WriteAccuracy(&b, tr, rows, 0); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	if !strings.HasPrefix(out, "## Accuracy") {
		t.Errorf("the fragment does not start with its heading:\n%s", out)
	}
	ideal := countTrue(IdealAdmits(tr.Times(), tr.Limit, tr.Window))
	for _, want := range []string{
		"| sluice | fixed_window | exact | 99 |",
		"| **20** |",
		"| sluice | sliding_log | exact | 99 | " + itoa(ideal) + " | " + itoa(ideal) + " | +0 | 10 |",
		"| x/time/rate | token_bucket | exact |",
		"| throttled | gcra | exact |",
		"| httprate | sliding_counter | exact |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the fragment lacks %q:\n%s", want, out)
		}
	}
	if n := strings.Count(out, "\n| "); n != len(rows)+2 {
		t.Errorf("the fragment has %d table lines, want a header, the ideal and %d rows", n, len(rows))
	}
	short := AccuracyResult{Library: "x", Algorithm: "y", Admitted: []bool{true}, Times: []time.Duration{0}}
	if err := WriteAccuracy(&b, tr, []AccuracyResult{short}, 0); err == nil {
		t.Error("WriteAccuracy accepted a result with too few answers")
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// TestAccuracyRealTime replays a short trace on the wall clock, 300 ms in
// all, against the limiters that cannot be told the time: each allows a
// fresh key's capacity, denies the next request, and allows again a full
// window later.
func TestAccuracyRealTime(t *testing.T) {
	ms := time.Millisecond
	tr := Trace{Limit: 3, Window: time.Second, Phases: []Phase{
		{"burst", []time.Duration{0, 5 * ms, 10 * ms, 15 * ms}},
		{"later", []time.Duration{1500 * ms}},
	}}
	res, err := ReplayRealTime(tr, 0.2)
	if err != nil {
		t.Fatal(err)
	}
	want := []bool{true, true, true, false, true}
	if len(res) != 3 {
		t.Fatalf("ReplayRealTime returned %d results, want 3", len(res))
	}
	for _, r := range res {
		if r.Exact {
			t.Errorf("%s is marked exact", r.Library)
		}
		if !slices.Equal(r.Admitted, want) {
			t.Errorf("%s %s admitted %v, want %v", r.Library, r.Algorithm, r.Admitted, want)
		}
		if last := r.Times[len(r.Times)-1]; last < 1500*ms || last > 2500*ms {
			t.Errorf("%s: the last request was recorded at %v of trace time, want about 1.5s", r.Library, last)
		}
	}
}
