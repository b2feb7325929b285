package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// plansConfig is a gateway on Pebble in dir: orders of 3 an hour per user,
// 10 for premium callers (the plan from a trusted proxy's X-Sluice-Plan:
// the tests' loopback), and the overrides given (YAML list items).
func plansConfig(dir, overrides string) string {
	return fmt.Sprintf(`store:
  backend: pebble
  dir: %s
identity:
  trusted_proxies: [127.0.0.1/32]
  plan_header: X-Sluice-Plan
rules:
  - name: orders
    method: POST
    path_prefix: /api/orders
    scope: user
    algorithm: token_bucket
    limit: 3
    window: 1h
  - name: orders-premium
    method: POST
    path_prefix: /api/orders
    scope: user
    algorithm: token_bucket
    limit: 10
    window: 1h
    plan: premium
overrides:
%s`, filepath.Join(dir, "state"), overrides)
}

var adminRE = regexp.MustCompile(`msg="sluice serve: listening" listen=\S+ admin=(\S+)`)

// pollMetric polls series on admin until it reaches want. It has no
// deadline of its own: the test's timeout bounds it, so a loaded machine
// makes it slower, never wrong.
func pollMetric(t *testing.T, admin, series string, want float64) {
	t.Helper()
	for metricValue(t, admin, series) < want {
		time.Sleep(10 * time.Millisecond)
	}
}

