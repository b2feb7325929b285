package main

import (
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

func TestWrite(t *testing.T) {
	res, err := Parse(strings.NewReader(sample))
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	Write(&b, res, "out/bench.txt")
	out := b.String()
	for _, want := range []string{
		"| cpu | AMD EPYC |",
		"| HotKey/sluice-token_bucket | 45.0 ns/op, 0 allocs/op | **met** |",
		"| BytesPerKey/sluice-token_bucket | 80.9 B/key | **missed** by 0.88 B/key (+1%) |",
		"| HotKey | ns/op | golimiter 85.0 | 45.0 | 0.53× | 0 |",
		"| sluice-token_bucket-fakeclock | 30.0 | ±0% | 8 | 1 | 1 |",
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
	Write(&b, res, "out/bench.txt", "out/durable.txt")
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
		"| pebble | 1,000,000 | 2.50 ms | ±0% | 2.40 ms | 1 | 1.30 ms | 1,200,000 | 4,800 | 0.35 s |",
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
