package config

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/metrics"
)

// reloadConfig is a valid configuration whose orders rule allows limit.
func reloadConfig(limit int, store string) string {
	if store == "" {
		store = "store:\n  backend: memory\n"
	}
	return store + fmt.Sprintf(`rules:
  - name: orders
    method: POST
    path_prefix: /api/orders
    scope: user
    algorithm: token_bucket
    limit: %d
    window: 1m
default:
  name: catch-all
  scope: ip
  algorithm: sliding_counter
  limit: 100
  window: 1m
`, limit)
}

// lockedBuffer is a bytes.Buffer safe for a logger writing from the
// watcher's goroutine while the test reads.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// reloads records OnReload's calls.
type reloads struct {
	mu   sync.Mutex
	cfgs []*Config
	errs []error
}

func (r *reloads) on(cfg *Config, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cfgs = append(r.cfgs, cfg)
	r.errs = append(r.errs, err)
}

func (r *reloads) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.errs)
}

func (r *reloads) last() (*Config, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.errs) == 0 {
		return nil, nil
	}
	return r.cfgs[len(r.cfgs)-1], r.errs[len(r.errs)-1]
}

// eventually polls cond every 10ms for up to 5s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within 5s: %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func ordersLimit(reg *sluice.Registry) int64 {
	r := reg.Ruleset().Rule("orders")
	if r == nil {
		return -1
	}
	return r.Rule().Limit
}

func writeFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

