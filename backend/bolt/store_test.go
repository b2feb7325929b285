package bolt

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.etcd.io/bbolt"

	"github.com/sluice-go/sluice/backend"
)

// t0 is the fixed origin of the tests' timeline.
var t0 = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()

// open opens dir with no background sweeper and closes it at cleanup.
func open(t *testing.T, dir string) *Store {
	t.Helper()
	return openWith(t, dir, &Options{SweepInterval: -1})
}

// openWith opens dir with opts and closes it at cleanup.
func openWith(t *testing.T, dir string, opts *Options) *Store {
	t.Helper()
	s, err := Open(dir, opts)
	if err != nil {
		t.Fatalf("Open(%q) = %v", dir, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func mustGet(t *testing.T, s *Store, key string, now int64, want string, present bool) {
	t.Helper()
	got, err := s.Get([]byte(key), now)
	if err != nil {
		t.Fatalf("Get(%q) error = %v", key, err)
	}
	if !present {
		if got != nil {
			t.Fatalf("Get(%q) = %q, want absent", key, got)
		}
		return
	}
	if got == nil || string(got) != want {
		t.Fatalf("Get(%q) = %q (nil=%t), want %q", key, got, got == nil, want)
	}
}

func TestPersistence(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir)
	if err := s.Put([]byte("forever"), []byte("f"), 0); err != nil {
		t.Fatal(err)
	}
	if err := s.Put([]byte("short"), []byte("s"), t0+10); err != nil {
		t.Fatal(err)
	}
	if err := s.WriteBatch([]backend.Write{
		{Key: []byte("batched"), Value: []byte("b"), ExpiresAt: t0 + 100},
		{Key: []byte("gone"), Value: []byte("g")},
		{Key: []byte("gone"), Delete: true},
	}, false); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close() = %v", err)
	}

	s = open(t, dir)
	steps := []struct {
		key     string
		now     int64
		want    string
		present bool
	}{
		{"forever", t0 + 1e18, "f", true},
		{"short", t0 + 9, "s", true},
		{"short", t0 + 10, "", false},
		{"batched", t0 + 99, "b", true},
		{"batched", t0 + 100, "", false},
		{"gone", t0, "", false},
	}
	for i, st := range steps {
		got, err := s.Get([]byte(st.key), st.now)
		if err != nil || (got != nil) != st.present || string(got) != st.want {
			t.Errorf("step %d: Get(%q, t0%+d) = %q, %v, want %q (present=%t)", i, st.key, st.now-t0, got, err, st.want, st.present)
		}
	}
}

func TestWriteBatchOrdered(t *testing.T) {
	s := open(t, t.TempDir())
	if err := s.Put([]byte("old"), []byte("o"), 0); err != nil {
		t.Fatal(err)
	}
	writes := []backend.Write{
		{Key: []byte("a"), Value: []byte("1")},
		{Key: []byte("b"), Value: []byte("2")},
		{Key: []byte("a"), Value: []byte("3")},
		{Key: []byte("b"), Delete: true},
		{Key: []byte("old"), Delete: true},
		{Key: []byte("c"), Delete: true},
		{Key: []byte("c"), Value: []byte("4"), ExpiresAt: t0 + 5},
		{Key: []byte("missing"), Delete: true},
	}
	for _, sync := range []bool{false, true} {
		if err := s.WriteBatch(writes, sync); err != nil {
			t.Fatalf("WriteBatch(sync=%t) = %v", sync, err)
		}
		mustGet(t, s, "a", t0, "3", true)
		mustGet(t, s, "b", t0, "", false)
		mustGet(t, s, "old", t0, "", false)
		mustGet(t, s, "c", t0, "4", true)
		mustGet(t, s, "c", t0+5, "", false)
	}
	// The batch does not keep the caller's slices.
	k, v := []byte("reused"), []byte("value")
	if err := s.WriteBatch([]backend.Write{{Key: k, Value: v}}, false); err != nil {
		t.Fatal(err)
	}
	copy(k, "xxxxxx")
	copy(v, "yyyyy")
	mustGet(t, s, "reused", t0, "value", true)
}

func TestWriteBatchAllOrNothing(t *testing.T) {
	s := open(t, t.TempDir())
	err := s.WriteBatch([]backend.Write{
		{Key: []byte("a"), Value: []byte("1")},
		{Key: nil, Value: []byte("2")},
	}, true)
	if !errors.Is(err, backend.ErrEmptyKey) {
		t.Fatalf("WriteBatch with an empty key = %v, want ErrEmptyKey", err)
	}
	mustGet(t, s, "a", t0, "", false)
	// bbolt refuses a key over 32 KiB in the middle of the transaction,
	// which then rolls back.
	err = s.WriteBatch([]backend.Write{
		{Key: []byte("a"), Value: []byte("1")},
		{Key: make([]byte, 40<<10), Value: []byte("2")},
	}, true)
	if err == nil {
		t.Fatal("WriteBatch with a 40 KiB key succeeded")
	}
	mustGet(t, s, "a", t0, "", false)
	if err := s.WriteBatch(nil, true); err != nil {
		t.Fatalf("WriteBatch(nil) = %v", err)
	}
}

func TestClosedExtras(t *testing.T) {
	s := open(t, t.TempDir())
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.WriteBatch([]backend.Write{{Key: []byte("k")}}, true); !errors.Is(err, backend.ErrClosed) {
		t.Errorf("WriteBatch after Close = %v, want ErrClosed", err)
	}
	if err := s.WriteBatch(nil, false); !errors.Is(err, backend.ErrClosed) {
		t.Errorf("WriteBatch(nil) after Close = %v, want ErrClosed", err)
	}
	if err := s.Range(nil, func(backend.Record) bool { return true }); !errors.Is(err, backend.ErrClosed) {
		t.Errorf("Range after Close = %v, want ErrClosed", err)
	}
	if _, err := s.Sweep(t0, 10); !errors.Is(err, backend.ErrClosed) {
		t.Errorf("Sweep after Close = %v, want ErrClosed", err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close = %v, want nil", err)
	}
}

func TestSecondOpenLocked(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir)
	for _, other := range []string{dir, dir + "/.", filepath.Join(dir, "..", filepath.Base(dir))} {
		s2, err := Open(other, nil)
		if err == nil {
			s2.Close()
			t.Fatalf("second Open(%q) succeeded, want ErrLocked", other)
		}
		if !errors.Is(err, backend.ErrLocked) {
			t.Fatalf("second Open(%q) = %v, want ErrLocked", other, err)
		}
		if msg := err.Error(); !strings.Contains(msg, other) || !strings.Contains(msg, "holds its lock") {
			t.Errorf("second Open error %q does not name %q and the lock", msg, other)
		}
	}
	// Once the first is closed the directory opens again.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	open(t, dir)
}

func TestUnwritableDir(t *testing.T) {
	t.Run("under a file", func(t *testing.T) {
		// A path under a regular file cannot be created, even by root.
		f := filepath.Join(t.TempDir(), "file")
		if err := os.WriteFile(f, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
		for _, dir := range []string{f, filepath.Join(f, "sub")} {
			s, err := Open(dir, nil)
			if err == nil {
				s.Close()
				t.Fatalf("Open(%q) succeeded, want an error", dir)
			}
			if !strings.Contains(err.Error(), dir) {
				t.Errorf("Open(%q) error %q does not name the directory", dir, err)
			}
			t.Logf("Open(%q): %v", dir, err)
		}
	})
	t.Run("chmod 0500", func(t *testing.T) {
		if os.Geteuid() == 0 {
			t.Skip("running as root: permission bits do not stop root from writing")
		}
		parent := t.TempDir()
		if err := os.Chmod(parent, 0o500); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Chmod(parent, 0o700) })
		for _, dir := range []string{parent, filepath.Join(parent, "sub")} {
			s, err := Open(dir, nil)
			if err == nil {
				s.Close()
				t.Fatalf("Open(%q) succeeded, want an error", dir)
			}
			if !strings.Contains(err.Error(), dir) || !errors.Is(err, fs.ErrPermission) {
				t.Errorf("Open(%q) error %q, want a permission error naming the directory", dir, err)
			}
			if errors.Is(err, backend.ErrLocked) {
				t.Errorf("Open(%q) error %q matches ErrLocked", dir, err)
			}
			t.Logf("Open(%q): %v", dir, err)
		}
	})
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

func TestCorruptValues(t *testing.T) {
	s := open(t, t.TempDir())
	raw := map[string][]byte{"short": []byte("1234567"), "empty": {}}
	err := s.db.Update(func(tx *bbolt.Tx) error {
		for k, v := range raw {
			if err := tx.Bucket(recordsBucket).Put([]byte(k), v); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Put([]byte("good"), []byte("g"), 0); err != nil {
		t.Fatal(err)
	}
	for k := range raw {
		mustGet(t, s, k, t0, "", false)
	}
	var got []string
	err = s.Range(nil, func(r backend.Record) bool {
		got = append(got, fmt.Sprintf("%s=%q@%d", r.Key, r.Value, r.ExpiresAt))
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{`empty=""@0`, `good="g"@0`, `short="1234567"@0`}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("Range = %v, want %v", got, want)
	}
	if n, err := s.Sweep(t0, 100); err != nil || n != 2 {
		t.Errorf("Sweep = %d, %v, want 2 corrupt records removed", n, err)
	}
	got = got[:0]
	s.Range(nil, func(r backend.Record) bool { got = append(got, string(r.Key)); return true })
	if fmt.Sprint(got) != "[good]" {
		t.Errorf("Range after Sweep = %v, want [good]", got)
	}
}

func TestRange(t *testing.T) {
	s := openWith(t, t.TempDir(), &Options{SweepInterval: -1, NoSync: true})
	const n = 600 // more than one chunk
	for i := range n {
		if err := s.Put(fmt.Appendf(nil, "k%04d", i), fmt.Appendf(nil, "v%d", i), t0+int64(i)); err != nil {
			t.Fatal(err)
		}
	}
	i := 10
	err := s.Range([]byte("k0010"), func(r backend.Record) bool {
		if want := fmt.Sprintf("k%04d", i); string(r.Key) != want {
			t.Fatalf("record %d: key %q, want %q", i, r.Key, want)
		}
		if want := fmt.Sprintf("v%d", i); string(r.Value) != want || r.ExpiresAt != t0+int64(i) {
			t.Fatalf("record %q = %q@%d, want %q@%d", r.Key, r.Value, r.ExpiresAt, want, t0+int64(i))
		}
		// fn may call the store.
		if i%100 == 0 {
			if err := s.Delete(r.Key); err != nil {
				t.Fatalf("Delete inside Range = %v", err)
			}
		}
		i++
		return i < 550
	})
	if err != nil || i != 550 {
		t.Fatalf("Range = %v after %d records, want nil after 550", err, i)
	}
	var keys int
	s.Range([]byte("k0599"), func(backend.Record) bool { keys++; return true })
	if keys != 1 {
		t.Errorf("Range(k0599) listed %d records, want 1", keys)
	}
}

func TestSweepChunks(t *testing.T) {
	s := open(t, t.TempDir())
	// k00 … k19: even keys expire at t0, odd keys at t0+1000.
	for i := range 20 {
		exp := t0
		if i%2 == 1 {
			exp = t0 + 1000
		}
		if err := s.Put(fmt.Appendf(nil, "k%02d", i), []byte("v"), exp); err != nil {
			t.Fatal(err)
		}
	}
	steps := []struct {
		budget, removed int
	}{
		{5, 3},  // k00 … k04
		{5, 2},  // k05 … k09
		{1, 1},  // k10
		{9, 4},  // k11 … k19
		{20, 0}, // wrapped: all even keys already gone
	}
	for i, st := range steps {
		n, err := s.Sweep(t0, st.budget)
		if err != nil || n != st.removed {
			t.Fatalf("step %d: Sweep(t0, %d) = %d, %v, want %d", i, st.budget, n, err, st.removed)
		}
	}
	for i := range 20 {
		mustGet(t, s, fmt.Sprintf("k%02d", i), t0, "v", i%2 == 1)
	}
	// At t0+1000 the odd keys expire too.
	if n, err := s.Sweep(t0+1000, 0); err != nil || n != 10 {
		t.Fatalf("Sweep(t0+1000, default) = %d, %v, want 10", n, err)
	}
}

func TestSweepKeepsRewrittenRecord(t *testing.T) {
	s := open(t, t.TempDir())
	for _, k := range []string{"a", "b", "c"} {
		if err := s.Put([]byte(k), []byte("old"), t0); err != nil {
			t.Fatal(err)
		}
	}
	// Between the sweep's read and its delete, "b" gets a fresh record,
	// as the engine would write one after reading "b" as absent, and "c"
	// is deleted.
	s.beforeDelete = func() {
		if err := s.Put([]byte("b"), []byte("new"), t0+100); err != nil {
			t.Error(err)
		}
		if err := s.Delete([]byte("c")); err != nil {
			t.Error(err)
		}
	}
	if n, err := s.Sweep(t0, 10); err != nil || n != 1 {
		t.Fatalf("Sweep = %d, %v, want 1 (a)", n, err)
	}
	mustGet(t, s, "b", t0+1, "new", true)
	// A chunk whose candidates all changed commits nothing.
	s.beforeDelete = func() {
		if err := s.Put([]byte("b"), []byte("newer"), 0); err != nil {
			t.Error(err)
		}
	}
	if n, err := s.Sweep(t0+100, 10); err != nil || n != 0 {
		t.Fatalf("Sweep = %d, %v, want 0", n, err)
	}
	mustGet(t, s, "b", t0+1000, "newer", true)
}

func TestBackgroundSweeper(t *testing.T) {
	var now atomicInt64
	now.Store(t0)
	s, err := Open(t.TempDir(), &Options{SweepInterval: time.Millisecond, SweepBatch: 3, Now: now.Load})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i := range 10 {
		if err := s.Put(fmt.Appendf(nil, "k%d", i), []byte("v"), t0+5); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Put([]byte("live"), []byte("v"), 0); err != nil {
		t.Fatal(err)
	}
	now.Store(t0 + 5)
	deadline := time.Now().Add(10 * time.Second)
	for {
		n := 0
		s.Range(nil, func(backend.Record) bool { n++; return true })
		if n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d records left after 10s of background sweeping, want 1", n)
		}
		time.Sleep(time.Millisecond)
	}
	mustGet(t, s, "live", t0+5, "v", true)
	if err := s.Close(); err != nil {
		t.Fatalf("Close = %v", err)
	}
}

func TestSweepBoundsDisk(t *testing.T) {
	const n, chunk = 50000, 1000
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
