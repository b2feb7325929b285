// Package watch reloads a configuration when its file changes: fsnotify on
// the file's directory, so that a file replaced by a rename (as editors
// save), a swapped symbolic link and a Kubernetes ConfigMap update are
// seen; a debounce, so that a burst of events is read once; SIGHUP and an
// explicit Reload; and a digest of what was read, so that an unchanged file
// does nothing. Package config watches the gateway's file with it, package
// envoyrls/rlsfile envoyproxy/ratelimit's files or directory.
//
// A Watcher is safe for concurrent use; its reloads are serialised.
package watch

import (
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
)

// DefaultDebounce is how long a Watcher waits after the last event before
// it reloads, when Options.Debounce is zero: an editor's save or a
// ConfigMap update is a burst of events, read once.
const DefaultDebounce = 100 * time.Millisecond

// ErrClosed is returned by Watcher.Reload after Close.
var ErrClosed = errors.New("sluice/internal/watch: watcher closed")

// Causes of a reload, as Options.Apply and Options.Reject are told them.
const (
	CauseChanged  = "file changed" // an event, debounced
	CauseSIGHUP   = "SIGHUP"
	CauseExplicit = "explicit" // Watcher.Reload
)

// Options configure a Watcher. Path, Read, Apply and Reject are required.
type Options[T any] struct {
	// Path is the file or the directory watched. A file is watched through
	// its directory: an event naming the file is a change, an event naming
	// anything else is one only if Path now leads to another file (os.Stat,
	// following links: a ConfigMap's ..data swapped). In a directory every
	// event is a change, and the digest says whether anything did.
	Path string
	// Dirs lists the directories to watch when Path is a directory (Path
	// and those of its subdirectories whose files Read reads); it is asked
	// again after each reload put in force, so a new subdirectory is
	// watched. Nil means Path alone.
	Dirs func() []string
	// Read reads what Path holds, everything a reload puts in force, and
	// returns it with a digest of what it read: two reads with one digest
	// read the same. An error rejects the reload.
	Read func() (T, uint64, error)
	// Apply parses and checks what Read returned and puts it in force;
	// cause is one of the Cause constants. An error rejects it: what is in
	// force stays.
	Apply func(v T, cause string) error
	// Reject is told each rejected reload: Read's error or Apply's.
	Reject func(err error, cause string)
	// InForce is the digest of what is in force at the start, as Read
	// would return it, or nil when unknown: then the first reload puts
	// what it reads in force whatever its digest.
	InForce *uint64
	// Debounce is how long to wait after the last event before reloading;
	// zero means DefaultDebounce.
	Debounce time.Duration
	// SIGHUP, when true, makes the process's SIGHUP signals reload
	// (signal.Notify), until Close.
	SIGHUP bool
	// Logger receives the watcher's own lines: watch errors (Error), a
	// SIGHUP (Info), and a file that, after a rejection, is again the one
	// in force (Info). Give it the attributes that name what is watched
	// (slog.Logger.With). Nil means slog.Default().
	Logger *slog.Logger
	// Name starts the watcher's log messages ("sluice", "envoyrls").
	Name string
}

// Watcher watches a configuration and reloads it: when it changes
// (debounced), on SIGHUP, or when Reload is called.
//
// A change event that reads what was read last time does nothing (an
// editor's touch or chmod is not a reload), nor does one that reads what
// is in force, after a rejected reload: that is logged as the
// configuration loading again, nothing changed. SIGHUP and Reload put what
// they read in force whatever its digest.
//
// A change made in place to the target of a symbolic link that lives in an
// unwatched directory is not seen: send SIGHUP or call Reload.
type Watcher[T any] struct {
	opts     Options[T]
	path     string // Options.Path, cleaned
	base     string // its name, for a file
	dirMode  bool   // Path is a directory
	log      *slog.Logger
	debounce time.Duration

	fw   *fsnotify.Watcher
	sigC chan os.Signal // nil without Options.SIGHUP
	done chan struct{}
	wg   sync.WaitGroup

	mu        sync.Mutex // serialises reloads and guards the fields below
	closed    bool
	last      uint64 // the digest of the last read, if haveLast
	haveLast  bool
	inForce   uint64 // the digest of what is in force, if haveForce
	haveForce bool
	rejected  bool // the last reload was rejected

	closeOnce sync.Once
	closeErr  error
}

