package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// The tests below write a configuration file the way a writer that is
// not atomic does (a shell's "cat > file", kubectl cp, a configuration
// agent): truncated, a prefix, a pause, the rest. The pause, 300ms, is
// three times the watcher's debounce, which alone used to put the prefix
// in force; the processes run with --reload-settle 2s, far beyond it, so
// that a test goroutine stalled on a loaded machine does not make the
// pause outlast the settle interval.

const halfWriteSettle = "2s"

// writeInTwo truncates path, writes data[:cut], calls during (the pause,
// which returns after at least 300ms), then writes the rest.
func writeInTwo(t *testing.T, path, data string, cut int, during func()) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(data[:cut]); err != nil {
		t.Fatal(err)
	}
	during()
	if _, err := f.WriteString(data[cut:]); err != nil {
		t.Fatal(err)
	}
}

// for300ms calls check until 300ms have passed, at least once.
func for300ms(check func()) {
	for end := time.Now().Add(300 * time.Millisecond); ; time.Sleep(10 * time.Millisecond) {
		check()
		if time.Now().After(end) {
			return
		}
	}
}

// A real `sluice serve`: a file rewritten in place, paused after a prefix
// with no rule and no default, never switches the limits off: the caller
// spent under the catch-all stays refused through the pause, and the
// whole file is put in force once (its raised limit). The same prefix
// left alone is refused once settled, counted, and the limits stay; the
// reload that follows logs the rule it drops.
func TestServeProcessHalfWrittenConfig(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	t.Parallel()
	bin := buildBinary(t)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer up.Close()
	cfgPath := filepath.Join(t.TempDir(), "sluice.yaml")
	writeFile(t, cfgPath, gatewayConfig(memoryStore, "10.0.0.0/8", 3))
	p := startServeProcess(t, bin, "--config", cfgPath, "--listen", "127.0.0.1:0", "--upstream", up.URL,
		"--admin", "127.0.0.1:0", "--reload-settle", halfWriteSettle)
	m := serveAdminRE.FindStringSubmatch(p.stderr.String())
	if m == nil {
		t.Fatalf("no admin address in the log:\n%s", p.stderr)
	}
	admin, url := m[1], "http://"+p.listen+"/x"
	ok, bad := `sluice_config_reloads_total{result="ok"}`, `sluice_config_reloads_total{result="error"}`
	if got := codes(t, 4, "GET", url); fmt.Sprint(got) != "[200 200 200 429]" {
		t.Fatalf("catch-all of 3: %v", got)
	}
	refused := func(when string) {
		if code, _ := send(t, "GET", url); code != 429 {
			t.Fatalf("%s: %d, want 429: the limits were switched off\n%s", when, code, p.stderr)
		}
	}

	full := gatewayConfig(memoryStore, "10.0.0.0/8", 4)
	cut := strings.Index(full, "rules:") // the store and identity sections
	writeInTwo(t, cfgPath, full, cut, func() { for300ms(func() { refused("during the pause") }) })
	waitMetricFor(t, admin, ok, 1, 20*time.Second)
	if got := codes(t, 2, "GET", url); fmt.Sprint(got) != "[200 429]" {
		t.Errorf("after the whole file (catch-all 4, 3 spent): %v, want [200 429]", got)
	}
	if v := metricValue(t, admin, bad); v != 0 {
		t.Errorf("%s = %v: the prefix was read as a reload", bad, v)
	}

	// The prefix alone, left: refused once settled, counted, limits kept.
	f, err := os.OpenFile(cfgPath, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(full[:cut])
	f.Close()
	waitMetricFor(t, admin, bad, 1, 20*time.Second)
	refused("after the refusal")
	if !waitLogged(p.stderr, "the file limits nothing, where rules are in force") {
		t.Errorf("the refusal does not say why:\n%s", p.stderr)
	}

	// A reload that drops a rule names it.
	replaceFile(t, cfgPath, strings.Replace(full, "  - name: search\n", "  - name: search-v2\n", 1))
	waitMetricFor(t, admin, ok, 2, 20*time.Second)
	if !waitLogged(p.stderr, `dropped="\"search\""`) {
		t.Errorf("the dropped rule is not logged:\n%s", p.stderr)
	}
}

// waitLogged reports whether log holds want within 10s. A process logs a
// reload before it counts it, but the line reaches the test through the
// process's stderr pipe, which a loaded machine copies later than /metrics
// answers.
func waitLogged(log fmt.Stringer, want string) bool {
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(log.String(), want); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			return false
		}
	}
	return true
}

// waitMetricFor is waitMetric with a deadline of its own.
func waitMetricFor(t *testing.T, admin, series string, want float64, d time.Duration) {
	t.Helper()
	for deadline := time.Now().Add(d); metricValue(t, admin, series) < want; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s = %v after %v, want %v", series, metricValue(t, admin, series), d, want)
		}
	}
}

// A real `sluice rls`: a file rewritten in place, paused after a prefix
// with its descriptors cut, never switches the domain's limits off; the
// whole file is put in force once. The prefix left alone is refused once
// settled, counted, and the limits stay.
func TestRLSProcessHalfWrittenConfig(t *testing.T) {
	t.Parallel()
	waitAwayFromDayBoundary(t) // the budgets are per day
	conf := func(n int) string {
		return fmt.Sprintf("domain: api\ndescriptors:\n  - key: user\n    rate_limit:\n      unit: day\n      requests_per_unit: %d\n  - key: path\n    rate_limit:\n      unit: day\n      requests_per_unit: 100\n", n)
	}
	path := filepath.Join(t.TempDir(), "api.yaml")
	writeFile(t, path, conf(2))
	p := startRLS(t, "--config", path, "--reload-settle", halfWriteSettle)
	const ok, over = rlspb.RateLimitResponse_OK, rlspb.RateLimitResponse_OVER_LIMIT
	p.ask(t, "api", 2, rd("user", "u"))
	refused := func(when string) {
		if r := p.ask(t, "api", 1, rd("user", "u")); r.OverallCode != over {
			t.Fatalf("%s: %s, want OVER_LIMIT: the limits were switched off\n%s", when, r.OverallCode, p.stderr)
		}
	}
	refused("before")

	full := conf(3)
	cut := strings.Index(full, "  - key") // the domain and "descriptors:"
	writeInTwo(t, path, full, cut, func() { for300ms(func() { refused("during the pause") }) })
	p.waitLog(t, "configuration reloaded", 1)
	if r := p.ask(t, "api", 1, rd("user", "u")); r.OverallCode != ok {
		t.Errorf("after the whole file (3 a day, 2 spent): %s, want OK", r.OverallCode)
	}
	if n := strings.Count(p.stderr.String(), "configuration rejected"); n != 0 {
		t.Errorf("%d rejections: the prefix was read as a reload\n%s", n, p.stderr)
	}

	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(full[:cut])
	f.Close()
	p.waitLog(t, "configuration rejected", 1)
	refused("after the refusal")
	// Counted after the line is logged: on a loaded machine the test can
	// read the line first.
	waitMetricFor(t, p.admin, `sluice_config_reloads_total{result="error"}`, 1, 10*time.Second)
	if v := metricValue(t, p.admin, `sluice_config_reloads_total{result="error"}`); v != 1 {
		t.Errorf("refused reloads counted %v, want 1", v)
	}
	if !strings.Contains(p.stderr.String(), "would limit nothing") {
		t.Errorf("the refusal does not say why:\n%s", p.stderr)
	}
}
