package rlsfile

import (
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/sluice-go/sluice/envoyrls"
	"github.com/sluice-go/sluice/internal/watch"
)

// DefaultDebounce is how long a Watcher waits after the last change before
// it reloads, when WatchOptions.Debounce is zero.
const DefaultDebounce = watch.DefaultDebounce

// DefaultSettle is how long the configuration must stay unchanged before a
// Watcher puts it in force, when WatchOptions.Settle is zero.
const DefaultSettle = watch.DefaultSettle

// ErrWatcherClosed is returned by Watcher.Reload after Close.
var ErrWatcherClosed = errors.New("sluice/envoyrls/rlsfile: watcher closed")

// ErrLimitsNothing is wrapped by the error of a reload refused because a
// file whose descriptors limited something now limits nothing (no
// descriptor, or only unlimited or shadow_mode ones), or because the whole
// configuration would limit nothing where it limited, and the file does
// not say allow_empty: true. A file cut short by a writer that is not
// atomic reads so; the configuration in force stays.
var ErrLimitsNothing = errors.New("sluice/envoyrls/rlsfile: the configuration would limit nothing where it limited (allow_empty: true in a file says it is meant)")

// WatchOptions configure a Watcher. The zero value is usable.
type WatchOptions struct {
	// Logger receives the reloads (Info) and rejected configurations
	// (Error, naming the file, line and field); nil means slog.Default().
	Logger *slog.Logger
	// OnReload, if not nil, is called after each reload attempt: with the
	// configuration put in force and a nil error, or with nil and the
	// error that kept the previous one. Calls are serialised.
	OnReload func(cfg *envoyrls.Config, err error)
	// SIGHUP makes the process's SIGHUP signals reload, until Close.
	SIGHUP bool
	// Debounce is how long to wait after the last event before reading;
	// zero means DefaultDebounce.
	Debounce time.Duration
	// Settle is how long the files must stay unchanged before a change or
	// a SIGHUP puts them in force: they are read again Settle after each
	// read until two reads in a row agree. Zero means DefaultSettle.
	Settle time.Duration
	// Load is how each reload reads the configuration (LoadWith).
	Load envoyrls.LoadOptions
}

// Watcher reloads a configuration file or directory into an envoyrls.Server
// when it changes (fsnotify events on the directory, so renames,
// symbolic-link swaps and Kubernetes ConfigMap updates are seen) or when
// asked (Reload, SIGHUP). A configuration that does not load is rejected whole: the one in
// force stays, and the error is logged and passed to OnReload. A change
// that leaves every file's bytes as they were read last, or as they are in
// force, does nothing; the latter, after a rejection, is logged as the
// configuration loading again.
//
// A change or a SIGHUP is put in force only once the files have settled:
// two reads WatchOptions.Settle apart agree, so a file still being written
// is not loaded half-way. A writer pausing longer than Settle still
// exposes a prefix: replace files atomically (write aside, then rename;
// a ConfigMap's volume does so).
//
// A configuration in which a file that limited something now limits
// nothing, or which limits nothing at all where the one in force limited,
// is refused as one that does not load (ErrLimitsNothing), unless the file
// says allow_empty: true. Each reload put in force logs the descriptors
// (their limits' paths) it drops.
type Watcher struct {
	path  string
	srv   *envoyrls.Server
	opts  WatchOptions
	log   *slog.Logger // with the path
	w     *watch.Watcher[[]file]
	parts map[string]part // what each file in force holds; reloads are serialised
}

