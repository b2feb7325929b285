package bolt

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.etcd.io/bbolt"

	"github.com/sluice-go/sluice/backend"
	"github.com/sluice-go/sluice/backend/backendtest"
)

// t0 is the fixed origin of the tests' timeline.
var t0 = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()

// open opens dir with no background sweeper and closes it at cleanup.
func open(t *testing.T, dir string) *Store {
	t.Helper()
	s, err := Open(dir, &Options{SweepInterval: -1})
	if err != nil {
		t.Fatalf("Open(%q) = %v", dir, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// mustGet checks that s.Get(key, now) returns want, or nothing when
// !present.
var mustGet = backendtest.MustGet

// TestWriteBatchKeyTooLarge is the bbolt half of all-or-nothing WriteBatch
// (the rest is backendtest's WriteBatchAllOrNothing).
func TestWriteBatchKeyTooLarge(t *testing.T) {
	s := open(t, t.TempDir())
	// bbolt refuses a key over 32 KiB in the middle of the transaction,
	// which then rolls back.
	err := s.WriteBatch([]backend.Write{
		{Key: []byte("a"), Value: []byte("1")},
		{Key: make([]byte, 40<<10), Value: []byte("2")},
	}, true)
	if err == nil {
		t.Fatal("WriteBatch with a 40 KiB key succeeded")
	}
	mustGet(t, s, "a", t0, "", false)
}

// rawUpdate runs fn in a write transaction on the bbolt file in dir,
// bypassing the Store.
func rawUpdate(t *testing.T, dir string, fn func(tx *bbolt.Tx) error) {
	t.Helper()
	db, err := bbolt.Open(filepath.Join(dir, FileName), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Update(fn); err != nil {
		t.Fatal(err)
	}
}

func TestUnknownFormat(t *testing.T) {
	tests := []struct {
		name  string
		setup func(tx *bbolt.Tx) error
		want  string
	}{
		{"newer", func(tx *bbolt.Tx) error { return tx.Bucket(metaBucket).Put(formatKey, []byte("2")) }, `version "2"`},
		{"garbage", func(tx *bbolt.Tx) error { return tx.Bucket(metaBucket).Put(formatKey, []byte("x1")) }, `version "x1"`},
		{"no records bucket", func(tx *bbolt.Tx) error { return tx.DeleteBucket(recordsBucket) }, `no "records" bucket`},
		{"foreign file", func(tx *bbolt.Tx) error {
			if err := tx.DeleteBucket(metaBucket); err != nil {
				return err
			}
			if err := tx.DeleteBucket(recordsBucket); err != nil {
				return err
			}
			_, err := tx.CreateBucket([]byte("someone else's"))
			return err
		}, "without a Sluice format version"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			s := open(t, dir)
			if err := s.Put([]byte("k"), []byte("v"), 0); err != nil {
				t.Fatal(err)
			}
			s.Close()
			rawUpdate(t, dir, tt.setup)

			s, err := Open(dir, nil)
			if err == nil {
				s.Close()
				t.Fatalf("Open() succeeded, want ErrFormat")
			}
			if !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Open() = %v, want ErrFormat naming %q and %s", err, dir, tt.want)
			}
			// The refused file is released: it can be opened raw again.
			rawUpdate(t, dir, func(*bbolt.Tx) error { return nil })
		})
	}
}

func TestNewStoreFormat(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "b") // created by Open
	s := open(t, dir)
	if err := s.Put([]byte("k"), []byte("rec"), 0x0102030405060708); err != nil {
		t.Fatal(err)
	}
	// An empty file (as a crash right after creating it leaves) is
	// initialised too.
	empty := filepath.Join(t.TempDir(), "empty")
	if err := os.MkdirAll(empty, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(empty, FileName), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	open(t, empty)
	s.db.View(func(tx *bbolt.Tx) error {
		if v := tx.Bucket(metaBucket).Get(formatKey); string(v) != "1" {
			t.Errorf("format version = %q, want %q", v, "1")
		}
		// The raw layout: key → expiresAt big-endian + record.
		v := tx.Bucket(recordsBucket).Get([]byte("k"))
		if want := []byte("\x01\x02\x03\x04\x05\x06\x07\x08rec"); !bytes.Equal(v, want) {
			t.Errorf("stored value = %x, want %x", v, want)
		}
		return nil
	})
}

// Rounds of keys written and swept leave the file no larger than the
// first round did: the pages sweeping frees are used again.
func TestSweepBoundsDisk(t *testing.T) {
	n, chunk := sweepKeys(), 1000
	dir := t.TempDir()
	s := open(t, dir)
	value := bytes.Repeat([]byte{7}, 17)
	round := func(r int) (size, used int64) {
		writes := make([]backend.Write, 0, chunk)
		for i := 0; i < n; i += chunk {
			writes = writes[:0]
			for j := i; j < i+chunk; j++ {
				writes = append(writes, backend.Write{Key: fmt.Appendf(nil, "r%d:user:%08d", r, j), Value: value, ExpiresAt: t0 + int64(r)})
			}
			if err := s.WriteBatch(writes, false); err != nil {
				t.Fatal(err)
			}
		}
		removed, sweeps := 0, 0
		for removed < n {
			got, err := s.Sweep(t0+int64(r), chunk)
			if err != nil {
				t.Fatal(err)
			}
			if got > chunk {
				t.Fatalf("Sweep removed %d records, more than its budget %d", got, chunk)
			}
			removed += got
			if sweeps++; sweeps > 2*n/chunk+2 {
				t.Fatalf("round %d: %d of %d removed after %d sweeps", r, removed, n, sweeps)
			}
		}
		fi, err := os.Stat(filepath.Join(dir, FileName))
		if err != nil {
			t.Fatal(err)
		}
		// bbolt grows the file in large steps; the pages in use up to
		// the highest one allocated are the finer measure.
		s.db.View(func(tx *bbolt.Tx) error { used = tx.Size(); return nil })
		t.Logf("round %d: %d keys written and swept: %s is %d bytes, %d of them up to its highest page", r, n, FileName, fi.Size(), used)
		return fi.Size(), used
	}
	firstSize, firstUsed := round(1)
	// The file never shrinks, but the pages freed by sweeping are reused:
	// later rounds of as many keys fit in about the same space.
	for r := 2; r <= 3; r++ {
		size, used := round(r)
		if size > firstSize*3/2 || used > firstUsed*3/2 {
			t.Errorf("round %d: %s is %d bytes, %d used; want at most 1.5 × round 1's %d and %d", r, FileName, size, used, firstSize, firstUsed)
		}
	}
	var left int
	s.Range(nil, func(backend.Record) bool { left++; return true })
	if left != 0 {
		t.Errorf("%d records left after sweeping, want 0", left)
	}
}

// sweepKeys is how many keys each round of TestSweepBoundsDisk writes and
// sweeps: 50,000, or 10,000 under the race detector, where the rounds took
// 12 s and ten thousand keys already fill 300 pages (1.2 MB) that
// sweeping must free and the next round reuse, or grow the file by as
// much again; make full runs 50,000 in a normal build.
func sweepKeys() int {
	if raceEnabled {
		return 10000
	}
	return 50000
}
