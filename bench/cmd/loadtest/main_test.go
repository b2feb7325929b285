package main

import (
	"bytes"
	"context"
	"io"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sluice-go/sluice/internal/loadgen"
)

// The summary line is the one the report generator parses.
var loadLine = regexp.MustCompile(`^<!-- load: p50_direct_us=[0-9.]+ p50_proxy_us=[0-9.]+ p99_direct_us=[0-9.]+ p99_proxy_us=[0-9.]+ rps_direct=[0-9.]+ rps_proxy=[0-9.]+ p50_bare_us=[0-9.]+ p99_bare_us=[0-9.]+ rps_bare=[0-9.]+ limited_ok=(true|false) -->$`)

func result(lat ...time.Duration) loadgen.Result {
	return loadgen.Result{Requests: len(lat), ByStatus: map[int]int{200: len(lat)}, Latencies: lat, Elapsed: time.Second}
}

func TestMarkdown(t *testing.T) {
	t.Parallel()
	m := &measurement{
		o: &options{requests: 4, concurrency: 2, rounds: 2, callers: 3, limitedCallers: 2, limit: 5},
		loaded: pair{concurrency: 2, requests: 4,
			direct:   result(100*time.Microsecond, 200*time.Microsecond, 300*time.Microsecond, 400*time.Microsecond),
			bare:     result(200*time.Microsecond, 300*time.Microsecond, 400*time.Microsecond, 500*time.Microsecond),
			proxy:    result(300*time.Microsecond, 400*time.Microsecond, 600*time.Microsecond, 900*time.Microsecond),
			roundP50: [][3]time.Duration{{100 * time.Microsecond, 200 * time.Microsecond, 300 * time.Microsecond}}},
		serial: &pair{concurrency: 1, requests: 2,
			direct: result(20*time.Microsecond, 30*time.Microsecond),
			bare:   result(100*time.Microsecond, 110*time.Microsecond),
			proxy:  result(120*time.Microsecond, 130*time.Microsecond)},
		limited:   &loadgen.Result{ByStatus: map[int]int{200: 10, 429: 20}},
		limitedOK: true, limitedDetail: "fine", goVersion: "go1.x", when: "now",
	}
	md := m.markdown()
	last := strings.TrimSpace(md[strings.LastIndex(strings.TrimSpace(md), "\n")+1:])
	if !loadLine.MatchString(last) {
		t.Fatalf("last line %q does not match the load line format", last)
	}
	want := "<!-- load: p50_direct_us=200.0 p50_proxy_us=400.0 p99_direct_us=400.0 p99_proxy_us=900.0 rps_direct=4.0 rps_proxy=4.0 p50_bare_us=300.0 p99_bare_us=500.0 rps_bare=4.0 limited_ok=true -->"
	if last != want {
		t.Errorf("load line\n got %s\nwant %s", last, want)
	}
	for _, s := range []string{"| direct | 200 µs | 400 µs | 400 µs | 400 µs | 4 |", "| added by `sluice serve` (vs direct) | +200 µs (+100%)",
		"| added by the limiter (vs no rule) | +100 µs (+33%)", "**ok**", "100/200/300",
		"Concurrency 1, 2 requests per side", "| added by `sluice serve` (vs direct) | +100 µs (+500%)"} {
		if !strings.Contains(md, s) {
			t.Errorf("markdown lacks %q:\n%s", s, md)
		}
	}
	m.limitedOK = false
	if !strings.Contains(m.markdown(), "limited_ok=false") || !strings.Contains(m.markdown(), "**FAILED**") {
		t.Error("a failed limiter check is not shown as failed")
	}
}

func TestCheckLimited(t *testing.T) {
	t.Parallel()
	names := []string{"a", "b"}
	good := &loadgen.Result{ByCaller: map[string]*loadgen.CallerStats{
		"a": {ByStatus: map[int]int{200: 5, 429: 10}},
		"b": {ByStatus: map[int]int{200: 5, 429: 10}},
	}}
	if ok, detail := checkLimited(good, names, 5, 10); !ok {
		t.Errorf("exact counts refused: %s", detail)
	}
	for name, bad := range map[string]*loadgen.Result{
		"one too many": {ByCaller: map[string]*loadgen.CallerStats{
			"a": {ByStatus: map[int]int{200: 6, 429: 9}}, "b": {ByStatus: map[int]int{200: 5, 429: 10}}}},
		"no Retry-After": {ByCaller: map[string]*loadgen.CallerStats{
			"a": {ByStatus: map[int]int{200: 5, 429: 10}, NoRetryAfter: 1}, "b": {ByStatus: map[int]int{200: 5, 429: 10}}}},
		"a 503": {ByCaller: map[string]*loadgen.CallerStats{
			"a": {ByStatus: map[int]int{200: 5, 429: 9, 503: 1}}, "b": {ByStatus: map[int]int{200: 5, 429: 10}}}},
		"caller missing": {ByCaller: map[string]*loadgen.CallerStats{
			"a": {ByStatus: map[int]int{200: 5, 429: 10}}}},
		"transport error": {Errors: 1, ByCaller: map[string]*loadgen.CallerStats{
			"a": {ByStatus: map[int]int{200: 5, 429: 10}}, "b": {ByStatus: map[int]int{200: 5, 429: 10}}}},
	} {
		if ok, _ := checkLimited(bad, names, 5, 10); ok {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestFlags(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"-rounds", "0"}, {"-requests", "3", "-rounds", "5"}, {"-concurrency", "0"}, {"-limit", "0"}, {"-out", ""}, {"x"},
	} {
		var stderr bytes.Buffer
		if code := run(context.Background(), args, io.Discard, &stderr); code != 2 {
			t.Errorf("loadtest %v: status %d, want 2; stderr %s", args, code, &stderr)
		}
	}
}