// Watch starts watching path (what Load reads) for srv, whose configuration
// must have been loaded from path. Close the Watcher to stop.
func Watch(path string, srv *envoyrls.Server, opts WatchOptions) (*Watcher, error) {
	path = filepath.Clean(path)
	if _, err := os.Stat(path); err != nil {
		return nil, err
	}
	w := &Watcher{path: path, srv: srv, opts: opts, log: opts.Logger}
	if w.log == nil {
		w.log = slog.Default()
	}
	w.log = w.log.With("path", path)
	var inForce *uint64
	if files, d, err := readFiles(path); err == nil {
		if _, parts, err := parseParts(files, opts.Load); err == nil {
			inForce, w.parts = &d, parts
		}
	}
	fw, err := watch.New(watch.Options[[]file]{
		Path:     path,
		Dirs:     func() []string { return configDirs(path) },
		Read:     func() ([]file, uint64, error) { return readFiles(path) },
		Apply:    w.apply,
		Reject:   w.reject,
		InForce:  inForce,
		Debounce: opts.Debounce,
		Settle:   opts.Settle,
		SIGHUP:   opts.SIGHUP,
		Logger:   w.log,
		Name:     "envoyrls",
	})
	if err != nil {
		return nil, fmt.Errorf("sluice/envoyrls/rlsfile: %w", err)
	}
	w.w = fw
	return w, nil
}

// Reload reads the configuration now and puts it in force if it loads,
// even when its bytes are unchanged. It returns the error that kept the
// previous configuration, if any, or ErrWatcherClosed after Close.
func (w *Watcher) Reload() error {
	err := w.w.Reload()
	if errors.Is(err, watch.ErrClosed) {
		return ErrWatcherClosed
	}
	return err
}

// Close stops watching. It waits for a reload in progress to finish.
// Closing again does nothing and returns the first call's result.
func (w *Watcher) Close() error { return w.w.Close() }

// apply parses the files read and puts them in force.
func (w *Watcher) apply(files []file, cause string) error {
	cfg, parts, err := parseParts(files, w.opts.Load)
	if err != nil {
		return err
	}
	if err := limitsKept(w.parts, parts); err != nil {
		return err
	}
	w.srv.SetConfig(cfg)
	dropped := droppedPaths(w.parts, parts)
	w.parts = parts
	w.log.Info("envoyrls: configuration reloaded", "cause", cause, "domains", cfg.Domains(), "dropped", watch.Names(dropped))
	if w.opts.OnReload != nil {
		w.opts.OnReload(cfg, nil)
	}
	return nil
}

// reject reports a configuration that did not load.
func (w *Watcher) reject(err error, cause string) {
	w.log.Error("envoyrls: configuration rejected; the previous one stays in force", "cause", cause, "err", err)
	if w.opts.OnReload != nil {
		w.opts.OnReload(nil, err)
	}
}

// limitsKept returns an error wrapping ErrLimitsNothing when now, replacing
// old, leaves a file that limited limiting nothing, or limits nothing at
// all where old limited, without allow_empty: true; nil otherwise. A file
// removed is no refusal: its removal is whole, not a write cut short.
func limitsKept(old, now map[string]part) error {
	var cut []string
	oldLimits, nowLimits, allowed := false, false, false
	for _, pt := range old {
		oldLimits = oldLimits || pt.limits
	}
	for name, pt := range now {
		nowLimits = nowLimits || pt.limits
		allowed = allowed || pt.allowEmpty
		if o, ok := old[name]; ok && o.limits && !pt.limits && !pt.allowEmpty {
			cut = append(cut, name)
		}
	}
	slices.Sort(cut)
	switch {
	case len(cut) > 0:
		return fmt.Errorf("%w: %s limited and would limit nothing", ErrLimitsNothing, watch.Names(cut))
	case oldLimits && !nowLimits && !allowed:
		return fmt.Errorf("%w: no file would limit anything", ErrLimitsNothing)
	}
	return nil
}

// droppedPaths returns the paths of the limits in old that are in no file
// of now, by file name then in file order.
func droppedPaths(old, now map[string]part) []string {
	kept := map[string]bool{}
	for _, pt := range now {
		for _, p := range pt.paths {
			kept[p] = true
		}
	}
	names := slices.Sorted(maps.Keys(old))
	var out []string
	for _, name := range names {
		for _, p := range old[name].paths {
			if !kept[p] {
				out = append(out, p)
			}
		}
	}
	return out
}