// Plans and overrides through a real sluice serve process over HTTP,
// including a hot reload that changes an override and keeps what the
// caller spent; then sluice reset on the stopped Pebble store unblocks
// one caller, and a new serve process shows it unblocked and everyone
// else as they were.
func TestServeProcessPlansOverridesAndReset(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	t.Parallel()
	bin := buildBinary(t)
	up := upstream(t)
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "sluice.yaml")
	writeFile(t, cfgPath, plansConfig(dir, "  - {rule: orders, caller: user:carol, limit: 6}\n"))
	args := []string{"--config", cfgPath, "--listen", "127.0.0.1:0", "--upstream", up.URL, "--admin", "127.0.0.1:0"}

	p := startServeProcess(t, bin, args...)
	m := adminRE.FindStringSubmatch(p.stderr.String())
	if m == nil {
		t.Fatalf("no admin address in the log:\n%s", p.stderr)
	}
	admin := m[1]
	orders := "http://" + p.listen + "/api/orders"

	// No plan: 3. Premium: 10. A client's own plan header counts only
	// from the trusted proxy, which the tests' loopback is.
	if got := codes(t, 4, "POST", orders, "X-User-ID", "alice"); fmt.Sprint(got) != "[200 200 200 429]" {
		t.Errorf("alice on no plan: %v, want 3", got)
	}
	got := codes(t, 11, "POST", orders, "X-User-ID", "bob", "X-Sluice-Plan", "premium")
	if countStatus(got[:10], 200) != 10 || got[10] != 429 {
		t.Errorf("bob on premium: %v, want 10 then 429", got)
	}
	_, h := send(t, "POST", orders, "X-User-ID", "dave", "X-Sluice-Plan", "premium")
	if p := h.Get("RateLimit-Policy"); p != `"orders-premium";q=10;w=3600` {
		t.Errorf("a premium caller's policy %q, want orders-premium's", p)
	}
	// Carol's override: 6, reported in her headers.
	got = codes(t, 6, "POST", orders, "X-User-ID", "carol")
	code, h := send(t, "POST", orders, "X-User-ID", "carol")
	if countStatus(got, 200) != 6 || code != 429 || h.Get("RateLimit-Policy") != `"orders";q=6;w=3600` {
		t.Errorf("carol: %v then %d (policy %q), want 6 allowed under her 6", got, code, h.Get("RateLimit-Policy"))
	}

	// Reload: carol raised to 8, alice given 5. Both keep what they
	// spent: 2 more each, not a fresh budget.
	replaceFile(t, cfgPath, plansConfig(dir, "  - {rule: orders, caller: user:carol, limit: 8}\n  - {rule: orders, caller: user:alice, limit: 5}\n"))
	pollMetric(t, admin, `sluice_config_reloads_total{result="ok"}`, 1)
	if got := codes(t, 3, "POST", orders, "X-User-ID", "carol"); fmt.Sprint(got) != "[200 200 429]" {
		t.Errorf("carol raised from 6 to 8 after 6 spent: %v, want 2 more", got)
	}
	if got := codes(t, 3, "POST", orders, "X-User-ID", "alice"); fmt.Sprint(got) != "[200 200 429]" {
		t.Errorf("alice given 5 after 3 spent: %v, want 2 more", got)
	}
	code, body := get(t, "http://"+admin+"/v1/keys?rule=orders&key=user:carol")
	if k := readKeyState(t, body); code != 200 || !k.Override || k.Limit != 8 || k.AllowedNow {
		t.Errorf("/v1/keys for carol: %d %+v, want her override of 8, blocked", code, k)
	}

	plans := map[string]string{}
	for _, r := range readRules(t, "http://"+admin).Rules {
		plans[r.Name] = r.Plan
	}
	if plans["orders-premium"] != "premium" || plans["orders"] != "" {
		t.Errorf("/rules plans: %v, want orders-premium on premium", plans)
	}

	// Stop the gateway; its store is flushed.
	p.cmd.Process.Signal(syscall.SIGTERM)
	if err := p.wait(t, 30*time.Second); err != nil {
		t.Fatalf("serve after SIGTERM: %v\n%s", err, p.stderr)
	}

	// sluice reset on the stopped store: alice is unblocked.
	out, err := exec.Command(bin, "reset", "--config", cfgPath, "--rule", "orders", "--key", "user:alice").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "reset user:alice under rule orders (its record is gone)") {
		t.Fatalf("sluice reset: %v\n%s", err, out)
	}
	// A second reset finds nothing: it says so and exits 1.
	var stderr bytes.Buffer
	cmd := exec.Command(bin, "reset", "--config", cfgPath, "--rule", "orders", "--key", "user:alice")
	cmd.Stderr = &stderr
	if err := cmd.Run(); err == nil || !strings.Contains(stderr.String(), "nothing to reset: rule orders has no record of user:alice") {
		t.Errorf("sluice reset of a key with no record: %v\n%s\nwant exit 1 saying there was nothing to reset", err, stderr.String())
	}
	// On memory there is nothing to reset: it says where to do it.
	stderr.Reset()
	cmd = exec.Command(bin, "reset", "--backend", "memory", "--rule", "orders", "--key", "user:alice")
	cmd.Stderr = &stderr
	if err := cmd.Run(); err == nil || !strings.Contains(stderr.String(), "POST /v1/reset") {
		t.Errorf("sluice reset on memory: %v\n%s\nwant exit 2 pointing to POST /v1/reset", err, stderr.String())
	}
	// An unknown rule is named.
	stderr.Reset()
	cmd = exec.Command(bin, "reset", "--config", cfgPath, "--rule", "order", "--key", "user:alice")
	cmd.Stderr = &stderr
	if err := cmd.Run(); err == nil || !strings.Contains(stderr.String(), "--rule order") {
		t.Errorf("sluice reset of an unknown rule: %v\n%s", err, stderr.String())
	}

	// A mistyped directory is an error, and no empty store is made there.
	for _, backend := range []string{"pebble", "bolt"} {
		missing := filepath.Join(t.TempDir(), "typo")
		stderr.Reset()
		cmd = exec.Command(bin, "reset", "--backend", backend, "--dir", missing, "--rule", "orders", "--key", "user:alice")
		cmd.Stderr = &stderr
		if err := cmd.Run(); err == nil || !strings.Contains(stderr.String(), "--dir "+missing) {
			t.Errorf("sluice reset --backend %s on a missing --dir: %v\n%s", backend, err, stderr.String())
		}
		if _, err := os.Stat(missing); err == nil {
			t.Errorf("sluice reset --backend %s made %s", backend, missing)
		}
		empty := t.TempDir()
		stderr.Reset()
		cmd = exec.Command(bin, "reset", "--backend", backend, "--dir", empty, "--rule", "orders", "--key", "user:alice")
		cmd.Stderr = &stderr
		if err := cmd.Run(); err == nil || !strings.Contains(stderr.String(), "holds no "+backend+" store") {
			t.Errorf("sluice reset --backend %s on an empty --dir: %v\n%s", backend, err, stderr.String())
		}
	}

	// A new gateway on the same store: alice has her whole 5 again; carol
	// and bob are still blocked.
	p = startServeProcess(t, bin, args...)
	orders = "http://" + p.listen + "/api/orders"
	if got := codes(t, 6, "POST", orders, "X-User-ID", "alice"); fmt.Sprint(got) != "[200 200 200 200 200 429]" {
		t.Errorf("alice after sluice reset: %v, want her whole 5", got)
	}
	if code, _ := send(t, "POST", orders, "X-User-ID", "carol"); code != 429 {
		t.Errorf("carol after the restart: %d, want still 429", code)
	}
	if code, _ := send(t, "POST", orders, "X-User-ID", "bob", "X-Sluice-Plan", "premium"); code != 429 {
		t.Errorf("bob after the restart: %d, want still 429", code)
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	if err := p.wait(t, 30*time.Second); err != nil {
		t.Errorf("second serve after SIGTERM: %v\n%s", err, p.stderr)
	}
}
