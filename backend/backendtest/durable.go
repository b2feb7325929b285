package backendtest

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-go/sluice/backend"
)

// Durable describes a store on disk to RunDurable and DurableChild.
//
// The backends it opens must implement backend.Durable, whose Sweep examines at most budget
// records (a default number when budget is zero or less) from the key where
// the previous call stopped, deletes those expired at now or corrupt, and
// after the last record starts over from the first.
type Durable struct {
	// Open opens the store in dir in the named configuration and returns
	// the error of the store's own Open unchanged. It must accept "": the
	// store's default options with the background sweeper off. Fast and
	// Crash may name other configurations.
	Open func(dir, config string) (backend.Backend, error)

	// Fast names a configuration, sweeper off, for the tests that make
	// many single writes and do not check durability (e.g. one that does
	// not sync). Empty means "".
	Fast string

	// OpenSweeping opens the store in dir with its background sweeper on a
	// millisecond tick, examining 3 records per chunk and reading the clock
	// from now.
	OpenSweeping func(dir string, now func() int64) (backend.Backend, error)

	// Crash lists the runs of the SIGKILL test; see CrashCase.
	Crash []CrashCase

	// PutRaw stores the bytes stored under key in the store b, bypassing
	// the expiry framing: the store's test files reach its database to
	// plant corrupt values.
	PutRaw func(b backend.Backend, key, stored []byte) error

	// BeforeDelete makes b's sweep chunks call hook after they have chosen
	// their candidates and before they delete them.
	BeforeDelete func(b backend.Backend, hook func())
}

// CrashCase is one run of the SIGKILL test: a child process opens the store
// in Config, makes Writes, waits Wait, says so and is killed with SIGKILL;
// the test then finds every record on re-open.
type CrashCase struct {
	Name   string        // the subtest's name
	Config string        // the configuration the child opens the store in
	Writes string        // "batch-sync", "batch-nosync" (one WriteBatch), or "put" (one Put each)
	Wait   time.Duration // how long the child waits after its writes before it is killed
}

// childEnv tells a re-executed test binary to act as the child process.
const childEnv = "SLUICE_DURABLE_CHILD"

// t0 is the fixed origin of the durable tests' timeline.
var t0 = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()

// RunDurable runs the tests every durable store must pass, beyond Run's:
// persistence across Close and Open, WriteBatch (ordered, all or nothing,
// not keeping its arguments), the extra methods after Close, refusing a
// directory another Store or another process holds, refusing an
// unwritable directory, Range in chunks, corrupt stored values, Sweep in
// chunks and around a concurrent rewrite, the background sweeper, and
// records surviving a SIGKILL of the writing process.
//
// The SIGKILL and other-process tests re-execute the test binary as a child
// process running only the test TestHelperProcess, which the store's
// package must therefore define as
//
//	func TestHelperProcess(t *testing.T) { backendtest.DurableChild(t, d) }
//
// with the same Durable. They are skipped with -short.
func RunDurable(t *testing.T, d Durable) {
	t.Helper()
	tests := []struct {
		name string
		fn   func(t *testing.T, d Durable)
	}{
		{"Persistence", testPersistence},
		{"WriteBatchOrdered", testWriteBatchOrdered},
		{"WriteBatchAllOrNothing", testWriteBatchAllOrNothing},
		{"ClosedExtras", testClosedExtras},
		{"SecondOpenLocked", testSecondOpenLocked},
		{"UnwritableDir", testUnwritableDir},
		{"Range", testRange},
		{"CorruptValues", testCorruptValues},
		{"SweepChunks", testSweepChunks},
		{"SweepKeepsRewrittenRecord", testSweepKeepsRewrittenRecord},
		{"BackgroundSweeper", testBackgroundSweeper},
		{"WriteBatchSurvivesKill", testWriteBatchSurvivesKill},
		{"OpenLockedByOtherProcess", testOpenLockedByOtherProcess},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { tt.fn(t, d) })
	}
}

// capable returns b as a durable store, failing t when it is not one.
func capable(t testing.TB, b backend.Backend) backend.Durable {
	t.Helper()
	s, ok := b.(backend.Durable)
	if !ok {
		t.Fatalf("%T does not implement backend.Durable", b)
	}
	return s
}

// openConfig opens dir in config and closes it at cleanup.
func openConfig(t testing.TB, d Durable, dir, config string) backend.Durable {
	t.Helper()
	b, err := d.Open(dir, config)
	if err != nil {
		t.Fatalf("Open(%q) = %v", dir, err)
	}
	t.Cleanup(func() { b.Close() })
	return capable(t, b)
}

// openDir opens dir in the default configuration and closes it at cleanup.
func openDir(t testing.TB, d Durable, dir string) backend.Durable {
	t.Helper()
	return openConfig(t, d, dir, "")
}

