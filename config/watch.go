package config

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/sluice-go/sluice"
)

// DefaultDebounce is how long a Watcher waits after the last change to the
// configuration file before it reloads, when WatchOptions.Debounce is zero:
// an editor's save or a ConfigMap update is a burst of events, read once.
const DefaultDebounce = 100 * time.Millisecond

// ErrWatcherClosed is returned by Watcher.Reload after Close.
var ErrWatcherClosed = errors.New("config: watcher closed")

// WatchOptions configure a Watcher. The zero value is usable.
type WatchOptions struct {
	// Initial is the configuration the program started from, the one the
	// registry holds. Its store section is what a reload compares the
	// file's with: the store is set up at start only, so a change there
	// is logged as taking effect after a restart. When Initial is nil,
	// Watch loads the file itself, fails if it does not load, and puts its
	// rules in force (that first load is not counted as a reload).
	Initial *Config
	// Logger receives the reloads (Info), rejected files (Error), store
	// changes (Warn) and watch errors (Error); nil means slog.Default().
	Logger *slog.Logger
	// Metrics, if not nil, counts each reload, successful or not, with
	// ObserveReload, and creates the counters of a new ruleset's rules
	// (InitRuleset). Package metrics' *Metrics is one.
	Metrics ReloadObserver
	// OnReload, if not nil, is called after each reload attempt: with the
	// new configuration and a nil error when it was put in force, with a
	// nil configuration and the error when it was rejected. Calls are
	// serialised, in the order of the reloads; OnReload must not call
	// Watcher.Reload or Close.
	OnReload func(cfg *Config, err error)
	// SIGHUP, when true, makes the process's SIGHUP signals reload the
	// file (signal.Notify), until Close.
	SIGHUP bool
	// Debounce is how long to wait after the last event before reloading;
	// zero means DefaultDebounce.
	Debounce time.Duration
}

// ReloadObserver counts configuration reloads; package metrics' *Metrics
// is one. Its methods are called with no lock of the Watcher's held but
// the one serialising reloads.
type ReloadObserver interface {
	// ObserveReload records one reload: put in force when err is nil,
	// rejected otherwise.
	ObserveReload(err error)
	// InitRuleset is called with each ruleset before it is put in force.
	InitRuleset(rs *sluice.Ruleset)
}

// Watcher reloads a configuration file into a sluice.Registry when the file
// changes, or when asked (Reload, SIGHUP).
//
// It watches the file's directory, not the file, so that a file replaced
// by a rename (as editors save, or as `kubectl` and the Kubernetes
// ConfigMap volume do by swapping a symbolic link) is seen. Events naming
// the file are debounced, then the file is read; an event naming anything
// else in the directory makes the watcher look at the file again (os.Stat,
// following links) and reload if it is now another file. A change made in
// place to the target of a symbolic link that lives in another directory is
// not seen: send SIGHUP or call Reload.
//
// A file that reads and parses is compiled into a new sluice.Ruleset and put in
// force with one atomic sluice.Registry.Swap: requests in flight finish under the
// ruleset they took, later ones see the new one, none is dropped. A file
// that does not read, parse or validate is rejected whole: the rules in
// force stay, and the error is logged, counted and passed to OnReload.
// A watch-triggered reload of a file whose bytes are those read last time
// does nothing (an editor's touch or chmod is not a reload).
type Watcher struct {
	path     string // as given, cleaned
	dir      string
	base     string
	reg      *sluice.Registry
	opts     WatchOptions
	log      *slog.Logger
	debounce time.Duration
	store    Store // the store section in force

	fw   *fsnotify.Watcher
	sigC chan os.Signal // nil without WatchOptions.SIGHUP
	done chan struct{}
	wg   sync.WaitGroup

	mu       sync.Mutex // serialises reloads and guards the fields below
	closed   bool
	lastData []byte // the bytes read at the last reload, nil before the first
	haveLast bool

	closeOnce sync.Once
	closeErr  error
}

// Watch starts watching the configuration file at path and reloading it
// into reg. Close the Watcher to stop. See Watcher and WatchOptions.
func Watch(path string, reg *sluice.Registry, opts WatchOptions) (*Watcher, error) {
	if reg == nil {
		return nil, errors.New("config: Watch needs a registry")
	}
	path = filepath.Clean(path)
	w := &Watcher{
		path:     path,
		dir:      filepath.Dir(path),
		base:     filepath.Base(path),
		reg:      reg,
		opts:     opts,
		log:      opts.Logger,
		debounce: opts.Debounce,
		done:     make(chan struct{}),
	}
	if w.log == nil {
		w.log = slog.Default()
	}
	if w.debounce <= 0 {
		w.debounce = DefaultDebounce
	}
	if opts.Initial != nil {
		w.store = opts.Initial.Store
	} else {
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		cfg, err := Parse(path, data)
		if err == nil {
			err = cfg.ReadReferences()
		}
		if err != nil {
			return nil, err
		}
		rs, err := cfg.Ruleset()
		if err != nil {
			return nil, err
		}
		if opts.Metrics != nil {
			opts.Metrics.InitRuleset(rs)
		}
		reg.Swap(rs)
		w.store = cfg.Store
		w.lastData, w.haveLast = data, true
	}
	fw, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, fmt.Errorf("config: watching %s: %w", path, err)
	}
	if err := fw.Add(w.dir); err != nil {
		fw.Close()
		return nil, fmt.Errorf("config: watching the directory of %s: %w", path, err)
	}
	w.fw = fw
	if opts.SIGHUP {
		w.sigC = make(chan os.Signal, 1)
		signal.Notify(w.sigC, syscall.SIGHUP)
	}
	last, _ := os.Stat(path) // nil if absent: any later file is new
	w.wg.Add(1)
	go w.run(last)
	return w, nil
}

