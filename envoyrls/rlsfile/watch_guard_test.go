package rlsfile

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/sluice-go/sluice/backend/memory"
	"github.com/sluice-go/sluice/engine"
	"github.com/sluice-go/sluice/envoyrls"
)

// guardConf is a domain of two limits, user (n a day) and path /x.
func guardConf(domain string, n int) string {
	return fmt.Sprintf(`domain: %s
descriptors:
  - key: user
    rate_limit:
      unit: day
      requests_per_unit: %d
  - key: path
    value: /x
    rate_limit:
      unit: minute
      requests_per_unit: 10
`, domain, n)
}

// guarded is a watched server and what its watcher reported.
type guarded struct {
	srv  *envoyrls.Server
	w    *Watcher
	logs lockedBuffer
	mu   sync.Mutex
	errs []error
}

func (g *guarded) reloads() []error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]error(nil), g.errs...)
}

// limits returns the paths of the limits in force, across domains.
func (g *guarded) limits() []string {
	var paths []string
	c := g.srv.Config()
	for _, name := range c.Domains() {
		for _, l := range c.Domain(name).Limits() {
			paths = append(paths, l.Path)
		}
	}
	return paths
}

// guardWatch serves the configuration at path and watches it.
func guardWatch(t *testing.T, path string, opts WatchOptions) *guarded {
	t.Helper()
	cfg, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	eng, err := engine.New(memory.New(nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close() })
	g := &guarded{}
	if g.srv, err = envoyrls.NewServer(cfg, envoyrls.Options{Engine: eng}); err != nil {
		t.Fatal(err)
	}
	opts.Logger = slog.New(slog.NewTextHandler(&g.logs, nil))
	opts.OnReload = func(_ *envoyrls.Config, err error) { g.mu.Lock(); g.errs = append(g.errs, err); g.mu.Unlock() }
	if opts.Debounce == 0 {
		opts.Debounce = 20 * time.Millisecond
	}
	if opts.Settle == 0 {
		opts.Settle = 50 * time.Millisecond
	}
	if g.w, err = Watch(path, g.srv, opts); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.w.Close() })
	return g
}

func replace(t *testing.T, path, body string) {
	t.Helper()
	tmp := filepath.Join(filepath.Dir(path), ".tmp")
	if err := os.WriteFile(tmp, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func waitFor(t *testing.T, g *guarded, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("not within 10s: %s\n%s", what, g.logs.String())
		}
	}
}

// A file cut short so that it limits nothing (its descriptors gone, or its
// domain's name cut: another domain, empty) is refused, in a file and in a
// directory beside a file that still limits; the configuration in force
// stays and the refusal is logged and reported.
func TestWatchRefusesACutFile(t *testing.T) {
	full := guardConf("api", 3)
	for _, tc := range []struct {
		name string
		dir  bool
		body string
	}{
		{"descriptors cut", false, full[:strings.Index(full, "  - key")]},
		{"domain cut", false, "domain: ap"},
		{"only the domain, beside another file", true, "domain: api\n"},
		{"domain cut, beside another file", true, "domain: a\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "api.yaml")
			os.WriteFile(path, []byte(full), 0o644)
			watched := path
			if tc.dir {
				os.WriteFile(filepath.Join(dir, "other.yaml"), []byte(guardConf("other", 1)), 0o644)
				watched = dir
			}
			g := guardWatch(t, watched, WatchOptions{})
			before := strings.Join(g.limits(), " ")
			replace(t, path, tc.body)
			waitFor(t, g, "the refusal", func() bool { return len(g.reloads()) == 1 })
			if err := g.reloads()[0]; !errors.Is(err, ErrLimitsNothing) {
				t.Fatalf("OnReload got %v, want ErrLimitsNothing", err)
			}
			if now := strings.Join(g.limits(), " "); now != before {
				t.Errorf("limits in force %q after the refusal, want %q still", now, before)
			}
			if !strings.Contains(g.logs.String(), "configuration rejected") {
				t.Errorf("the refusal is not logged:\n%s", g.logs.String())
			}
		})
	}
}

