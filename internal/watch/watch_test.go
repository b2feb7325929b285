package watch

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"
)

// lockedBuffer is a bytes.Buffer safe for a logger writing from the
// watcher's goroutine while the test reads.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// target is what a test watches: the contents put in force, and every
// reload's outcome ("apply CONTENT (cause)" or "reject ERR (cause)").
type target struct {
	mu      sync.Mutex
	inForce string
	events  []string
	logs    lockedBuffer
}

func (tg *target) record(e string) {
	tg.mu.Lock()
	defer tg.mu.Unlock()
	tg.events = append(tg.events, e)
}

func (tg *target) got() ([]string, string) {
	tg.mu.Lock()
	defer tg.mu.Unlock()
	return append([]string(nil), tg.events...), tg.inForce
}

// options watches path: Read reads the file (every *.txt of a directory,
// in order), Apply refuses contents starting with "bad".
func (tg *target) options(path string) Options[string] {
	return Options[string]{
		Path: path,
		Read: func() (string, uint64, error) {
			st, err := os.Stat(path)
			if err != nil {
				return "", 0, err
			}
			var data []byte
			if st.IsDir() {
				names, _ := filepath.Glob(filepath.Join(path, "*", "*.txt"))
				top, _ := filepath.Glob(filepath.Join(path, "*.txt"))
				for _, n := range append(top, names...) {
					b, err := os.ReadFile(n)
					if err != nil {
						return "", 0, err
					}
					data = append(data, b...)
				}
			} else if data, err = os.ReadFile(path); err != nil {
				return "", 0, err
			}
			return string(data), xxhash.Sum64(data), nil
		},
		Apply: func(v, cause string) error {
			if strings.HasPrefix(v, "bad") {
				return errors.New("bad contents")
			}
			tg.mu.Lock()
			tg.inForce = v
			tg.mu.Unlock()
			tg.record(fmt.Sprintf("apply %s (%s)", v, cause))
			return nil
		},
		Reject: func(err error, cause string) {
			tg.record(fmt.Sprintf("reject %v (%s)", err, cause))
		},
		Debounce: 20 * time.Millisecond,
		Settle:   20 * time.Millisecond,
		Logger:   slog.New(slog.NewTextHandler(&tg.logs, nil)),
		Name:     "test",
	}
}

func write(t *testing.T, path, data string) {
	t.Helper()
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
	if err := os.WriteFile(tmp, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil { // as editors save
		t.Fatal(err)
	}
}

// eventually polls cond every 10ms for up to 5s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within 5s: %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// settle waits out a debounce and a settle interval and returns the
// events then.
func settle(tg *target) []string {
	time.Sleep(150 * time.Millisecond)
	ev, _ := tg.got()
	return ev
}

// A change is put in force; a rejected one leaves what is in force; the
// bytes read last time, or those in force after a rejection, do nothing,
// the latter logged as loading again; Reload forces.
func TestReloads(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.txt")
	write(t, path, "one")
	digest := xxhash.Sum64String("one")
	tg := &target{inForce: "one"}
	o := tg.options(path)
	o.InForce = &digest
	w, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()

	write(t, path, "two")
	eventually(t, "two in force", func() bool { _, f := tg.got(); return f == "two" })
	write(t, path, "two") // the bytes read last time
	if ev := settle(tg); len(ev) != 1 {
		t.Errorf("an unchanged file reloaded: %q", ev)
	}
	write(t, path, "bad one")
	eventually(t, "the rejection", func() bool { ev, _ := tg.got(); return len(ev) == 2 })
	write(t, path, "bad one") // rejected already: not again
	if ev := settle(tg); len(ev) != 2 {
		t.Errorf("the rejected file, unchanged, reloaded again: %q", ev)
	}
	write(t, path, "two") // what is in force
	eventually(t, "the note", func() bool { return strings.Contains(tg.logs.String(), "the configuration loads again") })
	if ev := settle(tg); len(ev) != 2 {
		t.Errorf("the file back to what is in force reloaded: %q", ev)
	}
	if err := w.Reload(); err != nil {
		t.Fatal(err)
	}
	ev, _ := tg.got()
	want := []string{"apply two (file changed)", "reject bad contents (file changed)", "apply two (explicit)"}
	if strings.Join(ev, "; ") != strings.Join(want, "; ") {
		t.Errorf("events %q, want %q", ev, want)
	}
	if n := strings.Count(tg.logs.String(), "loads again"); n != 1 {
		t.Errorf("loads again logged %d times, want once:\n%s", n, tg.logs.String())
	}
	// A file that cannot be read is rejected; once back as it is in
	// force, it loads again.
	os.Remove(path)
	if err := w.Reload(); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Reload of a missing file = %v, want not-exist", err)
	}
	write(t, path, "two")
	eventually(t, "the second note", func() bool { return strings.Count(tg.logs.String(), "loads again") == 2 })

	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatalf("second Close = %v", err)
	}
	if err := w.Reload(); !errors.Is(err, ErrClosed) {
		t.Errorf("Reload after Close = %v, want ErrClosed", err)
	}
}