// Path returns the path of the file watched.
func (w *Watcher) Path() string { return w.path }

// Reload reads the file now and puts it in force if it is valid, as a
// change to the file would, even if its bytes did not change. It returns
// the error that rejected the file (the rules in force stay), or
// ErrWatcherClosed after Close. It is what SIGHUP calls.
func (w *Watcher) Reload() error {
	return w.reload(true, "explicit")
}

// Close stops watching and, with WatchOptions.SIGHUP, stops receiving
// SIGHUP. It waits for a reload in progress to finish. Closing again does
// nothing and returns the first call's result.
func (w *Watcher) Close() error {
	w.closeOnce.Do(func() {
		w.mu.Lock()
		w.closed = true
		w.mu.Unlock()
		close(w.done)
		if w.sigC != nil {
			signal.Stop(w.sigC)
		}
		w.closeErr = w.fw.Close()
		w.wg.Wait()
	})
	return w.closeErr
}

// run is the watcher's goroutine: it debounces the directory's events and
// reloads. last is the file as it was at the start (nil if absent).
func (w *Watcher) run(last os.FileInfo) {
	defer w.wg.Done()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	var fire <-chan time.Time // timer.C while a reload is pending
	for {
		select {
		case <-w.done:
			return
		case ev, ok := <-w.fw.Events:
			if !ok {
				return
			}
			if filepath.Base(ev.Name) != w.base {
				// Another name in the directory: a symbolic link on the
				// way to the file may have been swapped (a ConfigMap's
				// ..data). Reload only if the path now leads elsewhere.
				now, err := os.Stat(w.path)
				if err != nil || (last != nil && os.SameFile(last, now)) {
					continue
				}
				last = now
			} else if now, err := os.Stat(w.path); err == nil {
				last = now
			}
			timer.Reset(w.debounce)
			fire = timer.C
		case err, ok := <-w.fw.Errors:
			if !ok {
				return
			}
			w.log.Error("sluice: watching the configuration file", "file", w.path, "err", err)
		case <-fire:
			fire = nil
			_ = w.reload(false, "file changed")
		case <-w.sigC: // nil, never ready, without WatchOptions.SIGHUP
			_ = w.reload(true, "SIGHUP")
		}
	}
}

// reload reads, parses and puts the file in force; force reloads even
// bytes already read. cause is logged.
func (w *Watcher) reload(force bool, cause string) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return ErrWatcherClosed
	}
	data, err := os.ReadFile(w.path)
	var cfg *Config
	var rs *sluice.Ruleset
	if err == nil {
		if !force && w.haveLast && bytes.Equal(data, w.lastData) {
			return nil
		}
		w.lastData, w.haveLast = data, true
		cfg, err = Parse(w.path, data)
		if err == nil {
			err = cfg.ReadReferences()
		}
		if err == nil {
			rs, err = cfg.Ruleset()
		}
	}
	if err != nil {
		w.log.Error("sluice: configuration rejected; the rules in force stay",
			"file", w.path, "cause", cause, "err", err)
		if w.opts.Metrics != nil {
			w.opts.Metrics.ObserveReload(err)
		}
		if w.opts.OnReload != nil {
			w.opts.OnReload(nil, err)
		}
		return err
	}
	if w.opts.Metrics != nil {
		w.opts.Metrics.InitRuleset(rs)
	}
	w.reg.Swap(rs)
	if !cfg.Store.Equal(w.store) {
		w.log.Warn("sluice: the store section changed; it takes effect only after a restart",
			"file", w.path, "running", w.store.String(), "file_says", cfg.Store.String())
	}
	n := len(cfg.Rules)
	if cfg.Default != nil {
		n++
	}
	w.log.Info("sluice: configuration reloaded", "file", w.path, "cause", cause, "rules", n)
	if w.opts.OnReload != nil {
		w.opts.OnReload(cfg, nil)
	}
	// Counted last, so that a reload counted is a reload in force,
	// including what OnReload puts in force.
	if w.opts.Metrics != nil {
		w.opts.Metrics.ObserveReload(nil)
	}
	return nil
}
