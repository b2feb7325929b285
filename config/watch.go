package config

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/watch"
)

// DefaultDebounce is how long a Watcher waits after the last change to the
// configuration file before it reloads, when WatchOptions.Debounce is zero:
// an editor's save or a ConfigMap update is a burst of events, read once.
const DefaultDebounce = watch.DefaultDebounce

// DefaultSettle is how long the configuration file must stay unchanged
// before a Watcher puts it in force, when WatchOptions.Settle is zero.
const DefaultSettle = watch.DefaultSettle

// ErrWatcherClosed is returned by Watcher.Reload after Close.
var ErrWatcherClosed = errors.New("sluice/config: watcher closed")

// ErrLimitsNothing is wrapped by the error of a reload refused because the
// file limits nothing (no rule and no default, or only shadow ones) while
// the configuration in force limits something, and the file does not say
// allow_empty: true. A file cut short by a writer that is not atomic reads
// so; the configuration in force stays.
var ErrLimitsNothing = errors.New("sluice/config: the file limits nothing, where rules are in force (allow_empty: true says it is meant)")

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
	// Apply, if not nil, puts a configuration in force in place of the
	// registry's Swap: it is called with the file's configuration and its
	// ruleset once both are valid, and is to publish everything the
	// program reloads from them at once (one atomic store), so that no
	// request sees the new rules beside the old rest. An error rejects the
	// file as a parse error does: logged, counted, passed to OnReload, the
	// configuration in force staying whole. With Apply, Watch's registry
	// may be nil; without Initial, the first load goes through Apply too.
	Apply func(cfg *Config, rs *sluice.Ruleset) error
	// SIGHUP, when true, makes the process's SIGHUP signals reload the
	// file (signal.Notify), until Close.
	SIGHUP bool
	// Debounce is how long to wait after the last event before reading;
	// zero means DefaultDebounce.
	Debounce time.Duration
	// Settle is how long the file must stay unchanged before a change or
	// a SIGHUP puts it in force: it is read again Settle after each read
	// until two reads in a row agree. Zero means DefaultSettle.
	Settle time.Duration
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
// A change, or a SIGHUP, is put in force only once the file has settled:
// it is read WatchOptions.Debounce after the last event, then again every
// WatchOptions.Settle until two reads in a row have the same bytes, so a
// file still being written is not loaded half-way. A writer pausing longer
// than Settle still exposes a prefix of the file: replace the file
// atomically (write another file, then rename it over this one; a
// ConfigMap's volume does so).
//
// A file that reads and parses is compiled into a new sluice.Ruleset and put in
// force with one atomic sluice.Registry.Swap, or by WatchOptions.Apply:
// requests in flight finish under the ruleset they took, later ones see
// the new one, none is dropped. A file
// that does not read, parse or validate is rejected whole: the rules in
// force stay, and the error is logged, counted and passed to OnReload.
// A watch-triggered reload of a file whose bytes are those read last time
// does nothing (an editor's touch or chmod is not a reload); nor does one
// of a file whose bytes are again those in force after a rejected one,
// which is logged as loading again.
//
// A file that limits nothing (no rule and no default, or only shadow ones)
// is refused, as a rejected file is, while the configuration in force
// limits something, unless it says allow_empty: true (ErrLimitsNothing).
// Each reload put in force logs the names of the rules it drops.
type Watcher struct {
	path  string // as given, cleaned
	reg   *sluice.Registry
	opts  WatchOptions
	log   *slog.Logger // with the file's name
	store Store        // the store section in force
	rules []string     // the names of the rules in force, the default's last
	limit bool         // whether the configuration in force limits anything
	w     *watch.Watcher[[]byte]
}

// Watch starts watching the configuration file at path and reloading it
// into reg, or through opts.Apply. Close the Watcher to stop. See Watcher and WatchOptions.
func Watch(path string, reg *sluice.Registry, opts WatchOptions) (*Watcher, error) {
	if reg == nil && opts.Apply == nil {
		return nil, errors.New("sluice/config: Watch needs a registry or WatchOptions.Apply")
	}
	path = filepath.Clean(path)
	w := &Watcher{path: path, reg: reg, opts: opts, log: opts.Logger}
	if w.log == nil {
		w.log = slog.Default()
	}
	w.log = w.log.With("file", path)
	var inForce *uint64
	if opts.Initial != nil {
		w.store = opts.Initial.Store
		w.rules, w.limit = ruleNames(opts.Initial), !opts.Initial.LimitsNothing()
	} else {
		data, digest, err := w.read()
		if err != nil {
			return nil, err
		}
		cfg, rs, err := w.parse(data)
		if err != nil {
			return nil, err
		}
		if opts.Metrics != nil {
			opts.Metrics.InitRuleset(rs)
		}
		if err := w.put(cfg, rs); err != nil {
			return nil, err
		}
		w.store = cfg.Store
		w.rules, w.limit = ruleNames(cfg), !cfg.LimitsNothing()
		inForce = &digest
	}
	fw, err := watch.New(watch.Options[[]byte]{
		Path:     path,
		Read:     w.read,
		Apply:    w.apply,
		Reject:   w.reject,
		InForce:  inForce,
		Debounce: opts.Debounce,
		Settle:   opts.Settle,
		SIGHUP:   opts.SIGHUP,
		Logger:   w.log,
		Name:     "sluice",
	})
	if err != nil {
		return nil, fmt.Errorf("sluice/config: %w", err)
	}
	w.w = fw
	return w, nil
}

