package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// NEAR_LIMIT_RATIO from envoyproxy/ratelimit's environment sets the
// near-limit metric's threshold (as its checkNearLimitThreshold: allowed
// hits past floor(limit × ratio)); --near-limit-ratio goes over it.
func TestRLSProcessNearLimitRatio(t *testing.T) {
	t.Parallel()
	waitAwayFromDayBoundary(t)
	cfg := filepath.Join(t.TempDir(), "near.yaml")
	writeFile(t, cfg, "domain: near\ndescriptors:\n  - key: k\n    rate_limit: {unit: day, requests_per_unit: 10}\n")
	series := `sluice_rls_near_limit_total{descriptor="k",domain="near"}`
	for _, c := range []struct {
		env  []string
		args []string
		want float64
	}{
		{nil, nil, 2}, // 0.8: hits 9 and 10
		{[]string{"NEAR_LIMIT_RATIO=0.5"}, nil, 5},
		{[]string{"NEAR_LIMIT_RATIO=0.5"}, []string{"--near-limit-ratio", "0.3"}, 7},
		{[]string{"NEAR_LIMIT_RATIO=1"}, nil, 0},
	} {
		p := startRLSEnv(t, c.env, append([]string{"--config", cfg}, c.args...)...)
		for range 10 {
			p.ask(t, "near", 1, rd("k", "v"))
		}
		if got := metricValue(t, p.admin, series); got != c.want {
			t.Errorf("%v %v: %s = %v after 10 hits of 10, want %v", c.env, c.args, series, got, c.want)
		}
	}
	if code, _, stderr := runCmd(t, "", "rls", "--config", cfg, "--grpc", "127.0.0.1:0", "--near-limit-ratio", "0"); code != 2 ||
		!strings.Contains(stderr, "--near-limit-ratio 0: want a share of the limit in (0, 1]") {
		t.Errorf("--near-limit-ratio 0: exit %d\n%s", code, stderr)
	}
}

// STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT: sluice rls never spends on a
// refusal. Unset or false (envoyproxy/ratelimit's default, under which a
// refused request's hits count), one line at start says this differs;
// true, nothing is said.
func TestRLSProcessStopCacheKeyIncrementNote(t *testing.T) {
	t.Parallel()
	const note = "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT "
	for _, c := range []struct {
		env   []string
		lines int
		says  string
	}{
		{nil, 1, "unset (false, envoyproxy/ratelimit's default): a difference"},
		{[]string{"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=false"}, 1, "=false: a difference"},
		{[]string{"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true"}, 0, ""},
	} {
		p := startRLSEnv(t, c.env, "--config", "testdata/rls/sluice")
		log := p.stderr.String()
		if n := strings.Count(log, note); n != c.lines || !strings.Contains(log, c.says) {
			t.Errorf("%v: %d lines of the note, want %d saying %q:\n%s", c.env, n, c.lines, c.says, log)
		}
	}
}
