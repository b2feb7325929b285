// Package fulldisk runs a durable store, under the engine, on a small file
// system that fills up: what a full disk does to Sluice, with a real file
// system (a tmpfs mounted for the test) rather than a store that pretends.
package fulldisk

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// Mount mounts a tmpfs of size bytes on a new directory and returns it; the
// file system is unmounted at cleanup. Where mounting is not permitted (not
// root, no CAP_SYS_ADMIN, not Linux) the test is skipped, and says so.
func Mount(t testing.TB, size int) string {
	t.Helper()
	dir := t.TempDir()
	if err := mount(dir, size); err != nil {
		t.Skipf("SKIPPED: a full disk needs a small file system to fill, and mounting a tmpfs of %d bytes on %s failed: %v (run as root on Linux to run this test)", size, dir, err)
	}
	t.Cleanup(func() {
		if err := unmount(dir); err != nil {
			t.Errorf("unmounting the tmpfs on %s: %v", dir, err)
		}
	})
	return dir
}

// Fill writes a file in dir until the file system holding dir is full,
// and returns its path; removing it frees the room again.
func Fill(t testing.TB, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "filler")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 4096)
	for {
		if _, err := f.Write(buf); err != nil {
			if errors.Is(err, syscall.ENOSPC) {
				break
			}
			t.Fatalf("filling %s: %v", path, err)
		}
	}
	// A last few bytes may fit in a page already the file's.
	for {
		if _, err := f.Write(buf[:1]); err != nil {
			break
		}
	}
	return path
}

// Free removes the file Fill wrote.
func Free(t testing.TB, filler string) {
	t.Helper()
	if err := os.Remove(filler); err != nil {
		t.Fatalf("freeing the disk: %v", err)
	}
}

var errNotLinux = fmt.Errorf("not Linux")