// New starts watching. Close the Watcher to stop.
func New[T any](o Options[T]) (*Watcher[T], error) {
	w := &Watcher[T]{opts: o, path: filepath.Clean(o.Path), log: o.Logger, debounce: o.Debounce, done: make(chan struct{})}
	w.base = filepath.Base(w.path)
	if w.log == nil {
		w.log = slog.Default()
	}
	if w.debounce <= 0 {
		w.debounce = DefaultDebounce
	}
	if o.InForce != nil {
		w.inForce, w.haveForce = *o.InForce, true
		w.last, w.haveLast = *o.InForce, true
	}
	st, err := os.Stat(w.path)
	w.dirMode = err == nil && st.IsDir()
	fw, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, fmt.Errorf("watching %s: %w", w.path, err)
	}
	w.fw = fw
	if w.dirMode {
		for _, d := range w.dirs() {
			if err := fw.Add(d); err != nil && d == w.path {
				fw.Close()
				return nil, fmt.Errorf("watching %s: %w", w.path, err)
			}
		}
	} else if err := fw.Add(filepath.Dir(w.path)); err != nil {
		fw.Close()
		return nil, fmt.Errorf("watching the directory of %s: %w", w.path, err)
	}
	if o.SIGHUP {
		w.sigC = make(chan os.Signal, 1)
		signal.Notify(w.sigC, syscall.SIGHUP)
	}
	var last os.FileInfo // the file as it is now; nil if absent: any later file is new
	if !w.dirMode {
		last, _ = os.Stat(w.path)
	}
	w.wg.Add(1)
	go w.run(last)
	return w, nil
}

// dirs lists the directories to watch in a directory's mode.
func (w *Watcher[T]) dirs() []string {
	if w.opts.Dirs == nil {
		return []string{w.path}
	}
	return w.opts.Dirs()
}

// Reload reads now and puts what it reads in force, as a change would,
// even if its digest did not change. It returns the error that rejected
// it (what is in force stays), or ErrClosed after Close.
func (w *Watcher[T]) Reload() error {
	return w.reload(true, CauseExplicit)
}

// Close stops watching and, with Options.SIGHUP, stops receiving SIGHUP.
// It waits for a reload in progress to finish. Closing again does nothing
// and returns the first call's result.
func (w *Watcher[T]) Close() error {
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

// run is the watcher's goroutine: it debounces the events and reloads.
// last is the file as it was at the start (nil if absent, or a directory
// is watched).
func (w *Watcher[T]) run(last os.FileInfo) {
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
			if !w.dirMode {
				if filepath.Base(ev.Name) != w.base {
					// Another name in the directory: a symbolic link on
					// the way to the file may have been swapped (a
					// ConfigMap's ..data). Reload only if the path now
					// leads elsewhere.
					now, err := os.Stat(w.path)
					if err != nil || (last != nil && os.SameFile(last, now)) {
						continue
					}
					last = now
				} else if now, err := os.Stat(w.path); err == nil {
					last = now
				}
			}
			timer.Reset(w.debounce)
			fire = timer.C
		case err, ok := <-w.fw.Errors:
			if !ok {
				return
			}
			w.log.Error(w.opts.Name+": watching the configuration", "err", err)
		case <-fire:
			fire = nil
			_ = w.reload(false, CauseChanged)
		case <-w.sigC: // nil, never ready, without Options.SIGHUP
			w.log.Info(w.opts.Name + ": SIGHUP: reloading the configuration")
			_ = w.reload(true, CauseSIGHUP)
		}
	}
}

// reload reads and puts in force; force puts in force even what was read
// before.
func (w *Watcher[T]) reload(force bool, cause string) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return ErrClosed
	}
	v, digest, err := w.opts.Read()
	if err != nil {
		// Nothing was read: the next read is compared with what is in
		// force only.
		w.haveLast, w.rejected = false, true
		w.opts.Reject(err, cause)
		return err
	}
	if !force {
		if w.haveLast && digest == w.last {
			return nil
		}
		if w.haveForce && digest == w.inForce {
			w.last, w.haveLast = digest, true
			if w.rejected {
				w.rejected = false
				w.log.Info(w.opts.Name + ": the configuration loads again, and is the one in force: nothing changed")
			}
			return nil
		}
	}
	w.last, w.haveLast = digest, true
	if err := w.opts.Apply(v, cause); err != nil {
		w.rejected = true
		w.opts.Reject(err, cause)
		return err
	}
	w.rejected = false
	w.inForce, w.haveForce = digest, true
	if w.dirMode {
		for _, d := range w.dirs() { // a new subdirectory's files are read: watch it too
			w.fw.Add(d)
		}
	}
	return nil
}
