package config

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/sluice-go/sluice/metrics"
)

// guardWatch starts a watcher on reloadConfig(5) with a short debounce and
// settle, logging to logs and counting in m.
func guardWatch(t *testing.T, opts WatchOptions) (path string, logs *lockedBuffer, got *reloads, m *metrics.Metrics, w *Watcher, limit func() int64) {
	t.Helper()
	path = filepath.Join(t.TempDir(), "sluice.yaml")
	writeFile(t, path, reloadConfig(5, ""))
	logs, got, m = &lockedBuffer{}, &reloads{}, metrics.New(nil)
	opts.Logger = slog.New(slog.NewTextHandler(logs, nil))
	opts.Metrics, opts.OnReload = m, got.on
	if opts.Debounce == 0 {
		opts.Debounce = 20 * time.Millisecond
	}
	if opts.Settle == 0 {
		opts.Settle = 50 * time.Millisecond
	}
	reg, w := startWatch(t, path, opts)
	return path, logs, got, m, w, func() int64 { return ordersLimit(reg) }
}

// A file that limits nothing, where rules are in force, is refused: the
// rules stay, the refusal is logged and counted. It is what a prefix of
// the file that ends before its first rule reads as.
func TestWatcherRefusesAFileThatLimitsNothing(t *testing.T) {
	path, logs, got, m, w, limit := guardWatch(t, WatchOptions{})
	full := reloadConfig(5, "")
	prefix := full[:strings.Index(full, "rules:")] // the store section alone
	for i, data := range []string{prefix, "rules: []\n", "match: all\n", "rules:\n  - name: orders\n    method: POST\n    path_prefix: /api/orders\n    scope: user\n    algorithm: token_bucket\n    limit: 1\n    window: 1m\n    shadow: true\n"} {
		replaceFile(t, path, data)
		eventually(t, "the refusal", func() bool { return got.count() == i+1 })
		cfg, err := got.last()
		if cfg != nil || !errors.Is(err, ErrLimitsNothing) {
			t.Fatalf("file %d: OnReload got (%v, %v), want ErrLimitsNothing", i, cfg, err)
		}
		if !strings.Contains(err.Error(), `in force: "orders", "catch-all"`) {
			t.Errorf("file %d: the error %q does not name the rules in force", i, err)
		}
		if l := limit(); l != 5 {
			t.Fatalf("file %d: orders limit %d after the refusal, want 5 still", i, l)
		}
		if s := m.Snapshot(); s.ReloadErrors != uint64(i+1) || s.Reloads != 0 {
			t.Errorf("file %d: reloads ok %d, errors %d; want 0 and %d", i, s.Reloads, s.ReloadErrors, i+1)
		}
	}
	if n := strings.Count(logs.String(), "configuration rejected"); n != 4 {
		t.Errorf("%d rejections logged, want 4:\n%s", n, logs.String())
	}
	// Explicit Reload refuses it too.
	if err := w.Reload(); !errors.Is(err, ErrLimitsNothing) {
		t.Errorf("Reload = %v, want ErrLimitsNothing", err)
	}
}

// A file that says allow_empty: true is put in force though it limits
// nothing, and the reload logs the rules it drops; from there, an empty
// file needs no marker (nothing was limited).
func TestWatcherAllowEmpty(t *testing.T) {
	path, logs, got, m, _, limit := guardWatch(t, WatchOptions{})
	replaceFile(t, path, "allow_empty: true\nrules: []\n")
	eventually(t, "the empty file in force", func() bool { return m.Snapshot().Reloads == 1 })
	if cfg, err := got.last(); err != nil || cfg == nil || !cfg.AllowEmpty || !cfg.LimitsNothing() {
		t.Fatalf("OnReload got (%v, %v), want the empty configuration", cfg, err)
	}
	if l := limit(); l != -1 {
		t.Errorf("orders limit %d, want no orders rule", l)
	}
	if !strings.Contains(logs.String(), `dropped="\"orders\", \"catch-all\""`) {
		t.Errorf("the dropped rules are not logged:\n%s", logs.String())
	}
	replaceFile(t, path, "rules: []\n")
	eventually(t, "the unmarked empty file in force", func() bool { return m.Snapshot().Reloads == 2 })
	if s := m.Snapshot(); s.ReloadErrors != 0 {
		t.Errorf("ReloadErrors = %d, want 0", s.ReloadErrors)
	}
}

// Each reload put in force logs the names of the rules it drops, or none.
func TestWatcherLogsDroppedRules(t *testing.T) {
	path, logs, _, m, _, _ := guardWatch(t, WatchOptions{})
	replaceFile(t, path, reloadConfig(6, ""))
	eventually(t, "the first reload", func() bool { return m.Snapshot().Reloads == 1 })
	if !strings.Contains(logs.String(), "dropped=none") {
		t.Errorf("a reload dropping nothing does not say so:\n%s", logs.String())
	}
	full := reloadConfig(7, "")
	replaceFile(t, path, full[:strings.Index(full, "default:")]) // the default cut off
	eventually(t, "the second reload", func() bool { return m.Snapshot().Reloads == 2 })
	if !strings.Contains(logs.String(), `dropped="\"catch-all\""`) {
		t.Errorf("the dropped default is not named:\n%s", logs.String())
	}
}