// MustGet checks that b.Get(key, now) returns want, or nothing when
// !present, and stops t otherwise. The durable stores' own tests use it too.
func MustGet(t testing.TB, b backend.Backend, key string, now int64, want string, present bool) {
	t.Helper()
	got, err := b.Get([]byte(key), now)
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

func testPersistence(t *testing.T, d Durable) {
	dir := t.TempDir()
	s := openDir(t, d, dir)
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

	s = openDir(t, d, dir)
	steps := []struct {
		key     string
		now     int64
		want    string
		present bool
		expires int64 // Load's expiry when present
	}{
		{"forever", t0 + 1e18, "f", true, 0},
		{"short", t0 + 9, "s", true, t0 + 10},
		{"short", t0 + 10, "", false, 0},
		{"batched", t0 + 99, "b", true, t0 + 100},
		{"batched", t0 + 100, "", false, 0},
		{"gone", t0, "", false, 0},
	}
	for i, st := range steps {
		got, err := s.Get([]byte(st.key), st.now)
		if err != nil || (got != nil) != st.present || string(got) != st.want {
			t.Errorf("step %d: Get(%q, t0%+d) = %q, %v, want %q (present=%t)", i, st.key, st.now-t0, got, err, st.want, st.present)
		}
		got, exp, err := s.Load([]byte(st.key), st.now)
		if err != nil || (got != nil) != st.present || string(got) != st.want || exp != st.expires {
			t.Errorf("step %d: Load(%q, t0%+d) = %q, %d, %v, want %q, %d (present=%t)", i, st.key, st.now-t0, got, exp, err, st.want, st.expires, st.present)
		}
	}
}

func testWriteBatchOrdered(t *testing.T, d Durable) {
	s := openDir(t, d, t.TempDir())
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
		MustGet(t, s, "a", t0, "3", true)
		MustGet(t, s, "b", t0, "", false)
		MustGet(t, s, "old", t0, "", false)
		MustGet(t, s, "c", t0, "4", true)
		MustGet(t, s, "c", t0+5, "", false)
	}
	// The batch does not keep the caller's slices.
	k, v := []byte("reused"), []byte("value")
	if err := s.WriteBatch([]backend.Write{{Key: k, Value: v}}, false); err != nil {
		t.Fatal(err)
	}
	copy(k, "xxxxxx")
	copy(v, "yyyyy")
	MustGet(t, s, "reused", t0, "value", true)
}

func testWriteBatchAllOrNothing(t *testing.T, d Durable) {
	s := openDir(t, d, t.TempDir())
	err := s.WriteBatch([]backend.Write{
		{Key: []byte("a"), Value: []byte("1")},
		{Key: nil, Value: []byte("2")},
	}, true)
	if !errors.Is(err, backend.ErrEmptyKey) {
		t.Fatalf("WriteBatch with an empty key = %v, want ErrEmptyKey", err)
	}
	MustGet(t, s, "a", t0, "", false)
	if err := s.WriteBatch(nil, true); err != nil {
		t.Fatalf("WriteBatch(nil) = %v", err)
	}
}

