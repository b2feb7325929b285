package pebble

import (
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"syscall"

	"github.com/sluice-go/sluice/backend/internal/dirlock"
)

// Pebble locks a directory with an fcntl lock on its LOCK file. Such locks
// belong to the process, so they keep other processes out but not a second
// Store in this process (and closing the second Store's descriptor would
// silently drop the first one's lock). The open directories of this process
// are therefore also kept here, by resolved path.
var opened = dirlock.New("sluice/backend/pebble")

// heldInProcess is the text of the error Pebble's vfs.Default.Lock returns
// when this process already holds the lock file under the same name (as
// another program's pebble.Open of the directory in this process does).
// Pebble exports no error value or type for it, so lockError matches the
// text; TestLockHeldText pins it, so that an upgrade that changes it fails
// loudly.
const heldInProcess = "lock held by current process"

// lockError explains why pebble.LockDirectory(dir) failed.
func lockError(dir string, err error) error {
	var pe *fs.PathError
	switch {
	case errors.As(err, &pe):
		// Creating the LOCK file failed: the directory is not writable.
		return fmt.Errorf("sluice/backend/pebble: open %q: cannot create its lock file (is the directory writable?): %w", dir, err)
	case errors.Is(err, syscall.EAGAIN), errors.Is(err, syscall.EACCES):
		return opened.Locked(dir, "another process", err)
	case strings.Contains(err.Error(), heldInProcess):
		return opened.Locked(dir, "another Store in this process", err)
	}
	return fmt.Errorf("sluice/backend/pebble: open %q: locking the directory: %w", dir, err)
}
