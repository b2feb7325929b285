package pebble

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	pebbledb "github.com/cockroachdb/pebble/v2"

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

func TestUnknownFormat(t *testing.T) {
	tests := []struct {
		name    string
		version string // "" means no format key, but a foreign key
		want    string
	}{
		{"newer", "2", `version "2"`},
		{"garbage", "x1", `version "x1"`},
		{"foreign database", "", "without a Sluice format version"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			if tt.version != "" {
				s := open(t, dir)
				if err := s.Put([]byte("k"), []byte("v"), 0); err != nil {
					t.Fatal(err)
				}
				s.Close()
			}
			db, err := pebbledb.Open(dir, &pebbledb.Options{Logger: &pebbleLog{}})
			if err != nil {
				t.Fatal(err)
			}
			if tt.version != "" {
				err = db.Set(metaFormatKey, []byte(tt.version), pebbledb.Sync)
			} else {
				err = db.Set([]byte("someone else's key"), []byte("v"), pebbledb.Sync)
			}
			if err != nil {
				t.Fatal(err)
			}
			db.Close()

			s, err := Open(dir, nil)
			if err == nil {
				s.Close()
				t.Fatalf("Open() succeeded, want ErrFormat")
			}
			if !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Open() = %v, want ErrFormat naming %q and %s", err, dir, tt.want)
			}
			// The refused store is released: it can be opened raw again.
			db, err = pebbledb.Open(dir, &pebbledb.Options{Logger: &pebbleLog{}})
			if err != nil {
				t.Fatalf("raw re-open after refusal = %v", err)
			}
			db.Close()
		})
	}
}

func TestNewStoreFormat(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "b") // created by Open
	s := open(t, dir)
	v, c, err := s.db.Get(metaFormatKey)
	if err != nil {
		t.Fatalf("format key: %v", err)
	}
	if string(v) != "1" {
		t.Errorf("format version = %q, want %q", v, "1")
	}
	c.Close()
	// The raw layout: 0x01 + key → expiresAt big-endian + record.
	if err := s.Put([]byte("k"), []byte("rec"), 0x0102030405060708); err != nil {
		t.Fatal(err)
	}
	v, c, err = s.db.Get([]byte("\x01k"))
	if err != nil {
		t.Fatal(err)
	}
	if want := []byte("\x01\x02\x03\x04\x05\x06\x07\x08rec"); !bytes.Equal(v, want) {
		t.Errorf("stored value = %x, want %x", v, want)
	}
	c.Close()
}

// dirSize returns the total size of the files in dir, and the part of it
// that is not write-ahead log.
func dirSize(t *testing.T, dir string) (total, nonWAL int64) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		fi, err := e.Info()
		if errors.Is(err, fs.ErrNotExist) {
			continue // removed since ReadDir
		}
		if err != nil {
			t.Fatal(err)
		}
		total += fi.Size()
		if !strings.HasSuffix(e.Name(), ".log") {
			nonWAL += fi.Size()
		}
	}
	return total, nonWAL
}

// sweepKeys is how many keys each round of TestSweepBoundsDisk writes and
// sweeps: 50,000, or 10,000 under the race detector, where the rounds took
// 6 s; make full runs 50,000 in a normal build. Under the race detector the
// tables' bound shrinks with the keys (see TestSweepBoundsDisk), so that a
// round whose sweep or compaction left its records' tables still fails.
func sweepKeys() int {
	if raceEnabled {
		return 10000
	}
	return 50000
}

func TestSweepBoundsDisk(t *testing.T) {
	n, chunk := sweepKeys(), 1000
	// 50,000 records take about 2 MB in tables, 40 bytes each: swept and
	// compacted, the tables hold at most a quarter of that.
	maxNonWAL := int64(1<<20) * int64(n) / 50000
	dir := t.TempDir()
	s := open(t, dir)
	value := bytes.Repeat([]byte{7}, 17)
	round := func(r int) {
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
		if err := s.db.Compact(context.Background(), []byte{0x00}, []byte{0xff}, false); err != nil {
			t.Fatal(err)
		}
		s.db.TestOnlyWaitForCleaning()
		total, nonWAL := dirSize(t, dir)
		t.Logf("round %d: %d keys written and swept: directory %d bytes, %d of them not WAL", r, n, total, nonWAL)
		// 50,000 records take about 2 MB in tables. Swept and compacted,
		// the tables hold only the format key; the WAL files Pebble keeps
		// for recycling are bounded by its memtable settings (a few
		// memtables' worth), not by the keys ever written.
		if nonWAL > maxNonWAL {
			t.Errorf("round %d: %d bytes of tables and manifest after sweeping every record, want at most %d", r, nonWAL, maxNonWAL)
		}
		if total > 16<<20 {
			t.Errorf("round %d: directory holds %d bytes, want at most 16 MiB", r, total)
		}
	}
	for r := range 3 {
		round(r + 1)
	}
	var left int
	s.Range(nil, func(backend.Record) bool { left++; return true })
	if left != 0 {
		t.Errorf("%d records left after sweeping, want 0", left)
	}
}