// A writer that is not atomic truncates the file, writes a prefix that
// parses (its last line cut from "limit: 10" to "limit: 1"), pauses longer
// than the debounce, then writes the rest: the prefix is never put in
// force, the whole file is. The settle interval is long beside the pause,
// so that a stalled test goroutine does not make the pause outlast it.
func TestWatcherWaitsForTheWholeFile(t *testing.T) {
	t.Parallel() // its own file and watcher; most of its time is waits
	path, _, got, m, _, limit := guardWatch(t, WatchOptions{Debounce: DefaultDebounce, Settle: 3 * time.Second})
	full := reloadConfig(10, "")
	cut := strings.Index(full, "limit: 10") + len("limit: 1")
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(full[:cut]); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // three debounces
	if _, err := f.WriteString(full[cut:]); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(15 * time.Second)
	// The registry takes the whole file a moment before the reload is
	// counted, so 10 may be seen here; the prefix's 1 never may.
	for m.Snapshot().Reloads == 0 && time.Now().Before(deadline) {
		if l := limit(); l != 5 && l != 10 {
			t.Fatalf("orders limit %d while the file was written, want 5 until it is whole, then 10", l)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if l := limit(); l != 10 {
		t.Fatalf("orders limit %d, want 10 from the whole file", l)
	}
	if n := got.count(); n != 1 {
		t.Errorf("%d reloads, want one: the whole file", n)
	}
}

// allow_empty: true on a file that limits is refused, naming the field.
func TestAllowEmptyWithRules(t *testing.T) {
	_, err := Parse("a.yaml", []byte("allow_empty: true\n"+reloadConfig(5, "")))
	if err == nil || !strings.Contains(err.Error(), "a.yaml:1: allow_empty:") || !strings.Contains(err.Error(), `rule "orders" limits`) {
		t.Fatalf("Parse = %v, want an error at allow_empty naming the rule", err)
	}
	cfg, err := Parse("a.yaml", []byte("allow_empty: true\n"))
	if err != nil || !cfg.AllowEmpty || len(cfg.Warnings) != 0 {
		t.Fatalf("Parse of an empty file with the marker = (%+v, %v), want it with no warning", cfg, err)
	}
}

// No prefix of a file switches its limits off: each one, reloaded, is
// rejected (it does not parse or validate), refused (it limits nothing),
// or limits something. Only the settle interval keeps a prefix that
// limits less (fewer rules, "limit: 1" cut from "limit: 10") out.
func TestWatcherNoPrefixLimitsNothing(t *testing.T) {
	path, _, got, _, w, _ := guardWatch(t, WatchOptions{Debounce: time.Hour, Settle: time.Hour})
	full := reloadConfig(5, "")
	for n := 0; n <= len(full); n++ {
		writeFile(t, path, full[:n])
		err := w.Reload()
		if cfg, _ := got.last(); err == nil && cfg.LimitsNothing() {
			t.Fatalf("the prefix of %d bytes (Reload = %v) put a configuration that limits nothing in force:\n%s", n, err, full[:n])
		}
		if n < len(full) {
			writeFile(t, path, full) // back to a configuration that limits
			if err := w.Reload(); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// Property: whatever its rules (some of them shadow rules) and wherever a
// write cuts it, a prefix of a file that limits never puts a configuration
// that limits nothing in force over it.
func TestWatcherPrefixProperty(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sluice.yaml")
	writeFile(t, path, reloadConfig(5, ""))
	var got reloads
	_, w := startWatch(t, path, WatchOptions{Debounce: time.Hour, Settle: time.Hour, OnReload: got.on,
		Logger: slog.New(slog.NewTextHandler(&lockedBuffer{}, nil))})
	rapid.Check(t, func(rt *rapid.T) {
		var b strings.Builder
		b.WriteString("rules:\n")
		n := rapid.IntRange(1, 4).Draw(rt, "rules")
		lead := rapid.IntRange(0, n-1).Draw(rt, "shadow rules first") // then one that limits
		ends := []int{b.Len()}                                        // where each rule ends
		for i := range n {
			fmt.Fprintf(&b, "  - name: r%d\n    path_prefix: /p%d\n    scope: ip\n    algorithm: gcra\n    limit: %d\n    window: 1m\n",
				i, i, rapid.IntRange(1, 1000).Draw(rt, "limit"))
			if i < lead || (i > lead && rapid.Bool().Draw(rt, "shadow")) {
				b.WriteString("    shadow: true\n")
			}
			ends = append(ends, b.Len())
		}
		if rapid.Bool().Draw(rt, "default") {
			b.WriteString("default: {name: d, scope: ip, algorithm: gcra, limit: 9, window: 1m}\n")
		}
		full := b.String()
		if err := os.WriteFile(path, []byte(full), 0o644); err != nil {
			rt.Fatal(err)
		}
		if err := w.Reload(); err != nil {
			rt.Fatalf("the whole file: %v\n%s", err, full)
		}
		cut := rapid.OneOf(rapid.IntRange(0, len(full)), rapid.SampledFrom(ends)).Draw(rt, "cut")
		if err := os.WriteFile(path, []byte(full[:cut]), 0o644); err != nil {
			rt.Fatal(err)
		}
		err := w.Reload()
		if cfg, _ := got.last(); err == nil && cfg.LimitsNothing() {
			rt.Fatalf("the prefix of %d bytes put a configuration that limits nothing in force:\n%s", cut, full[:cut])
		}
	})
}
