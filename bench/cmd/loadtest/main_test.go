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

// The summary line is the one the report generator parses: its first keys
// stay in this order.
var loadLine = regexp.MustCompile(`^<!-- load: p50_direct_us=[0-9.]+ p50_proxy_us=[0-9.]+ p99_direct_us=[0-9.]+ p99_proxy_us=[0-9.]+ rps_direct=[0-9.]+ rps_proxy=[0-9.]+ p50_bare_us=[0-9.]+ p99_bare_us=[0-9.]+ rps_bare=[0-9.]+( [a-z0-9_]+=[0-9.]+)* limited_ok=(true|false) -->$`)

// sideOf is a side whose rounds measured rps, p50 and p99 (µs), one
// triple a round.
func sideOf(rounds ...[3]float64) side {
	var s side
	for _, r := range rounds {
		s.rounds = append(s.rounds, round{rps: r[0], p50: time.Duration(r[1] * float64(time.Microsecond)), p99: time.Duration(r[2] * float64(time.Microsecond))})
	}
	return s
}

func TestMarkdown(t *testing.T) {
	t.Parallel()
	loaded := pair{concurrency: 2, requests: 6}
	loaded.sides[vDirect] = sideOf([3]float64{9000, 100, 300}, [3]float64{7000, 120, 500}, [3]float64{8000, 110, 400})
	loaded.sides[vNginx] = sideOf([3]float64{5000, 200, 600}, [3]float64{5000, 200, 600}, [3]float64{5000, 200, 600})
	loaded.sides[vNginxLimit] = sideOf([3]float64{4000, 250, 800}, [3]float64{4000, 250, 800}, [3]float64{4000, 250, 800})
	loaded.sides[vMemory] = sideOf([3]float64{3000, 500, 1600}, [3]float64{1000, 900, 9000}, [3]float64{2000, 600, 1200})
	loaded.sides[vPebble] = sideOf([3]float64{1000, 700, 2000}, [3]float64{1000, 700, 2000}, [3]float64{1000, 700, 2000})
	loaded.sides[vBare] = sideOf([3]float64{3000, 400, 1000}, [3]float64{3000, 400, 1000}, [3]float64{3000, 400, 1000})
	serial := &pair{concurrency: 1, requests: 2}
	for v := range nVariants {
		serial.sides[v] = sideOf([3]float64{100, 20, 30})
	}
	m := &measurement{
		o:      &options{requests: 6, concurrency: 2, rounds: 3, callers: 3, limitedCallers: 2, limit: 5},
		loaded: loaded, serial: serial, nginx: "/usr/sbin/nginx", nginxVersion: "nginx/1.x",
		limited:   &loadgen.Result{ByStatus: map[int]int{200: 10, 429: 20}},
		limitedOK: true, limitedDetail: "fine", goVersion: "go1.x", when: "now",
	}
	md := m.markdown()
	last := strings.TrimSpace(md[strings.LastIndex(strings.TrimSpace(md), "\n")+1:])
	if !loadLine.MatchString(last) {
		t.Fatalf("last line %q does not match the load line format", last)
	}
	want := "<!-- load: p50_direct_us=110.0 p50_proxy_us=700.0 p99_direct_us=400.0 p99_proxy_us=2000.0 rps_direct=8000.0 rps_proxy=1000.0 p50_bare_us=400.0 p99_bare_us=1000.0 rps_bare=3000.0" +
		" p50_memory_us=600.0 p99_memory_us=1600.0 rps_memory=2000.0 p50_nginx_us=200.0 p99_nginx_us=600.0 rps_nginx=5000.0 p50_nginx_limit_us=250.0 p99_nginx_limit_us=800.0 rps_nginx_limit=4000.0 limited_ok=true -->"
	if last != want {
		t.Errorf("load line\n got %s\nwant %s", last, want)
	}
	for _, s := range []string{
		"| upstream direct | 8000 | 110 µs | 400 µs |",
		"| `sluice serve`, memory, deciding every request | 2000 | 600 µs | 1600 µs |",
		"| serve-memory ÷ nginx limit_req | ×0.50 | ×2.40 | ×2.00 |",
		"9000/5000/4000/3000/1000/3000", "**ok**", "nginx/1.x",
		"Concurrency 1, 2 requests per variant",
	} {
		if !strings.Contains(md, s) {
			t.Errorf("markdown lacks %q:\n%s", s, md)
		}
	}
	m.limitedOK = false
	if !strings.Contains(m.markdown(), "limited_ok=false") || !strings.Contains(m.markdown(), "**FAILED**") {
		t.Error("a failed limiter check is not shown as failed")
	}
	// Without nginx its rows and keys are absent, and the text says why.
	m.nginx = ""
	m.loaded.sides[vNginx], m.loaded.sides[vNginxLimit] = side{}, side{}
	m.serial.sides[vNginx], m.serial.sides[vNginxLimit] = side{}, side{}
	md = m.markdown()
	if strings.Contains(md, "rps_nginx") || strings.Contains(md, "÷ nginx") || !strings.Contains(md, "nginx was not found") {
		t.Errorf("without nginx:\n%s", md)
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
