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
