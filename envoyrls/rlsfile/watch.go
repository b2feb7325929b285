package rlsfile

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/sluice-go/sluice/envoyrls"
	"github.com/sluice-go/sluice/internal/watch"
)

// DefaultDebounce is how long a Watcher waits after the last change before
// it reloads, when WatchOptions.Debounce is zero.
const DefaultDebounce = watch.DefaultDebounce

// ErrWatcherClosed is returned by Watcher.Reload after Close.
var ErrWatcherClosed = errors.New("sluice/envoyrls/rlsfile: watcher closed")

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
	// Debounce is how long to wait after the last event before reloading;
	// zero means DefaultDebounce.
	Debounce time.Duration
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
type Watcher struct {
	path string
	srv  *envoyrls.Server
	opts WatchOptions
	log  *slog.Logger // with the path
	w    *watch.Watcher[[]file]
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
	if _, d, err := load(path, opts.Load); err == nil {
		inForce = &d
	}
	fw, err := watch.New(watch.Options[[]file]{
		Path:     path,
		Dirs:     func() []string { return configDirs(path) },
		Read:     func() ([]file, uint64, error) { return readFiles(path) },
		Apply:    w.apply,
		Reject:   w.reject,
		InForce:  inForce,
		Debounce: opts.Debounce,
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
func (w *Watcher) apply(files []file, _ string) error {
	cfg, err := parseFiles(files, w.opts.Load)
	if err != nil {
		return err
	}
	w.srv.SetConfig(cfg)
	w.log.Info("envoyrls: configuration reloaded", "domains", cfg.Domains())
	if w.opts.OnReload != nil {
		w.opts.OnReload(cfg, nil)
	}
	return nil
}

// reject reports a configuration that did not load.
func (w *Watcher) reject(err error, _ string) {
	w.log.Error("envoyrls: configuration rejected; the previous one stays in force", "err", err)
	if w.opts.OnReload != nil {
		w.opts.OnReload(nil, err)
	}
}
