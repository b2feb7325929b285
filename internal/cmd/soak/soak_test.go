package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/config"
	"github.com/sluice-go/sluice/internal/loadgen/serveproc"
)

// The bound of maxAllowed assumes both variants hold the same rules (name,
// algorithm, window, cost) with the limits of the rules table, and that
// each caller's request falls under the rule it is counted against. Check
// that against the real configuration parser and matcher.
func TestConfigsMatchTheBound(t *testing.T) {
	t.Parallel()
	cs := callers(0xabcdef)
	for _, v := range variants {
		cfg, err := config.Parse("soak.yaml", []byte(configText(v, "/tmp/x")))
		if err != nil {
			t.Fatalf("variant %s: %v", v.name, err)
		}
		rs, err := cfg.Ruleset()
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Store.Backend != config.BackendPebble || cfg.Store.Dir != "/tmp/x" {
			t.Errorf("variant %s: store %+v, want pebble in /tmp/x", v.name, cfg.Store)
		}
		all := append(rs.Rules(), rs.Default())
		if len(all) != len(rules) {
			t.Errorf("variant %s: %d rules, the bound table has %d", v.name, len(all), len(rules))
		}
		for _, c := range all {
			r := c.Rule()
			want, ok := rules[r.Name]
			if !ok {
				t.Errorf("variant %s: rule %s is not in the bound table", v.name, r.Name)
				continue
			}
			if string(r.Algorithm) != want.algorithm || r.Cost != want.cost || r.Window != window || r.Limit != want.limit(v) || r.Burst != 0 {
				t.Errorf("variant %s: rule %+v, the bound table says %s cost %d limit %d window %v",
					v.name, r, want.algorithm, want.cost, want.limit(v), window)
			}
		}
		for _, c := range cs {
			path, _, _ := strings.Cut(c.path, "?")
			m := rs.AppendMatch(nil, sluice.RequestShape{Method: c.method, Path: path})
			if len(m) != 1 || m[0].Rule().Name != c.rule {
				t.Errorf("variant %s: %s %s matches %d rules, want exactly %s", v.name, c.method, c.path, len(m), c.rule)
			}
		}
	}
	prev := ""
	for n := range 6 {
		text := invalidText(n, "/tmp/x")
		if _, err := config.Parse("soak.yaml", []byte(text)); !errors.Is(err, sluice.ErrInvalidConfig) {
			t.Errorf("invalid configuration %d parsed (err %v):\n%s", n, err, text)
		}
		if text == prev {
			t.Errorf("invalid configuration %d is the same as the one before; the watcher would skip it", n)
		}
		prev = text
	}
}

func TestMaxAllowed(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		rule    string
		elapsed time.Duration
		want    int64
	}{
		// Bucket: floor((40 + 40×elapsed/1m) / 1) + 1.
		{"orders-write", 0, 41},
		{"orders-write", 30 * time.Second, 61},
		{"orders-write", 2 * time.Minute, 121},
		// GCRA, L_max 60.
		{"reports", time.Minute, 121},
		// Sliding counter, cost 5, L_max 100: (floor(elapsed/1m)+2) × 20.
		{"search", 5 * time.Second, 40},
		{"search", 2 * time.Minute, 80},
		{"catch-all", 2*time.Minute + time.Second, 800},
	} {
		if got := maxAllowed(rules[tc.rule], tc.elapsed); got != tc.want {
			t.Errorf("maxAllowed(%s, %v) = %d, want %d", tc.rule, tc.elapsed, got, tc.want)
		}
	}
}

func TestScrape(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, "# HELP x y\n# TYPE sluice_config_reloads_total counter\n"+
			"sluice_config_reloads_total{result=\"error\"} 3\nsluice_config_reloads_total{result=\"ok\"} 11\nsluice_keys 14\n")
	}))
	defer srv.Close()
	m, err := scrape(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	if m[`sluice_config_reloads_total{result="ok"}`] != 11 || m[`sluice_config_reloads_total{result="error"}`] != 3 || m["sluice_keys"] != 14 {
		t.Errorf("scrape = %v", m)
	}
}

func TestFlags(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"-duration", "10ms"}, {"-rate", "0"}, {"-workers", "0"}, {"-reload-every", "1ms"}, {"-max-rss", "0"}, {"-duration", "5s"}, {"extra"}, {"-nope"},
	} {
		var stderr bytes.Buffer
		if code := run(context.Background(), args, io.Discard, &stderr); code != 2 {
			t.Errorf("soak %v: status %d, want 2 (usage); stderr %s", args, code, &stderr)
		}
	}
}

// A short soak of a real sluice serve passes; with a memory bound it
// cannot meet, it fails and says why. And a process given an invalid
// configuration is reported as not started, with the file named.
func TestSoakShort(t *testing.T) {
	if testing.Short() {
		t.Skip("builds sluice and runs it for seconds")
	}
	tmp := t.TempDir()
	// The binary make test built once for this test and cmd/sluice's, or
	// one built here.
	bin, err := serveproc.Binary(context.Background(), os.Getenv(serveproc.TestBinaryEnv), ".", tmp)
	if err != nil {
		t.Fatal(err)
	}

	dir := filepath.Join(tmp, "state")
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), []string{"-duration", "5s", "-reload-every", "1s", "-sluice", bin, "-dir", dir}, &stdout, &stderr)
	if code != 0 {
		t.Fatalf("soak: status %d\nstdout:\n%s\nstderr:\n%s", code, &stdout, &stderr)
	}
	out := stdout.String()
	for _, want := range []string{"soak: PASS", "0 transport errors", "SIGTERM exit 0", " 0 corrupt"} {
		if !strings.Contains(out, want) {
			t.Errorf("summary lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, " 0 rejected") || strings.Contains(out, "reloads 0 ok") {
		t.Errorf("the short soak did not exercise both kinds of reload:\n%s", out)
	}
	if m, _ := filepath.Glob(filepath.Join(dir, "MANIFEST-*")); len(m) == 0 {
		t.Errorf("-dir %s holds no Pebble store", dir)
	}

	stdout.Reset()
	stderr.Reset()
	code = run(context.Background(), []string{"-duration", "2s", "-reload-every", "400ms", "-max-rss", "1", "-sluice", bin}, &stdout, &stderr)
	if code != 1 || !strings.Contains(stderr.String(), "soak: FAIL: memory:") {
		t.Errorf("soak -max-rss 1: status %d, want 1 with a memory failure; stderr:\n%s", code, &stderr)
	}

	cfg := filepath.Join(tmp, "bad.yaml")
	os.WriteFile(cfg, []byte(invalidText(0, dir)), 0o644)
	_, err = serveproc.Start(bin, cfg, "http://127.0.0.1:1", filepath.Join(tmp, "bad.log"), 10*time.Second)
	if !errors.Is(err, serveproc.ErrNotStarted) || !strings.Contains(err.Error(), "bad.yaml") {
		t.Errorf("starting serve on an invalid configuration: %v, want ErrNotStarted naming bad.yaml", err)
	}
}