// Without InForce, the first change is put in force even if it reads
// what is in force.
func TestUnknownInForce(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.txt")
	write(t, path, "one")
	tg := &target{}
	w, err := New(tg.options(path))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	write(t, path, "one")
	eventually(t, "one in force", func() bool { _, f := tg.got(); return f == "one" })
}

// An event naming another file of the directory is no change, unless the
// path now leads to another file: a ConfigMap's ..data link swapped.
func TestSymlinkSwap(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("symbolic links need privileges on Windows")
	}
	dir := t.TempDir()
	for _, v := range []string{"..v1", "..v2"} {
		os.Mkdir(filepath.Join(dir, v), 0o755)
		write(t, filepath.Join(dir, v, "c.txt"), v)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.Symlink("..v1", filepath.Join(dir, "..data")))
	path := filepath.Join(dir, "c.txt")
	must(os.Symlink(filepath.Join("..data", "c.txt"), path))
	tg := &target{}
	w, err := New(tg.options(path))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	write(t, filepath.Join(dir, "other.txt"), "x")
	if ev := settle(tg); len(ev) != 0 {
		t.Errorf("another file of the directory reloaded: %q", ev)
	}
	must(os.Symlink("..v2", filepath.Join(dir, "..data_tmp")))
	must(os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")))
	eventually(t, "..v2 in force after the link swap", func() bool { _, f := tg.got(); return f == "..v2" })
}

// A directory's subdirectories are watched as Dirs lists them, a new one
// once a reload is in force.
func TestDirectory(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "a.txt"), "a")
	tg := &target{}
	o := tg.options(dir)
	o.Dirs = func() []string {
		dirs := []string{dir}
		subs, _ := filepath.Glob(filepath.Join(dir, "*"))
		for _, s := range subs {
			if st, err := os.Stat(s); err == nil && st.IsDir() {
				dirs = append(dirs, s)
			}
		}
		return dirs
	}
	w, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	// A subdirectory arrives whole, as a rename.
	staged := filepath.Join(t.TempDir(), "sub")
	os.Mkdir(staged, 0o755)
	write(t, filepath.Join(staged, "b.txt"), "b")
	sub := filepath.Join(dir, "sub")
	if err := os.Rename(staged, sub); err != nil {
		t.Fatal(err)
	}
	eventually(t, "ab in force", func() bool { _, f := tg.got(); return f == "ab" })
	write(t, filepath.Join(sub, "b.txt"), "c") // in the subdirectory, now watched
	eventually(t, "ac in force", func() bool { _, f := tg.got(); return f == "ac" })
}

func TestSIGHUP(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("no SIGHUP on Windows")
	}
	path := filepath.Join(t.TempDir(), "c.txt")
	write(t, path, "one")
	tg := &target{}
	o := tg.options(path)
	o.SIGHUP, o.Debounce = true, time.Hour
	w, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	p, err := os.FindProcess(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	eventually(t, "one in force after SIGHUP", func() bool { ev, _ := tg.got(); return len(ev) == 1 && ev[0] == "apply one (SIGHUP)" })
	if !strings.Contains(tg.logs.String(), "test: SIGHUP: reloading the configuration") {
		t.Errorf("the SIGHUP is not logged:\n%s", tg.logs.String())
	}
}