// replaceFile writes data next to path and renames it over path, as
// editors save.
func replaceFile(t *testing.T, path, data string) {
	t.Helper()
	tmp := path + ".tmp"
	writeFile(t, tmp, data)
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// startWatch loads the configuration at path into a new registry and
// watches it.
func startWatch(t *testing.T, path string, opts WatchOptions) (*sluice.Registry, *Watcher) {
	t.Helper()
	cfg, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	rs, err := cfg.Ruleset()
	if err != nil {
		t.Fatal(err)
	}
	reg := sluice.NewRegistry(rs)
	opts.Initial = cfg
	w, err := Watch(path, reg, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	return reg, w
}

func TestWatcherReloads(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sluice.yaml")
	writeFile(t, path, reloadConfig(5, ""))
	var logs lockedBuffer
	var got reloads
	m := metrics.New(nil)
	reg, _ := startWatch(t, path, WatchOptions{
		Logger:   slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Metrics:  m,
		OnReload: got.on,
		Debounce: 20 * time.Millisecond,
	})
	if l := ordersLimit(reg); l != 5 {
		t.Fatalf("limit at start = %d, want 5", l)
	}
	// Requests keep finding a rule across every swap.
	stop := make(chan struct{})
	var readers sync.WaitGroup
	readers.Add(1)
	go func() {
		defer readers.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if m := reg.Ruleset().AppendMatch(nil, sluice.RequestShape{Method: "POST", Path: "/api/orders/1"}); len(m) != 1 || m[0].Name() != "orders" {
				t.Errorf("Match during reloads = %v", m)
				return
			}
		}
	}()
	defer func() { close(stop); readers.Wait() }()

	// Rewritten in place with a raised limit.
	writeFile(t, path, reloadConfig(10, ""))
	eventually(t, "limit 10 in force", func() bool { return ordersLimit(reg) == 10 })

	// Replaced by a rename.
	replaceFile(t, path, reloadConfig(20, ""))
	eventually(t, "limit 20 in force after a rename", func() bool { return ordersLimit(reg) == 20 })

	// An invalid file: rejected, the rules stay.
	before := got.count()
	old := reg.Ruleset()
	replaceFile(t, path, strings.Replace(reloadConfig(30, ""), "window: 1m", "window: 1 minute", 1))
	// (A late event of the rename above may report the valid file once
	// more first: wait for the report of this one.)
	eventually(t, "the invalid file reported", func() bool {
		cfg, err := got.last()
		return got.count() > before && cfg == nil && err != nil
	})
	cfg, err := got.last()
	if cfg != nil || !errors.Is(err, sluice.ErrInvalidConfig) {
		t.Fatalf("OnReload got (%v, %v), want (nil, an invalid-config error)", cfg, err)
	}
	if !strings.Contains(err.Error(), "rules[0].window") {
		t.Errorf("error %q does not name the field", err)
	}
	if reg.Ruleset() != old || ordersLimit(reg) != 20 {
		t.Fatalf("the ruleset changed after an invalid file (limit %d)", ordersLimit(reg))
	}
	if s := m.Snapshot(); s.ReloadErrors < 1 {
		t.Errorf("ReloadErrors = %d, want at least 1", s.ReloadErrors)
	}
	if !strings.Contains(logs.String(), "configuration rejected") {
		t.Errorf("the rejection is not logged:\n%s", logs.String())
	}

	// Valid again. The watcher swaps the rules, then calls OnReload, then
	// counts the reload: wait on the count, the last of the three. (A
	// write is a truncate and a write; a reload between them reads a
	// partial file and is rejected, so only an ok reload says the new
	// file is in force.)
	okBefore := m.Snapshot().Reloads
	writeFile(t, path, reloadConfig(40, ""))
	eventually(t, "an ok reload after the invalid file", func() bool { return m.Snapshot().Reloads > okBefore })
	if l := ordersLimit(reg); l != 40 {
		t.Fatalf("limit %d after the reload, want 40", l)
	}
	if cfg, err := got.last(); err != nil || cfg == nil || cfg.Rules[0].Limit != 40 {
		t.Errorf("OnReload last got (%v, %v)", cfg, err)
	}
	if s := m.Snapshot(); s.Reloads < 3 {
		t.Errorf("Reloads = %d, want at least 3", s.Reloads)
	}
	if strings.Contains(logs.String(), "restart") {
		t.Errorf("a store change is reported while the store did not change:\n%s", logs.String())
	}
}

func TestWatcherStoreChangeWarns(t *testing.T) {
	t.Parallel() // its own file and watcher; most of its time is waits
	dir := t.TempDir()
	path := filepath.Join(dir, "sluice.yaml")
	writeFile(t, path, reloadConfig(5, ""))
	var logs lockedBuffer
	reg, _ := startWatch(t, path, WatchOptions{
		Logger: slog.New(slog.NewTextHandler(&logs, nil)), // DefaultDebounce
	})
	store := "store:\n  backend: bolt\n  dir: " + filepath.Join(dir, "state") + "\n"
	writeFile(t, path, reloadConfig(7, store))
	eventually(t, "limit 7 in force", func() bool { return ordersLimit(reg) == 7 })
	eventually(t, "the store warning", func() bool {
		return strings.Contains(logs.String(), "level=WARN") &&
			strings.Contains(logs.String(), "takes effect only after a restart")
	})
}

// A change of the redis section is warned about too (the addresses are a
// list: compared whole), and the password never reaches the log.
func TestWatcherRedisStoreChangeWarnsWithoutThePassword(t *testing.T) {
	t.Parallel() // its own file and watcher; most of its time is waits
	dir := t.TempDir()
	path := filepath.Join(dir, "sluice.yaml")
	redis := func(addrs string) string {
		return "store:\n  backend: redis\n  redis:\n    addrs: [" + addrs + "]\n    password: hunter2-very-secret\n"
	}
	writeFile(t, path, reloadConfig(5, redis("10.0.0.1:6379")))
	var logs lockedBuffer
	reg, _ := startWatch(t, path, WatchOptions{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	// The same section: no warning.
	writeFile(t, path, reloadConfig(6, redis("10.0.0.1:6379")))
	eventually(t, "limit 6 in force", func() bool { return ordersLimit(reg) == 6 })
	writeFile(t, path, reloadConfig(7, redis("10.0.0.1:6379, 10.0.0.2:6379")))
	eventually(t, "limit 7 in force", func() bool { return ordersLimit(reg) == 7 })
	eventually(t, "the store warning", func() bool { return strings.Contains(logs.String(), "takes effect only after a restart") })
	if n := strings.Count(logs.String(), "takes effect only after a restart"); n != 1 {
		t.Errorf("warned %d times, want once (the unchanged section is no change):\n%s", n, logs.String())
	}
	if strings.Contains(logs.String(), "hunter2") {
		t.Errorf("the password reached the log:\n%s", logs.String())
	}
}

func TestWatcherExplicitReload(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sluice.yaml")
	writeFile(t, path, reloadConfig(5, ""))
	m := metrics.New(nil)
	var got reloads
	// A debounce no test waits out: only Reload applies the file.
	reg, w := startWatch(t, path, WatchOptions{Metrics: m, OnReload: got.on, Debounce: time.Hour,
		Logger: slog.New(slog.NewTextHandler(&lockedBuffer{}, nil))})

	writeFile(t, path, reloadConfig(9, ""))
	if err := w.Reload(); err != nil {
		t.Fatal(err)
	}
	if l := ordersLimit(reg); l != 9 {
		t.Fatalf("limit after Reload = %d, want 9", l)
	}
	// Reload reloads even unchanged bytes.
	if err := w.Reload(); err != nil {
		t.Fatal(err)
	}
	writeFile(t, path, "rules: [")
	if err := w.Reload(); !errors.Is(err, sluice.ErrInvalidConfig) {
		t.Fatalf("Reload of a broken file = %v, want an invalid-config error", err)
	}
	if l := ordersLimit(reg); l != 9 {
		t.Fatalf("limit after a broken reload = %d, want 9", l)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := w.Reload(); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Reload of a missing file = %v, want not-exist", err)
	}
	s := m.Snapshot()
	if s.Reloads != 2 || s.ReloadErrors != 2 {
		t.Errorf("Reloads, ReloadErrors = %d, %d, want 2, 2", s.Reloads, s.ReloadErrors)
	}
	if n := got.count(); n != 4 {
		t.Errorf("OnReload called %d times, want 4", n)
	}

	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatalf("second Close = %v", err)
	}
	if err := w.Reload(); !errors.Is(err, ErrWatcherClosed) {
		t.Fatalf("Reload after Close = %v, want ErrWatcherClosed", err)
	}
}

func TestWatcherWithoutInitial(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sluice.yaml")
	writeFile(t, path, "rules: [")
	if _, err := Watch(path, sluice.NewRegistry(nil), WatchOptions{}); !errors.Is(err, sluice.ErrInvalidConfig) {
		t.Fatalf("Watch of a broken file without Initial = %v, want an invalid-config error", err)
	}
	writeFile(t, path, reloadConfig(3, ""))
	reg := sluice.NewRegistry(nil)
	w, err := Watch(path, reg, WatchOptions{Debounce: 20 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(&lockedBuffer{}, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if l := ordersLimit(reg); l != 3 {
		t.Fatalf("limit after Watch = %d, want 3", l)
	}
	replaceFile(t, path, reloadConfig(4, ""))
	eventually(t, "limit 4 in force", func() bool { return ordersLimit(reg) == 4 })
}

// TestWatcherSymlinkSwap replays a Kubernetes ConfigMap update: the file is
// a link through ..data, a link to a timestamped directory, and an update
// renames a new ..data over the old.
func TestWatcherSymlinkSwap(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("symbolic links need privileges on Windows")
	}
	dir := t.TempDir()
	v1, v2 := filepath.Join(dir, "..v1"), filepath.Join(dir, "..v2")
	for _, d := range []string{v1, v2} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	writeFile(t, filepath.Join(v1, "sluice.yaml"), reloadConfig(5, ""))
	writeFile(t, filepath.Join(v2, "sluice.yaml"), reloadConfig(50, ""))
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.Symlink("..v1", filepath.Join(dir, "..data")))
	path := filepath.Join(dir, "sluice.yaml")
	must(os.Symlink(filepath.Join("..data", "sluice.yaml"), path))

	reg, _ := startWatch(t, path, WatchOptions{Debounce: 20 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(&lockedBuffer{}, nil))})
	if l := ordersLimit(reg); l != 5 {
		t.Fatalf("limit at start = %d, want 5", l)
	}
	must(os.Symlink("..v2", filepath.Join(dir, "..data_tmp")))
	must(os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")))
	must(os.RemoveAll(v1))
	eventually(t, "limit 50 in force after the link swap", func() bool { return ordersLimit(reg) == 50 })
}

func TestWatcherSIGHUP(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("no SIGHUP on Windows")
	}
	path := filepath.Join(t.TempDir(), "sluice.yaml")
	writeFile(t, path, reloadConfig(5, ""))
	m := metrics.New(nil)
	reg, w := startWatch(t, path, WatchOptions{SIGHUP: true, Metrics: m, Debounce: time.Hour,
		Logger: slog.New(slog.NewTextHandler(&lockedBuffer{}, nil))})
	writeFile(t, path, reloadConfig(6, ""))
	p, err := os.FindProcess(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	eventually(t, "limit 6 in force after SIGHUP", func() bool { return ordersLimit(reg) == 6 })
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

// A rejected file put back as the one in force changes nothing: no reload,
// and the log says the configuration loads again; the rejected file
// written again unchanged is not rejected twice.
func TestWatcherLoadsAgain(t *testing.T) {
	t.Parallel() // its own file and watcher; most of its time is waits
	path := filepath.Join(t.TempDir(), "sluice.yaml")
	writeFile(t, path, reloadConfig(5, ""))
	var logs lockedBuffer
	var got reloads
	m := metrics.New(nil)
	reg, _ := startWatch(t, path, WatchOptions{Logger: slog.New(slog.NewTextHandler(&logs, nil)), Metrics: m, OnReload: got.on, Debounce: 20 * time.Millisecond})
	replaceFile(t, path, reloadConfig(6, ""))
	eventually(t, "limit 6 in force", func() bool { return m.Snapshot().Reloads == 1 })
	bad := strings.Replace(reloadConfig(7, ""), "window: 1m", "window: 1 minute", 1)
	replaceFile(t, path, bad)
	eventually(t, "the rejection", func() bool { return m.Snapshot().ReloadErrors == 1 })
	replaceFile(t, path, bad)
	replaceFile(t, path, reloadConfig(6, ""))
	eventually(t, "the note", func() bool {
		return strings.Contains(logs.String(), "sluice: the configuration loads again, and is the one in force: nothing changed")
	})
	time.Sleep(100 * time.Millisecond)
	if s := m.Snapshot(); s.Reloads != 1 || s.ReloadErrors != 1 || got.count() != 2 || ordersLimit(reg) != 6 {
		t.Errorf("reloads %d, errors %d, OnReload calls %d, limit %d; want 1, 1, 2, 6", s.Reloads, s.ReloadErrors, got.count(), ordersLimit(reg))
	}
}

// A store section whose password comes from a file reads it on each
// reload, so an unchanged section is no change.
func TestWatcherReadsThePasswordFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "sluice.yaml")
	writeFile(t, filepath.Join(dir, "password"), "hunter2-very-secret\n")
	store := "store:\n  backend: redis\n  redis:\n    addrs: [10.0.0.1:6379]\n    password_file: password\n"
	writeFile(t, path, reloadConfig(5, store))
	var logs lockedBuffer
	reg, _ := startWatch(t, path, WatchOptions{Logger: slog.New(slog.NewTextHandler(&logs, nil)), Debounce: 20 * time.Millisecond})
	writeFile(t, path, reloadConfig(6, store))
	eventually(t, "limit 6 in force", func() bool { return ordersLimit(reg) == 6 })
	time.Sleep(50 * time.Millisecond)
	if strings.Contains(logs.String(), "restart") {
		t.Errorf("an unchanged store section read as changed:\n%s", logs.String())
	}
}

// With Apply, the watcher puts each configuration in force through it and
// never through a registry: the first load and each reload reach Apply
// with the file's configuration and its ruleset, and a reload Apply
// refuses is rejected whole (counted, passed to OnReload, the rules in
// force kept for the next guard).
func TestWatcherApply(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sluice.yaml")
	writeFile(t, path, reloadConfig(5, ""))
	m := metrics.New(nil)
	var got reloads
	var applied []int64 // the orders limit of each configuration put in force
	refuse := errors.New("refused by Apply")
	var refusing bool
	apply := func(cfg *Config, rs *sluice.Ruleset) error {
		if cfg.Rules[0].Limit != rs.Rule("orders").Rule().Limit {
			t.Errorf("Apply: the configuration says %d, its ruleset %d", cfg.Rules[0].Limit, rs.Rule("orders").Rule().Limit)
		}
		if refusing {
			return refuse
		}
		applied = append(applied, cfg.Rules[0].Limit)
		return nil
	}
	w, err := Watch(path, nil, WatchOptions{Apply: apply, Metrics: m, OnReload: got.on, Debounce: time.Hour,
		Logger: slog.New(slog.NewTextHandler(&lockedBuffer{}, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	writeFile(t, path, reloadConfig(9, ""))
	if err := w.Reload(); err != nil {
		t.Fatal(err)
	}
	refusing = true
	writeFile(t, path, reloadConfig(11, ""))
	if err := w.Reload(); !errors.Is(err, refuse) {
		t.Fatalf("Reload Apply refuses = %v, want its error", err)
	}
	if cfg, err := got.last(); cfg != nil || !errors.Is(err, refuse) {
		t.Errorf("OnReload last got (%v, %v), want (nil, Apply's error)", cfg, err)
	}
	if fmt.Sprint(applied) != "[5 9]" {
		t.Errorf("Apply put in force the limits %v, want [5 9]", applied)
	}
	if s := m.Snapshot(); s.Reloads != 1 || s.ReloadErrors != 1 {
		t.Errorf("Reloads, ReloadErrors = %d, %d, want 1, 1", s.Reloads, s.ReloadErrors)
	}
	if _, err := Watch(path, nil, WatchOptions{}); err == nil {
		t.Error("Watch with neither a registry nor Apply: no error")
	}
}
