package envoyrls

import (
	"errors"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"
)

// DefaultDebounce is how long a Watcher waits after the last change before
// it reloads, when WatchOptions.Debounce is zero.
const DefaultDebounce = 100 * time.Millisecond

// ErrWatcherClosed is returned by Watcher.Reload after Close.
var ErrWatcherClosed = errors.New("envoyrls: watcher closed")

// WatchOptions configure a Watcher. The zero value is usable.
type WatchOptions struct {
	// Logger receives the reloads (Info) and rejected configurations
	// (Error, naming the file, line and field); nil means slog.Default().
	Logger *slog.Logger
	// OnReload, if not nil, is called after each reload attempt: with the
	// configuration put in force and a nil error, or with nil and the
	// error that kept the previous one. Calls are serialised.
	OnReload func(cfg *Config, err error)
	// SIGHUP makes the process's SIGHUP signals reload, until Close.
	SIGHUP bool
	// Debounce is how long to wait after the last event before reloading;
	// zero means DefaultDebounce.
	Debounce time.Duration
	// Load is how each reload reads the configuration (LoadWith).
	Load LoadOptions
}

// Watcher reloads a configuration file or directory into a Server when it
// changes (fsnotify events on the directory, so renames, symbolic-link
// swaps and Kubernetes ConfigMap updates are seen) or when asked (Reload,
// SIGHUP). A configuration that does not load is rejected whole: the one in
// force stays, and the error is logged and passed to OnReload. A change
// that leaves every file's bytes as they were does nothing.
type Watcher struct {
	path     string
	srv      *Server
	opts     WatchOptions
	log      *slog.Logger
	debounce time.Duration
	fw       *fsnotify.Watcher
	sigC     chan os.Signal
	done     chan struct{}
	wg       sync.WaitGroup

	mu     sync.Mutex // serialises reloads and guards the fields below
	closed bool
	digest uint64 // of the configuration in force, 0 before the first
	// rejected reports that the last reload was rejected: a file that
	// then loads as the configuration in force is said to be in force
	// again, though nothing changes.
	rejected bool
}

// Watch starts watching path (what Load reads) for srv, whose configuration
// must have been loaded from path. Close the Watcher to stop.
func Watch(path string, srv *Server, opts WatchOptions) (*Watcher, error) {
	w := &Watcher{path: filepath.Clean(path), srv: srv, opts: opts, log: opts.Logger, debounce: opts.Debounce, done: make(chan struct{})}
	if w.log == nil {
		w.log = slog.Default()
	}
	if w.debounce <= 0 {
		w.debounce = DefaultDebounce
	}
	if _, d, err := load(w.path, opts.Load); err == nil {
		w.digest = d
	}
	dir := w.path
	if st, err := os.Stat(w.path); err != nil {
		return nil, err
	} else if !st.IsDir() {
		dir = filepath.Dir(w.path)
	}
	fw, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, err
	}
	if err := fw.Add(dir); err != nil {
		fw.Close()
		return nil, err
	}
	w.fw = fw
	if dir == w.path {
		w.watchSubdirs()
	}
	if opts.SIGHUP {
		w.sigC = make(chan os.Signal, 1)
		signal.Notify(w.sigC, syscall.SIGHUP)
	}
	w.wg.Add(1)
	go w.run()
	return w, nil
}

func (w *Watcher) run() {
	defer w.wg.Done()
	var timer *time.Timer
	var fire <-chan time.Time
	for {
		select {
		case <-w.done:
			if timer != nil {
				timer.Stop()
			}
			return
		case _, ok := <-w.fw.Events:
			if !ok {
				return
			}
			if timer == nil {
				timer = time.NewTimer(w.debounce)
			} else {
				timer.Reset(w.debounce)
			}
			fire = timer.C
		case err, ok := <-w.fw.Errors:
			if !ok {
				return
			}
			w.log.Error("envoyrls: watching the configuration", "path", w.path, "err", err)
		case <-fire:
			fire = nil
			w.reload(false)
		case <-w.sigC:
			w.log.Info("envoyrls: SIGHUP: reloading the configuration", "path", w.path)
			w.reload(true)
		}
	}
}

// Reload reads the configuration now and puts it in force if it loads,
// even when its bytes are unchanged. It returns the error that kept the
// previous configuration, if any.
func (w *Watcher) Reload() error {
	return w.reload(true)
}

func (w *Watcher) reload(force bool) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return ErrWatcherClosed
	}
	cfg, digest, err := load(w.path, w.opts.Load)
	if err != nil {
		w.rejected = true
		w.log.Error("envoyrls: configuration rejected; the previous one stays in force", "path", w.path, "err", err)
		if w.opts.OnReload != nil {
			w.opts.OnReload(nil, err)
		}
		return err
	}
	if !force && digest == w.digest {
		if w.rejected {
			w.rejected = false
			w.log.Info("envoyrls: the configuration loads again, and is the one in force: nothing changed", "path", w.path)
		}
		return nil
	}
	w.rejected = false
	w.digest = digest
	w.watchSubdirs() // a new subdirectory's files are read: watch it too
	w.srv.SetConfig(cfg)
	w.log.Info("envoyrls: configuration reloaded", "path", w.path, "domains", cfg.Domains())
	if w.opts.OnReload != nil {
		w.opts.OnReload(cfg, nil)
	}
	return nil
}

// watchSubdirs watches the subdirectories of a configuration directory,
// whose files Load reads too (fsnotify watches one directory at a time).
func (w *Watcher) watchSubdirs() {
	if st, err := os.Stat(w.path); err != nil || !st.IsDir() {
		return
	}
	for _, d := range configDirs(w.path) {
		if d != w.path {
			w.fw.Add(d)
		}
	}
}

// Close stops watching. It waits for a reload in progress to finish.
func (w *Watcher) Close() error {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return nil
	}
	w.closed = true
	w.mu.Unlock()
	if w.sigC != nil {
		signal.Stop(w.sigC)
	}
	close(w.done)
	err := w.fw.Close()
	w.wg.Wait()
	return err
}
