// Package watch reloads a configuration when its file changes: fsnotify on
// the file's directory, so that a file replaced by a rename (as editors
// save), a swapped symbolic link and a Kubernetes ConfigMap update are
// seen; a debounce, so that a burst of events is read once; a settle
// interval, so that a file still being written is not put in force; SIGHUP
// and an explicit Reload; and a digest of what was read, so that an
// unchanged file does nothing. Package config watches the gateway's file with it, package
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
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"
)

// DefaultDebounce is how long a Watcher waits after the last event before
// it reloads, when Options.Debounce is zero: an editor's save or a
// ConfigMap update is a burst of events, read once.
const DefaultDebounce = 100 * time.Millisecond

// DefaultSettle is how long the configuration must stay unchanged before a
// Watcher puts it in force, when Options.Settle is zero: a writer that is
// not atomic (a shell's redirection, kubectl cp, a configuration agent)
// leaves a prefix of the file for as long as it pauses, and a prefix that
// still parses would be put in force.
const DefaultSettle = 500 * time.Millisecond

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
	// Debounce is how long to wait after the last event before reading;
	// zero means DefaultDebounce.
	Debounce time.Duration
	// Settle is how long what Read returns must stay the same before a
	// change or a SIGHUP is put in force: Read is called again Settle
	// after each read until two reads in a row return one digest, and an
	// event in between starts over. Zero means DefaultSettle.
	Settle time.Duration
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

	// settleC, when not nil, replaces the Settle timer: a test sends on
	// it to end each settle interval.
	settleC <-chan time.Time
}

// Watcher watches a configuration and reloads it: when it changes
// (debounced, then settled), on SIGHUP (settled), or when Reload is
// called (at once).
//
// A change is read Options.Debounce after the last event, then again every
// Settle until two reads in a row agree; only then is it put in force. A
// writer that pauses for less than Settle is never read half-way; one that
// pauses longer is, and a configuration should therefore be replaced
// atomically (written aside, then renamed over the file, as editors and
// Kubernetes' ConfigMap volumes do).
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
	settle   time.Duration

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
	if w.settle = o.Settle; w.settle <= 0 {
		w.settle = DefaultSettle
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

// run is the watcher's goroutine: it debounces the events, waits for what
// they changed to settle, and reloads. last is the file as it was at the
// start (nil if absent, or a directory is watched).
func (w *Watcher[T]) run(last os.FileInfo) {
	defer w.wg.Done()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	var (
		fire     <-chan time.Time // timer.C while debouncing
		settled  <-chan time.Time // the settle interval's end while settling
		pending  candidate[T]     // the last read while settling
		force    bool             // a SIGHUP is among the causes
		settling bool
	)
	// settleFrom reads now and waits Settle for the next read. In
	// directory mode it watches every subdirectory first, so that a file
	// written into a new one after the read still makes an event (the
	// watch added only once the configuration was in force missed those).
	settleFrom := func() {
		if w.dirMode {
			for _, d := range w.dirs() {
				w.fw.Add(d)
			}
		}
		pending = w.read()
		settling, settled = true, w.after(timer)
	}
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
			// Still changing: start over once it is quiet. A SIGHUP
			// already asked for a reload, so it waits for the file to
			// settle, not for a debounce as long as the operator chose
			// for changes alone.
			if force {
				fire = nil
				settleFrom()
				continue
			}
			settling, settled = false, nil
			timer.Reset(w.debounce)
			fire = timer.C
		case err, ok := <-w.fw.Errors:
			if !ok {
				return
			}
			w.log.Error(w.opts.Name+": watching the configuration", "err", err)
		case <-fire:
			fire = nil
			settleFrom()
		case <-settled:
			now := w.read()
			if !now.same(pending) {
				// Changed within the interval: it is being written.
				pending, settled = now, w.after(timer)
				continue
			}
			settling, settled = false, nil
			cause := CauseChanged
			if force {
				cause = CauseSIGHUP
			}
			_ = w.consider(now, force, cause)
			force = false
		case <-w.sigC: // nil, never ready, without Options.SIGHUP
			w.log.Info(w.opts.Name + ": SIGHUP: reloading the configuration once it has settled")
			force = true
			if !settling { // a debounce pending is cut short
				fire = nil
				settleFrom()
			}
		}
	}
}

// after arms timer for the settle interval and returns the channel that
// ends it.
func (w *Watcher[T]) after(timer *time.Timer) <-chan time.Time {
	if w.opts.settleC != nil {
		return w.opts.settleC
	}
	timer.Reset(w.settle)
	return timer.C
}

// candidate is one read of the configuration.
type candidate[T any] struct {
	v      T
	digest uint64
	err    error
}

// same reports whether two reads agree: the same digest, or both failed.
func (c candidate[T]) same(o candidate[T]) bool {
	if c.err != nil || o.err != nil {
		return c.err != nil && o.err != nil
	}
	return c.digest == o.digest
}

// read calls Options.Read.
func (w *Watcher[T]) read() candidate[T] {
	v, digest, err := w.opts.Read()
	return candidate[T]{v: v, digest: digest, err: err}
}

// reload reads and puts in force; force puts in force even what was read
// before.
func (w *Watcher[T]) reload(force bool, cause string) error {
	return w.consider(w.read(), force, cause)
}

// consider puts what c read in force; force puts in force even what was
// read before.
func (w *Watcher[T]) consider(c candidate[T], force bool, cause string) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return ErrClosed
	}
	digest, err := c.digest, c.err
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
	if err := w.opts.Apply(c.v, cause); err != nil {
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

// maxNames bounds the names Names lists.
const maxNames = 32

// Names renders names for a log line or an error: quoted, comma-separated,
// at most 32 of them and then how many more; "none" for none.
func Names(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	var b strings.Builder
	for i, n := range names {
		if i == maxNames {
			fmt.Fprintf(&b, " and %d more", len(names)-i)
			break
		}
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(strconv.Quote(n))
	}
	return b.String()
}
