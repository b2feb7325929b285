// Package dirlock keeps the directories a durable store has open in this
// process, so that a second Store on the same directory is refused at once
// and with an error that says why.
//
// The stores also lock their files against other processes (bbolt with
// flock, Pebble with an fcntl lock on its LOCK file), but neither lock tells
// a second Store in this process apart from another process: bbolt's flock
// answers only after its timeout and with the same error, and Pebble's
// fcntl lock belongs to the process, so it does not keep a second Store out
// at all (and closing that Store's descriptor would silently drop the first
// one's lock). Each store therefore also claims its directory, by resolved
// path, in a Registry of its own.
package dirlock

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/sluice-go/sluice/backend"
)

// Registry is the set of directories one kind of store has open in this
// process. Create it with New; it is safe for concurrent use.
type Registry struct {
	name string // prefix of error messages, as "sluice/backend/bolt"

	mu   sync.Mutex          // guards dirs
	dirs map[string]struct{} // resolved paths of the directories open in this process
}

// New returns an empty Registry whose errors start with name, the package
// path of the store that uses it (as "sluice/backend/bolt").
func New(name string) *Registry {
	return &Registry{name: name, dirs: make(map[string]struct{})}
}

// Held is a claim on an open directory, returned by Claim.
type Held struct {
	r    *Registry
	path string
}

// Claim records dir, resolved to an absolute path without symbolic links,
// as open. It returns an error naming dir when dir cannot be resolved, and
// a *LockedError (which matches backend.ErrLocked) when dir, by any path, is
// already claimed.
func (r *Registry) Claim(dir string) (*Held, error) {
	path, err := filepath.Abs(dir)
	if err == nil {
		path, err = filepath.EvalSymlinks(path)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: open %q: %w", r.name, dir, err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.dirs[path]; ok {
		return nil, r.Locked(dir, "another Store in this process", nil)
	}
	r.dirs[path] = struct{}{}
	return &Held{r: r, path: path}, nil
}

// Open is the first step of a store's Open: it refuses an empty name,
// creates dir and its parents if needed, and claims dir (see Claim). Every
// error names dir; one for a directory that cannot be created wraps the
// file system's error (fs.ErrPermission, …).
func (r *Registry) Open(dir string) (*Held, error) {
	if dir == "" {
		return nil, errors.New(r.name + ": open: empty directory name")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("%s: open %q: cannot create the directory: %w", r.name, dir, err)
	}
	return r.Claim(dir)
}

// Release gives up the claim. It must be called once.
func (h *Held) Release() {
	h.r.mu.Lock()
	delete(h.r.dirs, h.path)
	h.r.mu.Unlock()
}

// Locked returns the error for dir held by who ("another process", …), with
// the locking call's error cause, if any.
func (r *Registry) Locked(dir, who string, cause error) *LockedError {
	return &LockedError{Name: r.name, Dir: dir, Who: who, Cause: cause}
}

// LockedError is the error for a directory another Store holds. It matches
// backend.ErrLocked and unwraps to Cause.
type LockedError struct {
	Name  string // prefix of the message, as "sluice/backend/bolt"
	Dir   string // the directory, as given to Open
	Who   string // "another process", …
	Cause error  // the locking call's error, if any
}

func (e *LockedError) Error() string {
	msg := fmt.Sprintf("%s: open %q: %s holds its lock; close it first, or give this store its own directory", e.Name, e.Dir, e.Who)
	if e.Cause != nil {
		msg += " (" + e.Cause.Error() + ")"
	}
	return msg
}

// Is reports whether target is backend.ErrLocked.
func (e *LockedError) Is(target error) bool { return target == backend.ErrLocked }

// Unwrap returns Cause.
func (e *LockedError) Unwrap() error { return e.Cause }
