package main

import (
	"math"
	"regexp"
	"strings"
	"testing"
)

const sample = `goos: linux
cpu: Intel(R) Xeon(R) Processor
cores: 2
BenchmarkHotKey/sluice-gcra-2 	1000	 50.0 ns/op	 0 B/op	 0 allocs/op
BenchmarkHotKey/sluice-gcra+coarse+key-2 	1000	 30.0 ns/op	 0 B/op	 0 allocs/op
BenchmarkHotKey/sluice-token_bucket-fakeclock-2 	1000	 10.0 ns/op	 0 B/op	 0 allocs/op
BenchmarkHotKey/golimiter-2 	1000	 40.0 ns/op	 0 B/op	 0 allocs/op
BenchmarkHotKey/xtimerate-2 	1000	 60.0 ns/op	 0 B/op	 0 allocs/op
BenchmarkHotKey/sluice-gcra-2 	1000	 54.0 ns/op	 0 B/op	 0 allocs/op
BenchmarkHotKey/sluice-gcra+coarse+key-2 	1000	 34.0 ns/op	 0 B/op	 0 allocs/op
BenchmarkHotKey/golimiter-2 	1000	 44.0 ns/op	 0 B/op	 0 allocs/op
BenchmarkKeys100k/sluice-gcra+key-2 	1000	 90.0 ns/op	 16 B/op	 1 allocs/op
BenchmarkKeys100k/xtimerate-2 	1000	 100.0 ns/op	 0 B/op	 0 allocs/op
PASS
`

func parse(t *testing.T, text string) *Results {
	t.Helper()
	r := NewResults()
	if err := r.Parse(strings.NewReader(text)); err != nil {
		t.Fatal(err)
	}
	return r
}

func TestRatios(t *testing.T) {
	r := parse(t, sample)
	if got, ok := r.Median(Row{"HotKey", "sluice-gcra", 2}, "ns/op"); !ok || got != 52 {
		t.Errorf("median of HotKey/sluice-gcra = %v, %v; want 52, true", got, ok)
	}
	var b strings.Builder
	WriteRatios(&b, r, []string{"HotKey", "Keys100k", "Parallel10k"})
	out := b.String()
	for _, want := range []string{
		// The fakeclock row is never the best; medians of two rounds.
		// Paired: the rounds' ratios are 30/40 and 34/44, 50/40 and
		// 54/44.
		"| HotKey | sluice-gcra+coarse+key 32.0 | +coarse+key | golimiter 42.0 | 0.76× | 0.76× | sluice-gcra 52.0 | 1.24× | 1.24× |",
		// No default row ran.
		"| Keys100k | sluice-gcra+key 90.0 | +key | xtimerate 100 | 0.90× | 0.90× | – | – | – |",
		"| Parallel10k | – | – | – | – | – | – | – | – |",
		"Sluice rows that allocate: Keys100k/sluice-gcra+key (1.00 allocs/op)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the table lacks\n%s\ngot\n%s", want, out)
		}
	}
	if got, want := r.Machine(), "cpu: Intel(R) Xeon(R) Processor, cores: 2"; got != want {
		t.Errorf("Machine() = %q, want %q", got, want)
	}
}

// TestPaired: the paired ratio is the median of each round's ratio, which
// a slow round (both rows twice as slow) leaves where it was, and none
// when a row misses a round.
func TestPaired(t *testing.T) {
	r := parse(t, `BenchmarkHotKey/sluice-gcra-2 	1000	 30.0 ns/op
BenchmarkHotKey/golimiter-2 	1000	 40.0 ns/op
BenchmarkHotKey/sluice-gcra-2 	1000	 80.0 ns/op
BenchmarkHotKey/golimiter-2 	1000	 100.0 ns/op
BenchmarkHotKey/sluice-gcra-2 	1000	 31.0 ns/op
BenchmarkHotKey/golimiter-2 	1000	 40.0 ns/op
BenchmarkHotKey/xtimerate-2 	1000	 40.0 ns/op
`)
	got, ok := r.Paired(Row{"HotKey", "sluice-gcra", 2}, Row{"HotKey", "golimiter", 2})
	if want := 31.0 / 40; !ok || math.Abs(got-want) > 1e-9 {
		t.Errorf("Paired = %v, %v; want %v (the median of 0.75, 0.80, 0.775), true", got, ok, want)
	}
	if _, ok := r.Paired(Row{"HotKey", "sluice-gcra", 2}, Row{"HotKey", "xtimerate", 2}); ok {
		t.Error("Paired of a row that missed two rounds answered")
	}
}

func TestScaling(t *testing.T) {
	r := parse(t, `BenchmarkParallel10k/sluice-gcra 	1000	 100.0 ns/op	 0 B/op	 0 allocs/op
BenchmarkParallel10k/sluice-gcra-2 	1000	 50.0 ns/op	 0 B/op	 0 allocs/op
BenchmarkParallel10k/sluice-gcra-4 	1000	 60.0 ns/op	 0 B/op	 0 allocs/op
BenchmarkParallel10k/xtimerate 	1000	 120.0 ns/op	 0 B/op	 0 allocs/op
BenchmarkParallel10k/xtimerate-2 	1000	 80.0 ns/op	 0 B/op	 0 allocs/op
`)
	var b strings.Builder
	WriteScaling(&b, r, []string{"Parallel10k", "Parallel10kDenied"})
	out := b.String()
	for _, want := range []string{
		"| impl | 1 | 2 | 4 |",
		"| sluice-gcra | 100 | 50.0 (2.00×) | 60.0 (1.67×) |",
		"| xtimerate | 120 | 80.0 (1.50×) | – |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the table lacks\n%s\ngot\n%s", want, out)
		}
	}
	if strings.Contains(out, "Parallel10kDenied") {
		t.Errorf("a workload that did not run has a table:\n%s", out)
	}
}

func TestBenchPattern(t *testing.T) {
	p := BenchPattern([]string{"HotKey", "Keys100k"}, DefaultImpls)
	wl, impl, _ := strings.Cut(p, "/")
	wre, ire := regexp.MustCompile(wl), regexp.MustCompile(impl)
	for name, want := range map[string]bool{
		"BenchmarkHotKey/sluice-gcra":                      true,
		"BenchmarkHotKey/sluice-gcra+coarse+key":           true,
		"BenchmarkKeys100k/sluice-token_bucket+coarse+key": true,
		"BenchmarkHotKey/golimiter":                        true,
		"BenchmarkHotKey/xtimerate":                        true,
		"BenchmarkHotKey/sluice-token_bucket-fakeclock":    false,
		"BenchmarkHotKey/sluice-leaky_bucket":              false,
		"BenchmarkHotKey/ulule":                            false,
		"BenchmarkHotKeyDenied/sluice-gcra":                false,
		"BenchmarkKeys100kRefilled/sluice-gcra":            false,
	} {
		w, i, _ := strings.Cut(name, "/")
		if got := wre.MatchString(w) && ire.MatchString(i); got != want {
			t.Errorf("%s: matched %v, want %v", name, got, want)
		}
	}
}
