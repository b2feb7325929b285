package main

import (
	"path/filepath"
	"testing"
)

// A shadow rule alone, through sluice serve as a real process: no request
// is refused and none carries rate limit headers, and the metrics count
// the would-be denials apart from the allowed decisions.
func TestServeProcessShadowRule(t *testing.T) {
	t.Parallel()
	p := startShadowServe(t, "--admin", "127.0.0.1:0")
	m := adminRE.FindStringSubmatch(p.stderr.String())
	if m == nil {
		t.Fatalf("no admin address in the log:\n%s", p.stderr)
	}
	admin := m[1]
	orders := "http://" + p.listen + "/api/orders"
	for i := range 5 {
		code, h := send(t, "POST", orders, "X-User-ID", "alice")
		if code != 200 || h.Get("RateLimit-Policy") != "" || h.Get("Retry-After") != "" {
			t.Fatalf("request %d under the shadow rule: %d, headers %v; want 200 without rate limit headers", i+1, code, h)
		}
	}
	pollMetric(t, admin, `sluice_shadow_denials_total{rule="orders-trial"}`, 3)
	if got := metricValue(t, admin, `sluice_decisions_total{decision="allowed",rule="orders-trial"}`); got != 2 {
		t.Errorf("allowed decisions under the shadow rule: %v, want 2", got)
	}
}

// TestServeProcessShadowHeaders: with --shadow-headers a shadow rule's
// rate-limit fields reach the client on a request no enforced rule covers,
// and still no request is refused.
func TestServeProcessShadowHeaders(t *testing.T) {
	t.Parallel()
	p := startShadowServe(t, "--shadow-headers")
	orders := "http://" + p.listen + "/api/orders"
	for i := range 4 {
		code, h := send(t, "POST", orders, "X-User-ID", "bob")
		if code != 200 || h.Get("Retry-After") != "" {
			t.Fatalf("request %d under the shadow rule: %d, headers %v; want 200 without Retry-After", i+1, code, h)
		}
		if h.Get("RateLimit-Policy") == "" || h.Get("X-RateLimit-Limit") != "2" {
			t.Fatalf("request %d: headers %v; want the shadow rule's RateLimit-Policy and X-RateLimit-Limit 2", i+1, h)
		}
	}
}

// startShadowServe starts sluice serve as a process in front of a test
// upstream, with one shadow rule (orders-trial: 2 an hour per user on POST
// /api/orders) and the extra flags given.
func startShadowServe(t *testing.T, extra ...string) *serveProcess {
	t.Helper()
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := buildBinary(t)
	up := upstream(t)
	cfgPath := filepath.Join(t.TempDir(), "sluice.yaml")
	writeFile(t, cfgPath, `rules:
  - name: orders-trial
    method: POST
    path_prefix: /api/orders
    scope: user
    algorithm: token_bucket
    limit: 2
    window: 1h
    shadow: true
`)
	return startServeProcess(t, bin, append([]string{"--config", cfgPath, "--listen", "127.0.0.1:0", "--upstream", up.URL}, extra...)...)
}