// A change to the file that follows a SIGHUP does not make the SIGHUP wait
// for the debounce (here an hour): the reload asked for waits only for the
// file to settle, and puts the new contents in force.
func TestSIGHUPThenAChange(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("no SIGHUP on Windows")
	}
	path := filepath.Join(t.TempDir(), "c.txt")
	write(t, path, "one")
	tg := &target{}
	o := tg.options(path)
	o.SIGHUP, o.Debounce, o.Settle = true, time.Hour, time.Hour
	tick := make(chan time.Time)
	o.settleC = tick
	w, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	p, err := os.FindProcess(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the SIGHUP logged", func() bool {
		return strings.Contains(tg.logs.String(), "test: SIGHUP: reloading the configuration")
	})
	write(t, path, "two")
	// The watcher settles from the change: the first tick it takes ends
	// the interval after the read of "two", or after "one" if the event is
	// not in yet; keep ending intervals until "two" is in force.
	eventually(t, "two in force after SIGHUP and a change", func() bool {
		select {
		case tick <- time.Now():
		case <-time.After(10 * time.Millisecond):
		}
		_, in := tg.got()
		return in == "two"
	})
}

// A writer that is not atomic (a shell's "cat > file") truncates the file,
// writes a prefix, pauses longer than the debounce, then writes the rest:
// the prefix is read but never put in force, only the whole file, once two
// reads a settle interval apart agree. The test ends each settle interval
// itself.
func TestSettlesBeforeReloading(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.txt")
	write(t, path, "one")
	digest := xxhash.Sum64String("one")
	tg := &target{inForce: "one"}
	o := tg.options(path)
	o.InForce = &digest
	tick := make(chan time.Time)
	o.settleC = tick
	var (
		mu    sync.Mutex
		reads []string
	)
	read := o.Read
	o.Read = func() (string, uint64, error) {
		v, d, err := read()
		mu.Lock()
		reads = append(reads, v)
		mu.Unlock()
		return v, d, err
	}
	readSoFar := func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), reads...)
	}
	w, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()

	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString("tw"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the prefix read", func() bool { return slices.Contains(readSoFar(), "tw") })
	// Longer than the debounce: a watcher that read once would have put
	// the prefix in force by now.
	time.Sleep(300 * time.Millisecond)
	if ev, _ := tg.got(); len(ev) != 0 {
		t.Fatalf("put in force while the file was being written: %q", ev)
	}
	if _, err := f.WriteString("o whole"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the whole file in force", func() bool {
		select {
		case tick <- time.Now():
		default:
		}
		_, f := tg.got()
		return f == "two whole"
	})
	ev, _ := tg.got()
	if want := []string{"apply two whole (file changed)"}; !slices.Equal(ev, want) {
		t.Errorf("events %q, want %q (reads %q)", ev, want, readSoFar())
	}
}

// A read that fails is rejected only once it has failed twice a settle
// interval apart: a file missing for a moment is not a rejection.
func TestSettlesFailedReads(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.txt")
	write(t, path, "one")
	tg := &target{}
	o := tg.options(path)
	tick := make(chan time.Time)
	o.settleC = tick
	w, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	os.Remove(path)
	// The removal's read is pending; end its interval once the file is
	// back: the two reads disagree, and the next agrees.
	time.Sleep(100 * time.Millisecond)
	write(t, path, "two")
	eventually(t, "two in force", func() bool {
		select {
		case tick <- time.Now():
		default:
		}
		_, f := tg.got()
		return f == "two"
	})
	if ev, _ := tg.got(); !slices.Equal(ev, []string{"apply two (file changed)"}) {
		t.Errorf("events %q, want only two put in force", ev)
	}
}

func TestNames(t *testing.T) {
	many := make([]string, 40)
	for i := range many {
		many[i] = fmt.Sprint(i)
	}
	for _, tc := range []struct {
		in   []string
		want string
	}{
		{nil, "none"},
		{[]string{"a", `b"c`}, `"a", "b\"c"`},
		{many, strings.Join(strings.Split(`"`+strings.Join(many[:32], `", "`)+`"`, "\n"), "") + " and 8 more"},
	} {
		if got := Names(tc.in); got != tc.want {
			t.Errorf("Names(%q) = %s, want %s", tc.in, got, tc.want)
		}
	}
}