// Path returns the path of the file watched.
func (w *Watcher) Path() string { return w.path }

// Reload reads the file now and puts it in force if it is valid, as a
// change to the file would, even if its bytes did not change. It returns
// the error that rejected the file (the rules in force stay), or
// ErrWatcherClosed after Close. It is what SIGHUP calls.
func (w *Watcher) Reload() error {
	err := w.w.Reload()
	if errors.Is(err, watch.ErrClosed) {
		return ErrWatcherClosed
	}
	return err
}

// Close stops watching and, with WatchOptions.SIGHUP, stops receiving
// SIGHUP. It waits for a reload in progress to finish. Closing again does
// nothing and returns the first call's result.
func (w *Watcher) Close() error { return w.w.Close() }

// read reads the file and returns its bytes and their digest.
func (w *Watcher) read() ([]byte, uint64, error) {
	data, err := os.ReadFile(w.path)
	if err != nil {
		return nil, 0, err
	}
	return data, xxhash.Sum64(data), nil
}

// parse parses data, reads what it names and compiles its ruleset.
func (w *Watcher) parse(data []byte) (*Config, *sluice.Ruleset, error) {
	cfg, err := Parse(w.path, data)
	if err == nil {
		err = cfg.ReadReferences()
	}
	var rs *sluice.Ruleset
	if err == nil {
		rs, err = cfg.Ruleset()
	}
	if err != nil {
		return nil, nil, err
	}
	return cfg, rs, nil
}

// apply parses the file read and puts it in force; the watcher serialises
// the calls.
func (w *Watcher) apply(data []byte, cause string) error {
	cfg, rs, err := w.parse(data)
	if err != nil {
		return err
	}
	if w.limit && cfg.LimitsNothing() && !cfg.AllowEmpty {
		return fmt.Errorf("%w; in force: %s", ErrLimitsNothing, watch.Names(w.rules))
	}
	if w.opts.Metrics != nil {
		w.opts.Metrics.InitRuleset(rs)
	}
	if err := w.put(cfg, rs); err != nil {
		return err
	}
	names := ruleNames(cfg)
	dropped := dropped(w.rules, names)
	w.rules, w.limit = names, !cfg.LimitsNothing()
	if !cfg.Store.Equal(w.store) {
		w.log.Warn("sluice: the store section changed; it takes effect only after a restart",
			"running", w.store.String(), "file_says", cfg.Store.String())
	}
	w.log.Info("sluice: configuration reloaded", "cause", cause, "rules", len(names), "dropped", watch.Names(dropped))
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

// put puts cfg and its ruleset rs in force: through WatchOptions.Apply
// when it is set, with the registry's Swap otherwise.
func (w *Watcher) put(cfg *Config, rs *sluice.Ruleset) error {
	if w.opts.Apply != nil {
		return w.opts.Apply(cfg, rs)
	}
	w.reg.Swap(rs)
	return nil
}

// reject reports a file that did not read, parse or validate.
func (w *Watcher) reject(err error, cause string) {
	w.log.Error("sluice: configuration rejected; the rules in force stay", "cause", cause, "err", err)
	// Counted as any rejected file is: result="error".
	if w.opts.Metrics != nil {
		w.opts.Metrics.ObserveReload(err)
	}
	if w.opts.OnReload != nil {
		w.opts.OnReload(nil, err)
	}
}

// ruleNames returns the names of cfg's rules, in file order, and its
// default's last.
func ruleNames(cfg *Config) []string {
	names := make([]string, 0, len(cfg.Rules)+1)
	for _, r := range cfg.Rules {
		names = append(names, r.Name)
	}
	if cfg.Default != nil {
		names = append(names, cfg.Default.Name)
	}
	return names
}

// dropped returns the names in old that are not in now, in old's order.
func dropped(old, now []string) []string {
	in := make(map[string]bool, len(now))
	for _, n := range now {
		in[n] = true
	}
	var out []string
	for _, n := range old {
		if !in[n] {
			out = append(out, n)
		}
	}
	return out
}
