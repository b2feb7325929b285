package pebble

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
	"sync"
	"syscall"

	"github.com/sluice-go/sluice/backend"
)

// Pebble locks a directory with an fcntl lock on its LOCK file. Such locks
// belong to the process, so they keep other processes out but not a second
// Store in this process (and closing the second Store's descriptor would
// silently drop the first one's lock). The open directories of this process
// are therefore also kept here, by resolved path.
var opened struct {
	sync.Mutex                     // guards dirs
	dirs       map[string]struct{} // resolved paths of the directories open in this process
}

// held is this process's claim on an open directory.
type held struct{ path string }

// claim records dir as open in this process, or returns an error wrapping
// backend.ErrLocked when it already is.
func claim(dir string) (*held, error) {
	path, err := filepath.Abs(dir)
	if err == nil {
		path, err = filepath.EvalSymlinks(path)
	}
	if err != nil {
		return nil, fmt.Errorf("sluice/backend/pebble: open %q: %w", dir, err)
	}
	opened.Lock()
	defer opened.Unlock()
	if _, ok := opened.dirs[path]; ok {
		return nil, &lockedError{dir: dir, who: "another Store in this process"}
	}
	if opened.dirs == nil {
		opened.dirs = make(map[string]struct{})
	}
	opened.dirs[path] = struct{}{}
	return &held{path: path}, nil
}

// release gives up the claim.
func (h *held) release() {
	opened.Lock()
	delete(opened.dirs, h.path)
	opened.Unlock()
}

// lockedError is returned by Open for a directory another Store holds. It
// matches backend.ErrLocked.
type lockedError struct {
	dir   string
	who   string // "another process", …
	cause error  // the locking call's error, if any
}

func (e *lockedError) Error() string {
	msg := fmt.Sprintf("sluice/backend/pebble: open %q: %s holds its lock; close it first, or give this store its own directory", e.dir, e.who)
	if e.cause != nil {
		msg += " (" + e.cause.Error() + ")"
	}
	return msg
}

func (e *lockedError) Is(target error) bool { return target == backend.ErrLocked }

func (e *lockedError) Unwrap() error { return e.cause }

// lockError explains why pebble.LockDirectory(dir) failed.
func lockError(dir string, err error) error {
	var pe *fs.PathError
	switch {
	case errors.As(err, &pe):
		// Creating the LOCK file failed: the directory is not writable.
		return fmt.Errorf("sluice/backend/pebble: open %q: cannot create its lock file (is the directory writable?): %w", dir, err)
	case errors.Is(err, syscall.EAGAIN), errors.Is(err, syscall.EACCES):
		return &lockedError{dir: dir, who: "another process", cause: err}
	case strings.Contains(err.Error(), "held by current process"):
		return &lockedError{dir: dir, who: "another Store in this process", cause: err}
	}
	return fmt.Errorf("sluice/backend/pebble: open %q: locking the directory: %w", dir, err)
}
