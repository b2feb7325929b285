package main

import (
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const sample = `date: 2026-11-29T23:52:02Z
go: go1.26.8
cores: 2
goos: linux
goarch: amd64
pkg: github.com/sluice-go/sluice/bench
cpu: AMD EPYC
BenchmarkHotKey/sluice-token_bucket-2   	 1000	       60.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkHotKey/sluice-token_bucket-2   	 1000	       40.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkHotKey/sluice-token_bucket-2   	 1000	       45.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkHotKey/golimiter-2             	 1000	       90.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkHotKey/golimiter-2             	 1000	       80.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkHotKey/sluice-token_bucket-fakeclock-2 	 1000	       30.0 ns/op	       8 B/op	       1 allocs/op
    bench_test.go:1: a log line
BenchmarkBytesPerKey/sluice-token_bucket-2	1000000000	0.29 ns/op	80.88 B/key	1780 ns/insert	0 B/op	0 allocs/op
PASS
ok  	github.com/sluice-go/sluice/bench	38.555s
`

func TestParse(t *testing.T) {
	res, err := Parse(strings.NewReader(sample))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(res.Order, ","), "BenchmarkHotKey/sluice-token_bucket,BenchmarkHotKey/golimiter,BenchmarkHotKey/sluice-token_bucket-fakeclock,BenchmarkBytesPerKey/sluice-token_bucket"; got != want {
		t.Errorf("Order = %s, want %s", got, want)
	}
	for _, tc := range []struct {
		name, unit string
		want       float64
	}{
		{"BenchmarkHotKey/sluice-token_bucket", "ns/op", 45},
		{"BenchmarkHotKey/golimiter", "ns/op", 85},
		{"BenchmarkHotKey/sluice-token_bucket-fakeclock", "allocs/op", 1},
		{"BenchmarkBytesPerKey/sluice-token_bucket", "B/key", 80.88},
	} {
		if got, ok := res.Median(tc.name, tc.unit); !ok || got != tc.want {
			t.Errorf("Median(%s, %s) = %v, %v; want %v, true", tc.name, tc.unit, got, ok, tc.want)
		}
	}
	if got, want := res.Config["cpu"], "AMD EPYC"; got != want {
		t.Errorf("Config[cpu] = %q, want %q", got, want)
	}
}

// TestParseSkipsModels checks that a benchmark that measures no limiter
// does not enter the results, where it would be taken for a peer.
func TestParseSkipsModels(t *testing.T) {
	in := sample + "BenchmarkIndexLayout/two-miss/creation-2   1000   144.5 ns/op   68.98 B/key\n"
	res, err := Parse(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range res.Order {
		if strings.Contains(n, "IndexLayout") {
			t.Errorf("Order holds %s", n)
		}
	}
	if len(res.Order) != 4 {
		t.Errorf("Order = %v, want the sample's 4 benchmarks", res.Order)
	}
}

func TestWrite(t *testing.T) {
	res, err := Parse(strings.NewReader(sample))
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	Write(&b, res, Options{Sources: []string{"out/bench.txt"}, CPUModel: "AMD EPYC 7B13 64-Core Processor"})
	out := b.String()
	for _, want := range []string{
		"| cpu | AMD EPYC (the report's machine: AMD EPYC 7B13 64-Core Processor) |",
		"| go | go1.26.8 |",
		"| command | `" + strings.ReplaceAll(DefaultCommand, "|", "\\|") + " (make bench with its defaults; the results do not record their command)` |",
		"- **hit** — engine + memory, hot key ≤ 50 ns/op, 0 allocs (HotKey/sluice-token_bucket): 45.0 ns/op, 0 allocs/op — hit by 10%",
		"- **missed** — ≤ 80 bytes per token-bucket key at 1M keys (BytesPerKey/sluice-token_bucket): 80.9 B/key — missed by 1.1%",
		"- **hit** — HotKey, sluice-token_bucket: fewer ns/op than every peer, 0 allocs/op: 45.0 ns/op, 0 allocs/op; fastest peer golimiter 85.0 ns/op — hit by 47%",
		"- **not measured in this run** — Keys100k, sluice-gcra: fewer ns/op than every peer, 0 allocs/op",
		"- **not measured in this run** — `sluice serve` adds under 15% to p50 latency",
		"| HotKey | ns/op | golimiter 85.0 | sluice-token_bucket | 45.0 | 0.53× | 0 |",
		"| sluice-token_bucket | **Sluice** | 45.0 | ±33%* | 0.53× | 0 | 0 | 3 |",
		"| golimiter | peer | 85.0 | ±6%* | 1.00× | 0 | 0 | 2 |",
		"| sluice-token_bucket-fakeclock | **Sluice** | 30.0 | ±0%* | 0.35× | 8 | 1 | 1 |",
		"- `github.com/mennanov/limiters`: refused by the Go module proxy",
		"- `github.com/clipperhouse/rate`: refused by the Go module proxy",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

const durableSample = `goos: linux
cpu: AMD EPYC
BenchmarkDurableHotKey/memory-token_bucket-2   	 1000	      100.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkDurableHotKey/pebble-interval-token_bucket-2   	 1000	      150.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkDurableHotKey/bolt-interval-token_bucket-2   	 1000	      250.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkDurableHotKey/pebble-sync-token_bucket-2   	 1000	   150000 ns/op	     170 B/op	       4 allocs/op
BenchmarkSyncConcurrency/pebble/callers-1-2 	 1000	   140000 ns/op	 1.000 decisions/commit	 7000 decisions/s	 160 B/op	 4 allocs/op
BenchmarkSyncConcurrency/pebble/callers-64-2 	 1000	     5000 ns/op	 31.00 decisions/commit	 200000 decisions/s	 240 B/op	 2 allocs/op
BenchmarkSyncConcurrency/bolt/callers-1-2 	 1000	   200000 ns/op	 1.000 decisions/commit	 5000 decisions/s	 8000 B/op	 57 allocs/op
BenchmarkSyncConcurrency/bolt/callers-64-2 	 1000	    12500 ns/op	 31.00 decisions/commit	 80000 decisions/s	 2000 B/op	 9 allocs/op
BenchmarkRawStore/pebble-2 	 1000	    10000 ns/op	      43 B/op	       1 allocs/op
BenchmarkRawStoreBatch/pebble-2 	 1000	   400000 ns/op	 400.0 ns/key	   12000 B/op	      29 allocs/op
BenchmarkDurableKeys100k/pebble-interval-token_bucket-2   	 1000	      1000 ns/op	       558 B/op	       3 allocs/op
BenchmarkColdStart/pebble-2 	 100	  2500000 ns/op	 1.000 keys-in-memory	 1300000 ns/close	 2400000 ns/open	 1000000 records	 0.3500 s/setup	 1200000 B/op	 4800 allocs/op
`

func TestDurable(t *testing.T) {
	res, err := Parse(strings.NewReader(sample))
	if err != nil {
		t.Fatal(err)
	}
	d, err := Parse(strings.NewReader(durableSample + "BenchmarkHotKey/golimiter-2 	 1000	 60.0 ns/op	 0 B/op	 0 allocs/op\n"))
	if err != nil {
		t.Fatal(err)
	}
	res.Merge(d)
	if got, _ := res.Median("BenchmarkHotKey/golimiter", "ns/op"); got != 60 {
		t.Errorf("after Merge, HotKey/golimiter = %v, want the merged file's 60", got)
	}
	var b strings.Builder
	Write(&b, res, Options{Sources: []string{"out/bench.txt", "out/durable.txt"}})
	out := b.String()
	for _, want := range []string{
		"from `out/bench.txt` and `out/durable.txt`",
		"| Interval hot key within 2× of memory | DurableHotKey/pebble-interval-token_bucket: 150 ns/op ÷ memory-token_bucket 100 = 1.50× | **met** |",
		"| Interval hot key within 2× of memory | DurableHotKey/bolt-interval-token_bucket: 250 ns/op ÷ memory-token_bucket 100 = 2.50× | **missed** by 0.50× |",
		"| Sync: 64 callers ≥ 20× the decisions/s of 1 | pebble: 200,000 decisions/s with 64 callers ÷ 7,000 with 1 = 28.6× | **met** |",
		"| Sync: 64 callers ≥ 20× the decisions/s of 1 | bolt: 80,000 decisions/s with 64 callers ÷ 5,000 with 1 = 16.0× | **missed**: 80% of the 20× asked |",
		"| pebble: first decision in 2.50 ms, at most 1 key in memory | **met** |",
		"| HotKey | pebble-sync | 150,000 | 1,500× | 4 |",
		"| pebble | 7,000 | – | 200,000 | 28.6× | 31.0 | 140 µs |",
		"| pebble | 10,000 | 43 | 1 | 400 | 29 | 1000 | 0.10× | 2.50× |",
		"| pebble | 1,000,000 | 2.50 ms | ±0%* | 2.40 ms | 1 | 1.30 ms | 1,200,000 | 4,800 | 0.35 s |",
		"#### ColdStart",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	before, durable, _ := strings.Cut(out, "## Durable state")
	if strings.Contains(before, "DurableHotKey") || strings.Contains(before, "### ColdStart") {
		t.Errorf("durable workloads outside their section:\n%s", before)
	}
	if !strings.Contains(durable, "#### DurableHotKey") {
		t.Errorf("durable section lacks its medians:\n%s", durable)
	}
}

func TestSpread(t *testing.T) {
	for _, tc := range []struct{ n, want int }{{1, 0}, {5, 0}, {6, 1}, {7, 1}, {9, 2}, {10, 2}, {20, 6}} {
		if got := ciRank(tc.n, 0.95); got != tc.want {
			t.Errorf("ciRank(%d, 0.95) = %d, want %d", tc.n, got, tc.want)
		}
	}
	res := &Results{Runs: map[string]map[string][]float64{
		// Six runs: the interval is the extremes, 90 and 120 around 100.
		"BenchmarkA/x": {"ns/op": {120, 100, 100, 90, 100, 100}},
		// Ten runs: the 2nd smallest and 2nd largest, 95 and 108.
		"BenchmarkB/x": {"ns/op": {50, 95, 100, 100, 100, 100, 100, 100, 108, 300}},
		// Three runs: no interval, the largest deviation.
		"BenchmarkC/x": {"ns/op": {100, 130, 95}},
	}}
	for _, tc := range []struct {
		name   string
		want   float64
		wantCI bool
	}{
		{"BenchmarkA/x", 0.20, true},
		{"BenchmarkB/x", 0.08, true},
		{"BenchmarkC/x", 0.30, false},
	} {
		got, ci := res.Spread(tc.name, "ns/op")
		if math.Abs(got-tc.want) > 1e-9 || ci != tc.wantCI {
			t.Errorf("Spread(%s) = %v, %v; want %v, %v", tc.name, got, ci, tc.want, tc.wantCI)
		}
	}
	if got := spreadCell(res, "BenchmarkC/x", "ns/op"); got != "±30%*" {
		t.Errorf("spreadCell with 3 runs = %q, want ±30%%*", got)
	}
}

func TestSplit(t *testing.T) {
	for _, tc := range []struct{ name, wl, impl string }{
		{"BenchmarkHotKey/golimiter", "HotKey", "golimiter"},
		{"BenchmarkKeys100kDenied/ulule", "Keys100kDenied", "ulule"},
		{"BenchmarkMiddleware/httprate/denied", "Middleware/denied", "httprate"},
		{"BenchmarkSyncConcurrency/pebble/callers-8", "SyncConcurrency", "pebble/callers-8"},
		{"BenchmarkRawStore/bolt-nosync", "RawStore", "bolt-nosync"},
	} {
		wl, impl := split(tc.name)
		if wl != tc.wl || impl != tc.impl {
			t.Errorf("split(%s) = %q, %q; want %q, %q", tc.name, wl, impl, tc.wl, tc.impl)
		}
		if back := benchName(wl, impl); back != tc.name {
			t.Errorf("benchName(%q, %q) = %s, want %s", wl, impl, back, tc.name)
		}
	}
	for impl, want := range map[string]Kind{"sluice": KindSluice, "sluice-gcra": KindSluice, "floor": KindFloor, "floor-stripedmap": KindFloor, "tollbooth": KindPeer, "sluicey": KindPeer} {
		if got := kindOf(impl); got != want {
			t.Errorf("kindOf(%s) = %v, want %v", impl, got, want)
		}
	}
}

// peerSample has peers the report knows nothing about (ulule, throttled),
// a denied-path workload and the middleware.
const peerSample = `cpu: AMD EPYC
BenchmarkHotKey/sluice-token_bucket-2 	1000	 118.0 ns/op	 0 B/op	 0 allocs/op
BenchmarkHotKey/sluice-gcra-2 	1000	 80.0 ns/op	 16 B/op	 1 allocs/op
BenchmarkHotKey/ulule-2 	1000	 100.0 ns/op	 0 B/op	 0 allocs/op
BenchmarkHotKey/throttled-2 	1000	 140.0 ns/op	 0 B/op	 0 allocs/op
BenchmarkHotKey/floor-stripedmap-2 	1000	 20.0 ns/op	 0 B/op	 0 allocs/op
BenchmarkKeys100kDenied/sluice-token_bucket-2 	1000	 90.0 ns/op	 0 B/op	 0 allocs/op
BenchmarkKeys100kDenied/throttled-2 	1000	 100.0 ns/op	 0 B/op	 0 allocs/op
BenchmarkBytesPerKey/sluice-token_bucket-2 	1	 0.30 ns/op	 60.0 B/key	 0 B/op	 0 allocs/op
BenchmarkBytesPerKey/sluice-gcra-2 	1	 0.30 ns/op	 50.0 B/key	 0 B/op	 0 allocs/op
BenchmarkBytesPerKey/ulule-2 	1	 0.30 ns/op	 110.0 B/key	 0 B/op	 0 allocs/op
BenchmarkBytesPerKey/floor-stripedmap-2 	1	 0.30 ns/op	 10.0 B/key	 0 B/op	 0 allocs/op
BenchmarkMiddleware/floor/allowed-2 	1000	 10.0 ns/op	 0 B/op	 0 allocs/op
BenchmarkMiddleware/sluice/allowed-2 	1000	 210.0 ns/op	 100 B/op	 3 allocs/op
BenchmarkMiddleware/httprate/allowed-2 	1000	 410.0 ns/op	 100 B/op	 3 allocs/op
BenchmarkMiddleware/golimiter/allowed-2 	1000	 260.0 ns/op	 100 B/op	 3 allocs/op
BenchmarkMiddleware/tollbooth/allowed-2 	1000	 110.0 ns/op	 100 B/op	 3 allocs/op
BenchmarkMiddleware/floor/denied-2 	1000	 10.0 ns/op	 0 B/op	 0 allocs/op
BenchmarkMiddleware/sluice/denied-2 	1000	 310.0 ns/op	 100 B/op	 3 allocs/op
BenchmarkMiddleware/httprate/denied-2 	1000	 410.0 ns/op	 100 B/op	 3 allocs/op
`

func targetLines(t *testing.T, input string, load *Fragment) map[string]string {
	t.Helper()
	res, err := Parse(strings.NewReader(input))
	if err != nil {
		t.Fatal(err)
	}
	lines := map[string]string{}
	for _, l := range PeerTargets(res, load) {
		lines[l.Goal] = l.String()
	}
	return lines
}

func TestPeerTargets(t *testing.T) {
	lines := targetLines(t, peerSample, nil)
	for goal, want := range map[string]string{
		// 118 against ulule's 100: the margin is relative to the peer.
		"HotKey, sluice-token_bucket: fewer ns/op than every peer, 0 allocs/op": "**missed** — HotKey, sluice-token_bucket: fewer ns/op than every peer, 0 allocs/op: 118 ns/op, 0 allocs/op; fastest peer ulule 100 ns/op — missed by 18%",
		// Faster, but allocating: missed all the same.
		"HotKey, sluice-gcra: fewer ns/op than every peer, 0 allocs/op":                 "**missed** — HotKey, sluice-gcra: fewer ns/op than every peer, 0 allocs/op: 80.0 ns/op, 1 allocs/op; fastest peer ulule 100 ns/op — missed by 1 allocs/op (0 required; time hit by 20%)",
		"Keys100kDenied, sluice-token_bucket: fewer ns/op than every peer, 0 allocs/op": "**hit** — Keys100kDenied, sluice-token_bucket: fewer ns/op than every peer, 0 allocs/op: 90.0 ns/op, 0 allocs/op; fastest peer throttled 100 ns/op — hit by 10%",
		"Parallel10k, sluice-gcra: fewer ns/op than every peer, 0 allocs/op":            "**not measured in this run** — Parallel10k, sluice-gcra: fewer ns/op than every peer, 0 allocs/op",
		// Half of ulule's 110 is 55 (the floor's 10 does not count).
		"BytesPerKey, sluice-token_bucket: at most 0.5× the best peer's bytes per key at 1M keys": "**missed** — BytesPerKey, sluice-token_bucket: at most 0.5× the best peer's bytes per key at 1M keys: 60.0 B/key = 0.55× ulule's 110 — missed by 9.1%",
		"BytesPerKey, sluice-gcra: at most 0.5× the best peer's bytes per key at 1M keys":         "**hit** — BytesPerKey, sluice-gcra: at most 0.5× the best peer's bytes per key at 1M keys: 50.0 B/key = 0.45× ulule's 110 — hit by 9.1%",
		// Overheads 200 against 250 and 400; tollbooth is not in the target.
		"Middleware, allowed: Sluice's overhead over the bare handler lower than httprate's and golimiter's": "**hit** — Middleware, allowed: Sluice's overhead over the bare handler lower than httprate's and golimiter's: Sluice adds 200 ns/op to the handler's 10.0; httprate 400, golimiter 250 — hit by 20% (against golimiter)",
		"Middleware, denied: Sluice's overhead over the bare handler lower than httprate's and golimiter's":  "**not measured in this run** — Middleware, denied: Sluice's overhead over the bare handler lower than httprate's and golimiter's (golimiter not measured)",
		"`sluice serve` adds under 15% to p50 latency":                                                       "**not measured in this run** — `sluice serve` adds under 15% to p50 latency",
	} {
		if got := lines[goal]; got != want {
			t.Errorf("target %q:\n got %s\nwant %s", goal, got, want)
		}
	}
	if t.Failed() {
		t.Logf("all lines: %q", lines)
	}
}

// TestStepHasNoPeers checks that a workload measuring a part of Sluice
// alone (no sluice-named implementation) does not treat its rows as peers.
func TestStepHasNoPeers(t *testing.T) {
	res, err := Parse(strings.NewReader("BenchmarkStep/token_bucket-2 	1000	 18.0 ns/op	 0 B/op	 0 allocs/op\nBenchmarkStep/gcra-2 	1000	 15.0 ns/op	 0 B/op	 0 allocs/op\n"))
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	Write(&b, res, Options{Sources: []string{"x"}})
	out := b.String()
	if strings.Contains(out, "fastest peer") && strings.Contains(out, "| Step |") || strings.Contains(out, "| peer |") {
		t.Errorf("Step rows treated as peers:\n%s", out)
	}
	if !strings.Contains(out, "| token_bucket | 18.0 | ±0%* | 0 | 0 | 1 |") {
		t.Errorf("Step table missing or malformed:\n%s", out)
	}
}

func TestLoadLine(t *testing.T) {
	goal := "`sluice serve` adds under 15% to p50 latency"
	for _, tc := range []struct{ text, want string }{
		{"# Load\n\n<!-- load: p50_direct_us=400 p50_proxy_us=440 p99_direct_us=900 -->\n| table |\n",
			"**hit** — " + goal + ": p50 400 µs direct, 440 µs through the proxy: adds 10.0% — hit by 5.0 percentage points"},
		// The line cmd/loadtest writes.
		{"## Gateway under load\n\n<!-- load: p50_direct_us=200.0 p50_proxy_us=226.0 p99_direct_us=400.0 p99_proxy_us=900.0 rps_direct=4.0 rps_proxy=4.0 limited_ok=true -->\n",
			"**hit** — " + goal + ": p50 200 µs direct, 226 µs through the proxy: adds 13.0% — hit by 2.0 percentage points"},
		// With the bare proxy's figure, the limiter's own share.
		{"<!-- load: p50_direct_us=100 p50_proxy_us=250 p50_bare_us=200 limited_ok=true -->",
			"**missed** — " + goal + ": p50 100 µs direct, 250 µs through the proxy: adds 150.0%; the same proxy with no rule 200 µs, so the limiter's own share is +25.0% — missed by 135.0 percentage points"},
		{"<!-- load: p50_direct_us=200 p50_proxy_us=240 stray -->",
			"**not measured in this run** — " + goal + " (out/load.md: load line: \"stray\" is not key=value)"},
		{"<!--load: p50_proxy_us=532 p50_direct_us=400-->",
			"**missed** — " + goal + ": p50 400 µs direct, 532 µs through the proxy: adds 33.0% — missed by 18.0 percentage points"},
		{"# Load\n\nno line here\n",
			"**not measured in this run** — " + goal + " (out/load.md has no `<!-- load: p50_direct_us=… p50_proxy_us=… -->` line)"},
		{"<!-- load: p50_direct_us=400 -->",
			"**not measured in this run** — " + goal + " (out/load.md: load line: no p50_proxy_us)"},
		{"<!-- load: p50_direct_us=fast p50_proxy_us=3 -->",
			"**not measured in this run** — " + goal + " (out/load.md: load line: p50_direct_us=\"fast\" is not a number)"},
		{"<!-- load: p50_direct_us=0 p50_proxy_us=3 -->",
			"**not measured in this run** — " + goal + " (out/load.md: load line: p50_direct_us=0, want a positive number of microseconds)"},
	} {
		lines := targetLines(t, peerSample, &Fragment{Path: "out/load.md", Text: tc.text})
		if got := lines[goal]; got != tc.want {
			t.Errorf("load fragment %q:\n got %s\nwant %s", tc.text, got, tc.want)
		}
	}
}

func TestParseCPUModel(t *testing.T) {
	info := "processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 7B13 64-Core Processor\nprocessor\t: 1\nmodel name\t: AMD EPYC 7B13 64-Core Processor\n"
	if got, want := parseCPUModel(info), "AMD EPYC 7B13 64-Core Processor"; got != want {
		t.Errorf("parseCPUModel = %q, want %q", got, want)
	}
	if got := parseCPUModel("processor\t: 0\n"); got != "" {
		t.Errorf("parseCPUModel without a model = %q, want empty", got)
	}
}

// TestParseProcs checks that only the GOMAXPROCS suffix is cut when the
// output says what GOMAXPROCS was: at 1, go test adds none, and a name
// ending in a number keeps it.
func TestParseProcs(t *testing.T) {
	for _, tc := range []struct{ input, want string }{
		{"gomaxprocs: 1\nBenchmarkSyncConcurrency/pebble/callers-8 	10	 5.0 ns/op\n", "BenchmarkSyncConcurrency/pebble/callers-8"},
		{"gomaxprocs: 4\nBenchmarkSyncConcurrency/pebble/callers-8-4 	10	 5.0 ns/op\n", "BenchmarkSyncConcurrency/pebble/callers-8"},
		{"BenchmarkSyncConcurrency/pebble/callers-8-4 	10	 5.0 ns/op\n", "BenchmarkSyncConcurrency/pebble/callers-8"},
	} {
		res, err := Parse(strings.NewReader(tc.input))
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Join(res.Order, ","); got != tc.want {
			t.Errorf("Parse(%q).Order = %s, want %s", tc.input, got, tc.want)
		}
	}
}

func TestParseBadNumber(t *testing.T) {
	_, err := Parse(strings.NewReader("BenchmarkX/y-2 	1000	 abc ns/op\n"))
	if err == nil || !strings.Contains(err.Error(), `line 1: "abc" is not a number`) {
		t.Errorf("Parse of a bad value: err = %v, want a line-numbered error", err)
	}
}

// TestRun runs the command on files in a directory: the fragments are
// included verbatim, the plots written as SVG and linked relative to the
// report, the notes below the marker kept, and a second run gives the
// same report.
func TestRun(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	in := write("out/bench.txt", sample+durableSample)
	mw := write("out/middleware.txt", peerSample)
	accuracy := "## Accuracy of the algorithms\n\n| algorithm | error |\n| --- | --- |\n| gcra | 0.1% |\n"
	acc := write("out/accuracy.md", accuracy)
	load := "| path | p50 |\n| --- | --- |\n<!-- load: p50_direct_us=100 p50_proxy_us=112.5 -->\n"
	ld := write("out/load.md", load)
	notes := "## Notes\n\nWritten by hand: keep me.\n"
	out := write("RESULTS.md", "# old\n\n"+notesMarker+"\n"+notes)
	args := []string{"-in", in + "," + mw, "-durable", "", "-accuracy", acc, "-load", ld,
		"-plots", filepath.Join(dir, "plots"), "-out", out, "-command", "go test -bench . ./... > out/bench.txt"}
	if err := run(args); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	report := string(got)
	for _, want := range []string{
		"\n<!-- included verbatim from " + acc + " -->\n" + accuracy,
		"\n## Load test of `sluice serve`\n\nIncluded verbatim from `" + ld + "`.\n\n" + load,
		"| command | `go test -bench . ./... > out/bench.txt` |",
		"- **hit** — `sluice serve` adds under 15% to p50 latency: p50 100 µs direct, 112 µs through the proxy: adds 12.5% — hit by 2.5 percentage points",
		"| sluice | **Sluice** | 210 | ±0%* | 1.91× | 21.00× | 200 | 100 | 3 | 1 |",
		"(plots/ns-per-op.svg)",
		"(plots/bytes-per-key.svg)",
		"(plots/durable-throughput.svg)",
		"\n" + notesMarker + "\n" + notes,
	} {
		if !strings.Contains(report, want) {
			t.Errorf("report lacks %q:\n%s", want, report)
		}
	}
	if strings.Contains(report, "# old") {
		t.Errorf("the generated part was not replaced:\n%s", report)
	}
	for _, f := range []string{"ns-per-op.svg", "bytes-per-key.svg", "durable-throughput.svg"} {
		b, err := os.ReadFile(filepath.Join(dir, "plots", f))
		if err != nil {
			t.Fatal(err)
		}
		svg := string(b)
		if !strings.Contains(svg, "<svg") || !strings.Contains(svg, "</svg>") {
			t.Errorf("%s is not an SVG document", f)
		}
	}
	// The middleware peers and the workloads appear as bar labels.
	b, _ := os.ReadFile(filepath.Join(dir, "plots", "ns-per-op.svg"))
	for _, label := range []string{"HotKey", "Middleware/allowed", "tollbooth", "ulule", "ns/op"} {
		if !strings.Contains(string(b), label) {
			t.Errorf("ns-per-op.svg lacks %q", label)
		}
	}
	if err := run(args); err != nil {
		t.Fatal(err)
	}
	again, _ := os.ReadFile(out)
	if string(again) != report {
		t.Errorf("a second run changed the report")
	}
}

func TestRunErrors(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty.txt")
	good := filepath.Join(dir, "good.txt")
	bad := filepath.Join(dir, "bad.txt")
	for path, text := range map[string]string{empty: "PASS\n", good: sample, bad: "BenchmarkX/y-2 	1000	 abc ns/op\n"} {
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-in", filepath.Join(dir, "missing.txt"), "-out", filepath.Join(dir, "R.md")}, "missing.txt"},
		{[]string{"-in", empty, "-durable", "", "-out", filepath.Join(dir, "R.md")}, "no benchmark results"},
		{[]string{"-in", good, "-durable", "", "-format", "gif", "-plots", filepath.Join(dir, "plots"), "-out", filepath.Join(dir, "R.md")}, `plot format "gif"`},
		{[]string{"-in", bad, "-durable", "", "-out", filepath.Join(dir, "R.md")}, `bad.txt: line 1: "abc" is not a number`},
	} {
		err := run(tc.args)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("run(%q) = %v, want an error mentioning %q", tc.args, err, tc.want)
		}
	}
}

// variantSample has default and variant Sluice rows, a fakeclock row faster
// than all of them, and x/time/rate beside the fastest peer.
const variantSample = `BenchmarkParallel10k/sluice-token_bucket-2 	1000	 120.0 ns/op	 0 B/op	 0 allocs/op
BenchmarkParallel10k/sluice-gcra-2 	1000	 110.0 ns/op	 0 B/op	 0 allocs/op
BenchmarkParallel10k/sluice-gcra+coarse+key-2 	1000	 60.0 ns/op	 0 B/op	 0 allocs/op
BenchmarkParallel10k/sluice-gcra+key-2 	1000	 90.0 ns/op	 0 B/op	 0 allocs/op
BenchmarkParallel10k/sluice-token_bucket-fakeclock-2 	1000	 20.0 ns/op	 0 B/op	 0 allocs/op
BenchmarkParallel10k/xtimerate-2 	1000	 100.0 ns/op	 0 B/op	 0 allocs/op
BenchmarkParallel10k/golimiter-2 	1000	 80.0 ns/op	 0 B/op	 0 allocs/op
BenchmarkHotKey/sluice-gcra-2 	1000	 50.0 ns/op	 0 B/op	 0 allocs/op
BenchmarkHotKey/sluice-gcra+coarse-2 	1000	 30.0 ns/op	 8 B/op	 1 allocs/op
BenchmarkHotKey/golimiter-2 	1000	 40.0 ns/op	 0 B/op	 0 allocs/op
`

func TestBestSluice(t *testing.T) {
	lines := targetLines(t, variantSample, nil)
	for goal, want := range map[string]string{
		// 60 against golimiter's 80 is 0.75×, under 0.85 by 12%; the
		// fakeclock row is never the best.
		"Parallel10k: the best Sluice row ≤ 0.85× the fastest peer's ns/op, 0 allocs/op": "**hit** — Parallel10k: the best Sluice row ≤ 0.85× the fastest peer's ns/op, 0 allocs/op: sluice-gcra+coarse+key 60.0 ns/op = 0.75× golimiter's 80.0, 0 allocs/op (default: sluice-gcra 1.38×) — hit by 12%",
		// The fastest row allocates: missed whatever its time.
		"HotKey: the best Sluice row ≤ 0.85× the fastest peer's ns/op, 0 allocs/op":   "**missed** — HotKey: the best Sluice row ≤ 0.85× the fastest peer's ns/op, 0 allocs/op: sluice-gcra+coarse 30.0 ns/op = 0.75× golimiter's 40.0, 1 allocs/op (default: sluice-gcra 1.25×) — missed by 1 allocs/op (0 required; time hit by 12%)",
		"Keys100k: the best Sluice row ≤ 0.85× the fastest peer's ns/op, 0 allocs/op": "**not measured in this run** — Keys100k: the best Sluice row ≤ 0.85× the fastest peer's ns/op, 0 allocs/op",
		// Against x/time/rate alone: 0.60× and, for the defaults, 1.10×.
		"Parallel10k: the best Sluice row ≤ 0.85× xtimerate's ns/op":         "**hit** — Parallel10k: the best Sluice row ≤ 0.85× xtimerate's ns/op: sluice-gcra+coarse+key 60.0 ns/op = 0.60× xtimerate's 100 — hit by 29%",
		"Parallel10k: the best default Sluice row ≤ 0.85× xtimerate's ns/op": "**missed** — Parallel10k: the best default Sluice row ≤ 0.85× xtimerate's ns/op: sluice-gcra 110 ns/op = 1.10× xtimerate's 100 — missed by 29%",
	} {
		if got := lines[goal]; got != want {
			t.Errorf("target %q:\n got %s\nwant %s", goal, got, want)
		}
	}

	res, err := Parse(strings.NewReader(variantSample))
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	Write(&b, res, Options{})
	for _, want := range []string{
		"| Parallel10k | sluice-gcra+coarse+key 60.0 | +coarse+key | golimiter 80.0 | 0.75× | sluice-gcra 110 | 1.38× |",
		"| HotKey | sluice-gcra+coarse 30.0 | +coarse | golimiter 40.0 | 0.75× | sluice-gcra 50.0 | 1.25× |",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("the report lacks the row\n%s", want)
		}
	}
	for impl, want := range map[string]string{"sluice-gcra": "default", "sluice-gcra+key": "+key", "sluice-token_bucket+coarse+key": "+coarse+key"} {
		if got := Variant(impl); got != want {
			t.Errorf("Variant(%q) = %q, want %q", impl, got, want)
		}
	}
}

// TestModelIsNoPeer checks that TPMScenario's model row is shown as a
// model beside Sluice's rows, and never taken for the fastest peer,
// though it takes fewer ns/op.
func TestModelIsNoPeer(t *testing.T) {
	const sample = "BenchmarkTPMScenario/sluice-retryafter/covers-2 	100	 9000 ns/op	 100 tokens/min	 1.00 x-limit	 0 B/op	 0 allocs/op\n" +
		"BenchmarkTPMScenario/checkthencount/covers-2 	100	 4000 ns/op	 260 tokens/min	 2.60 x-limit	 0 B/op	 0 allocs/op\n"
	res, err := Parse(strings.NewReader(sample))
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	Write(&b, res, Options{Sources: []string{"x"}})
	out := b.String()
	if strings.Contains(out, "Fastest peer: checkthencount") || strings.Contains(out, "| TPMScenario/covers | ns/op | checkthencount") {
		t.Errorf("the model taken for a peer:\n%s", out)
	}
	for _, row := range []string{
		"| sluice-retryafter | **Sluice** | 9000 | ±0%* | 0 | 0 | 100 | 1.00 | 1 |",
		"| checkthencount | model | 4000 | ±0%* | 0 | 0 | 260 | 2.60 | 1 |",
	} {
		if !strings.Contains(out, row) {
			t.Errorf("TPMScenario table lacks %q:\n%s", row, out)
		}
	}
	if got, want := seriesOrder([]string{"checkthencount", "floor", "golimiter", "sluice-gcra"}), []string{"sluice-gcra", "golimiter", "floor", "checkthencount"}; !slices.Equal(got, want) {
		t.Errorf("seriesOrder = %q, want %q", got, want)
	}
}
