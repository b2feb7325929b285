package pebble

import (
	"errors"
	"strings"
	"testing"

	pebbledb "github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/sluice-go/sluice/backend"
)

// TestLockHeldText pins the text of Pebble's error for a lock this process
// already holds, which lockError matches (Pebble exports no error value or
// type for it): an upgrade that changes it fails here.
func TestLockHeldText(t *testing.T) {
	dir := t.TempDir()
	lock, err := pebbledb.LockDirectory(dir, vfs.Default)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	second, err := pebbledb.LockDirectory(dir, vfs.Default)
	if err == nil {
		second.Close()
		t.Fatal("second LockDirectory of one directory in one process succeeded")
	}
	if !strings.Contains(err.Error(), heldInProcess) {
		t.Fatalf("second LockDirectory = %q, want it to contain %q: Pebble changed its text; update heldInProcess", err, heldInProcess)
	}
	// And lockError reads it as a lock another Store holds.
	if lerr := lockError(dir, err); !errors.Is(lerr, backend.ErrLocked) || !strings.Contains(lerr.Error(), "another Store in this process holds its lock") {
		t.Errorf("lockError = %v, want ErrLocked by another Store in this process", lerr)
	}
	// The same through pebble.Open, as another program in this process
	// would open the directory.
	db, err := pebbledb.Open(dir, &pebbledb.Options{Logger: &pebbleLog{}})
	if err == nil {
		db.Close()
		t.Fatal("pebble.Open of a directory whose lock this process holds succeeded")
	}
	if !strings.Contains(err.Error(), heldInProcess) {
		t.Fatalf("pebble.Open = %q, want it to contain %q", err, heldInProcess)
	}
}

// TestOpenAfterRawOpen opens with Open a directory that a raw Pebble
// database in this process holds under the same name: the directory
// registry does not know it, and Pebble's own refusal is reported as
// backend.ErrLocked.
func TestOpenAfterRawOpen(t *testing.T) {
	dir := t.TempDir()
	db, err := pebbledb.Open(dir, &pebbledb.Options{Logger: &pebbleLog{}})
	if err != nil {
		t.Fatal(err)
	}
	s, err := Open(dir, nil)
	if err == nil {
		s.Close()
		db.Close()
		t.Fatal("Open of a directory a raw Pebble database holds succeeded")
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(err, backend.ErrLocked) || !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), "another Store in this process") {
		t.Fatalf("Open = %v, want ErrLocked naming %q and this process", err, dir)
	}
	// The refused Open released its claim: once the raw (empty) database
	// is closed, the directory opens.
	s, err = Open(dir, nil)
	if err != nil {
		t.Fatalf("Open after the raw database closed = %v", err)
	}
	s.Close()
}