// No prefix of a file switches its limits off: each one, reloaded, is
// rejected, refused, or limits something. A prefix cut in the list of
// descriptors limits less (fewer descriptors, "requests_per_unit: 1" cut
// from 10): only the settle interval keeps it out.
func TestWatchNoPrefixLimitsNothing(t *testing.T) {
	path := filepath.Join(t.TempDir(), "api.yaml")
	full := guardConf("api", 3)
	os.WriteFile(path, []byte(full), 0o644)
	g := guardWatch(t, path, WatchOptions{Debounce: time.Hour, Settle: time.Hour})
	for n := 0; n <= len(full); n++ {
		os.WriteFile(path, []byte(full[:n]), 0o644)
		err := g.w.Reload()
		if err == nil && enforcingConfig(g.srv.Config()) == nil {
			t.Fatalf("the prefix of %d bytes put a configuration that limits nothing in force:\n%s", n, full[:n])
		}
		if n < len(full) {
			os.WriteFile(path, []byte(full), 0o644)
			if err := g.w.Reload(); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// enforcingConfig returns a limit of c that can deny, or nil.
func enforcingConfig(c *envoyrls.Config) *envoyrls.Limit {
	for _, name := range c.Domains() {
		if l := enforcing(c.Domain(name)); l != nil {
			return l
		}
	}
	return nil
}

// A file that says allow_empty: true is put in force though it limits
// nothing, and the reload logs the descriptors it drops; allow_empty on a
// file that limits is refused, naming the line and the field.
func TestWatchAllowEmpty(t *testing.T) {
	path := filepath.Join(t.TempDir(), "api.yaml")
	os.WriteFile(path, []byte(guardConf("api", 3)), 0o644)
	g := guardWatch(t, path, WatchOptions{})
	replace(t, path, "domain: api\nallow_empty: true\n")
	waitFor(t, g, "the reload", func() bool { return len(g.reloads()) == 1 })
	if err := g.reloads()[0]; err != nil {
		t.Fatalf("OnReload got %v, want the empty file in force", err)
	}
	if l := g.limits(); len(l) != 0 {
		t.Errorf("limits %q in force, want none", l)
	}
	if !strings.Contains(g.logs.String(), `dropped="\"api.user\", \"api.path_/x\""`) {
		t.Errorf("the dropped descriptors are not logged:\n%s", g.logs.String())
	}
	_, err := ParseFile("a.yaml", []byte("allow_empty: true\n"+guardConf("api", 3)))
	if err == nil || !strings.Contains(err.Error(), "a.yaml:1: allow_empty: true says this file limits nothing on purpose, but the descriptor api.user limits") {
		t.Errorf("ParseFile = %v, want an error at allow_empty naming the descriptor", err)
	}
}

// A reload that drops a descriptor, the file still limiting, is put in
// force and names what it drops.
func TestWatchLogsDroppedDescriptors(t *testing.T) {
	path := filepath.Join(t.TempDir(), "api.yaml")
	full := guardConf("api", 3)
	os.WriteFile(path, []byte(full), 0o644)
	g := guardWatch(t, path, WatchOptions{})
	replace(t, path, full[:strings.Index(full, "  - key: path")])
	waitFor(t, g, "the reload", func() bool { return len(g.reloads()) == 1 })
	if err := g.reloads()[0]; err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(g.logs.String(), `dropped="\"api.path_/x\""`) {
		t.Errorf("the dropped descriptor is not logged:\n%s", g.logs.String())
	}
}

// A writer that is not atomic truncates the file, writes a prefix that
// parses (one descriptor, its requests_per_unit cut from 10 to 1), pauses
// longer than the debounce, then the rest: only the whole file is put in
// force. The settle interval is long beside the pause, so that a stalled
// test goroutine does not make the pause outlast it.
func TestWatchWaitsForTheWholeFile(t *testing.T) {
	t.Parallel() // its own file and watcher; most of its time is waits
	path := filepath.Join(t.TempDir(), "api.yaml")
	os.WriteFile(path, []byte(guardConf("api", 3)), 0o644)
	g := guardWatch(t, path, WatchOptions{Debounce: DefaultDebounce, Settle: 3 * time.Second})
	full := guardConf("api", 10)
	cut := strings.Index(full, "requests_per_unit: 10") + len("requests_per_unit: 1")
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
	user := func() uint32 { return g.srv.Config().Domain("api").Limits()[0].RequestsPerUnit }
	for deadline := time.Now().Add(15 * time.Second); len(g.reloads()) == 0 && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if u := user(); u != 3 {
			t.Fatalf("user limit %d while the file was written, want 3 until it is whole", u)
		}
	}
	if got := g.reloads(); len(got) != 1 || got[0] != nil || user() != 10 || len(g.limits()) != 2 {
		t.Fatalf("reloads %v, user limit %d, limits %q; want one reload of the whole file", got, user(), g.limits())
	}
}

// Property: whatever its descriptors (unlimited and shadow_mode ones
// first) and wherever a write cuts it, a prefix of a file that limits
// never puts a configuration that limits nothing in force over it.
func TestWatchPrefixProperty(t *testing.T) {
	path := filepath.Join(t.TempDir(), "api.yaml")
	os.WriteFile(path, []byte(guardConf("api", 3)), 0o644)
	g := guardWatch(t, path, WatchOptions{Debounce: time.Hour, Settle: time.Hour})
	rapid.Check(t, func(rt *rapid.T) {
		var b strings.Builder
		b.WriteString("domain: api\ndescriptors:\n")
		n := rapid.IntRange(1, 4).Draw(rt, "descriptors")
		lead := rapid.IntRange(0, n-1).Draw(rt, "limiting nothing first") // then one that limits
		ends := []int{b.Len()}
		for i := range n {
			limit := fmt.Sprintf("{unit: minute, requests_per_unit: %d}", rapid.IntRange(0, 1000).Draw(rt, "limit"))
			switch {
			case i < lead && rapid.Bool().Draw(rt, "unlimited"):
				limit = "{unlimited: true}"
			case i < lead:
				limit += "\n    shadow_mode: true"
			}
			fmt.Fprintf(&b, "  - key: k%d\n    rate_limit: %s\n", i, limit)
			ends = append(ends, b.Len())
		}
		full := b.String()
		if err := os.WriteFile(path, []byte(full), 0o644); err != nil {
			rt.Fatal(err)
		}
		if err := g.w.Reload(); err != nil {
			rt.Fatalf("the whole file: %v\n%s", err, full)
		}
		cut := rapid.OneOf(rapid.IntRange(0, len(full)), rapid.SampledFrom(ends)).Draw(rt, "cut")
		if err := os.WriteFile(path, []byte(full[:cut]), 0o644); err != nil {
			rt.Fatal(err)
		}
		if err := g.w.Reload(); err == nil && enforcingConfig(g.srv.Config()) == nil {
			rt.Fatalf("the prefix of %d bytes put a configuration that limits nothing in force:\n%s", cut, full[:cut])
		}
	})
}
