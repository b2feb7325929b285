package bolt

import (
	"fmt"
	"path/filepath"
	"sync"

	"github.com/sluice-go/sluice/backend"
)

// bbolt locks its file with flock, which keeps out other processes and also
// other descriptors in this process, but only after Options.Timeout and with
// an error that cannot tell the two apart. The open directories of this
// process are therefore also kept here, by resolved path, so that a second
// Store in this process is refused at once and for the right reason.
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
		return nil, fmt.Errorf("sluice/backend/bolt: open %q: %w", dir, err)
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
	msg := fmt.Sprintf("sluice/backend/bolt: open %q: %s holds its lock; close it first, or give this store its own directory", e.dir, e.who)
	if e.cause != nil {
		msg += " (" + e.cause.Error() + ")"
	}
	return msg
}

func (e *lockedError) Is(target error) bool { return target == backend.ErrLocked }

func (e *lockedError) Unwrap() error { return e.cause }