func testClosedExtras(t *testing.T, d Durable) {
	s := openDir(t, d, t.TempDir())
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

func testSecondOpenLocked(t *testing.T, d Durable) {
	dir := t.TempDir()
	s := openDir(t, d, dir)
	for _, other := range []string{dir, dir + "/.", filepath.Join(dir, "..", filepath.Base(dir))} {
		s2, err := d.Open(other, "")
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
	openDir(t, d, dir)
}

func testUnwritableDir(t *testing.T, d Durable) {
	t.Run("under a file", func(t *testing.T) {
		// A path under a regular file cannot be created, even by root.
		f := filepath.Join(t.TempDir(), "file")
		if err := os.WriteFile(f, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
		for _, dir := range []string{f, filepath.Join(f, "sub")} {
			s, err := d.Open(dir, "")
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
			s, err := d.Open(dir, "")
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

func testRange(t *testing.T, d Durable) {
	s := openConfig(t, d, t.TempDir(), d.Fast)
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

// testCorruptValues plants stored values too short to hold an expiry: they
// read as absent, Range lists them with their raw bytes at ExpiresAt 0, and
// a sweep removes them.
func testCorruptValues(t *testing.T, d Durable) {
	if d.PutRaw == nil {
		t.Fatal("Durable.PutRaw is not set")
	}
	s := openDir(t, d, t.TempDir())
	raw := map[string][]byte{"short": []byte("1234567"), "empty": {}, "one": {0xff}}
	for k, v := range raw {
		if err := d.PutRaw(s, []byte(k), v); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Put([]byte("good"), []byte("g"), 0); err != nil {
		t.Fatal(err)
	}
	for k := range raw {
		MustGet(t, s, k, t0, "", false)
		if v, exp, err := s.Load([]byte(k), t0); v != nil || exp != 0 || err != nil {
			t.Errorf("Load(%q) = %q, %d, %v, want nothing", k, v, exp, err)
		}
	}
	var got []string
	err := s.Range(nil, func(r backend.Record) bool {
		got = append(got, fmt.Sprintf("%s=%q@%d", r.Key, r.Value, r.ExpiresAt))
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{`empty=""@0`, `good="g"@0`, `one="\xff"@0`, `short="1234567"@0`}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("Range = %v, want %v", got, want)
	}
	if n, err := s.Sweep(t0, 100); err != nil || n != len(raw) {
		t.Errorf("Sweep = %d, %v, want %d corrupt records removed", n, err, len(raw))
	}
	got = got[:0]
	s.Range(nil, func(r backend.Record) bool { got = append(got, string(r.Key)); return true })
	if fmt.Sprint(got) != "[good]" {
		t.Errorf("Range after Sweep = %v, want [good]", got)
	}
	// A corrupt value is overwritten like any other.
	if err := d.PutRaw(s, []byte("short"), []byte("1")); err != nil {
		t.Fatal(err)
	}
	if err := s.Put([]byte("short"), []byte("s"), 0); err != nil {
		t.Fatal(err)
	}
	MustGet(t, s, "short", t0, "s", true)
}

func testSweepChunks(t *testing.T, d Durable) {
	s := openDir(t, d, t.TempDir())
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
		MustGet(t, s, fmt.Sprintf("k%02d", i), t0, "v", i%2 == 1)
	}
	// At t0+1000 the odd keys expire too.
	if n, err := s.Sweep(t0+1000, 0); err != nil || n != 10 {
		t.Fatalf("Sweep(t0+1000, default) = %d, %v, want 10", n, err)
	}
}

// testSweepKeepsRewrittenRecord changes records between a sweep chunk's
// read and its delete: a record rewritten there is kept.
func testSweepKeepsRewrittenRecord(t *testing.T, d Durable) {
	if d.BeforeDelete == nil {
		t.Fatal("Durable.BeforeDelete is not set")
	}
	s := openDir(t, d, t.TempDir())
	for _, k := range []string{"a", "b", "c"} {
		if err := s.Put([]byte(k), []byte("old"), t0); err != nil {
			t.Fatal(err)
		}
	}
	// Between the sweep's read and its delete, "b" gets a fresh record,
	// as the engine would write one after reading "b" as absent, and "c"
	// is deleted.
	d.BeforeDelete(s, func() {
		if err := s.Put([]byte("b"), []byte("new"), t0+100); err != nil {
			t.Error(err)
		}
		if err := s.Delete([]byte("c")); err != nil {
			t.Error(err)
		}
	})
	if n, err := s.Sweep(t0, 10); err != nil || n != 1 {
		t.Fatalf("Sweep = %d, %v, want 1 (a)", n, err)
	}
	MustGet(t, s, "b", t0+1, "new", true)
	MustGet(t, s, "c", t0-1, "", false)
	// A chunk whose candidates all changed removes nothing.
	d.BeforeDelete(s, func() {
		if err := s.Put([]byte("b"), []byte("newer"), 0); err != nil {
			t.Error(err)
		}
	})
	if n, err := s.Sweep(t0+100, 10); err != nil || n != 0 {
		t.Fatalf("Sweep = %d, %v, want 0", n, err)
	}
	MustGet(t, s, "b", t0+1000, "newer", true)
}

func testBackgroundSweeper(t *testing.T, d Durable) {
	var now atomic.Int64
	now.Store(t0)
	b, err := d.OpenSweeping(t.TempDir(), now.Load)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	s := capable(t, b)
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
	MustGet(t, s, "live", t0+5, "v", true)
	if err := s.Close(); err != nil {
		t.Fatalf("Close = %v", err)
	}
}

// testWriteBatchSurvivesKill writes in a child process, kills the child with
// SIGKILL as soon as the writes have returned (and the case's Wait has
// passed), and finds every record on re-open. backend.Durable promises this
// for a synced batch, and for an unsynced one on a crash of the process; a
// store may promise it for more, as its Durable.Crash cases say.
func testWriteBatchSurvivesKill(t *testing.T, d Durable) {
	if testing.Short() {
		t.Skip("starts child processes")
	}
	if len(d.Crash) == 0 {
		t.Fatal("Durable.Crash lists no cases")
	}
	const n = 500
	for _, c := range d.Crash {
		t.Run(c.Name, func(t *testing.T) {
			dir := t.TempDir()
			kill(t, startChild(t, c.Writes, c.Config, c.Wait, dir, n))
			s := openDir(t, d, dir)
			for _, w := range crashWrites(n) {
				got, err := s.Get(w.Key, t0)
				if err != nil || string(got) != string(w.Value) {
					t.Fatalf("after SIGKILL: Get(%q) = %q, %v, want %q", w.Key, got, err, w.Value)
				}
				if got, _ := s.Get(w.Key, w.ExpiresAt); got != nil {
					t.Fatalf("after SIGKILL: Get(%q) at its expiry = %q, want absent", w.Key, got)
				}
			}
		})
	}
}

// testOpenLockedByOtherProcess opens a directory a child process holds.
func testOpenLockedByOtherProcess(t *testing.T, d Durable) {
	if testing.Short() {
		t.Skip("starts a child process")
	}
	dir := t.TempDir()
	cmd := startChild(t, "hold", "", 0, dir, 0)
	s, err := d.Open(dir, "")
	if err == nil {
		s.Close()
		t.Fatal("Open of a directory another process holds succeeded")
	}
	if !errors.Is(err, backend.ErrLocked) || !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), "another process holds its lock") {
		t.Fatalf("Open = %v, want ErrLocked naming %q and another process", err, dir)
	}
	t.Logf("Open error: %v", err)
	kill(t, cmd)
	openDir(t, d, dir) // the lock dies with its process
}

// DurableChild is the child process of RunDurable's SIGKILL and
// other-process tests; call it from a test named TestHelperProcess (see
// RunDurable). Run by go test, it skips t. In the child, it opens the store
// in $SLUICE_DIR, makes the writes $SLUICE_DURABLE_CHILD names ("hold" for
// none), prints "ok" and then blocks until its stdin closes or it is
// killed; it never returns.
func DurableChild(t *testing.T, d Durable) {
	mode := os.Getenv(childEnv)
	if mode == "" {
		t.Skip("child process for the crash and lock tests")
	}
	fail := func(err error) {
		fmt.Println("error:", err)
		os.Exit(2)
	}
	b, err := d.Open(os.Getenv("SLUICE_DIR"), os.Getenv("SLUICE_CONFIG"))
	if err != nil {
		fail(err)
	}
	s, ok := b.(backend.Durable)
	if !ok {
		fail(fmt.Errorf("%T does not implement backend.Durable", b))
	}
	n, _ := strconv.Atoi(os.Getenv("SLUICE_N"))
	wait, err := time.ParseDuration(os.Getenv("SLUICE_WAIT"))
	if err != nil {
		fail(err)
	}
	switch mode {
	case "hold":
	case "put":
		for _, w := range crashWrites(n) {
			if err := s.Put(w.Key, w.Value, w.ExpiresAt); err != nil {
				fail(err)
			}
		}
	case "batch-sync", "batch-nosync":
		if err := s.WriteBatch(crashWrites(n), mode == "batch-sync"); err != nil {
			fail(err)
		}
	default:
		fail(fmt.Errorf("unknown mode %q", mode))
	}
	time.Sleep(wait)
	fmt.Println("ok")
	io.Copy(io.Discard, os.Stdin)
	os.Exit(0)
}

// crashWrites is the batch the child writes before it is killed.
func crashWrites(n int) []backend.Write {
	w := make([]backend.Write, n)
	for i := range w {
		w[i] = backend.Write{Key: fmt.Appendf(nil, "user:%06d", i), Value: fmt.Appendf(nil, "record-%d", i), ExpiresAt: t0 + 1 + int64(i)}
	}
	return w
}

// startChild runs TestHelperProcess in a child process in mode and waits
// for its "ok". The child is killed at cleanup if still running.
func startChild(t *testing.T, mode, config string, wait time.Duration, dir string, n int) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), childEnv+"="+mode, "SLUICE_DIR="+dir, "SLUICE_CONFIG="+config,
		"SLUICE_N="+strconv.Itoa(n), "SLUICE_WAIT="+wait.String())
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close()
		cmd.Process.Kill()
		cmd.Wait()
	})
	line := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if l := sc.Text(); l == "ok" || strings.HasPrefix(l, "error:") {
				line <- l
				break
			}
		}
		close(line)
		io.Copy(io.Discard, stdout)
	}()
	select {
	case l := <-line:
		if l != "ok" {
			t.Fatalf("child %s: %q, want ok (does the package's TestHelperProcess call backendtest.DurableChild?)", mode, l)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("child %s: no answer after 30s", mode)
	}
	return cmd
}

// kill sends SIGKILL to the child and waits for it to die.
func kill(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	err := cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("child exited with %v, want killed by SIGKILL", err)
	}
}
