package backendtest

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-go/sluice/backend"
)

// Damage says how Damaged damages a durable store and opens it again.
type Damage struct {
	// Open opens the store in dir, with no background work that would
	// race the test (no sweeper).
	Open func(dir string) (backend.Backend, error)
	// Files returns the store's files in dir that may be damaged, each
	// with a name for the kind of file (such as "meta page", "sst",
	// "MANIFEST", "WAL") and the byte range of it to damage.
	Files func(dir string) []Target
	// Rounds is the number of damaged copies to try; zero means 60.
	Rounds int
	// Seed seeds the damage; zero means a fixed seed.
	Seed uint64
}

// Target is a range of a store's file to damage.
type Target struct {
	Kind       string
	Path       string // relative to the store's directory
	From, Upto int64  // the byte range [From, Upto); Upto 0 means the file's end
}

// damageKeys is how many records Damaged writes before damaging a store.
const damageKeys = 3000

// Damaged fills a store, closes it, and then, round after round, copies its
// directory, damages the copy (bytes flipped at random offsets of one of
// its files, or a run of random bytes written over them), and runs on the
// copy what a gateway and an operator run: open, reads of every key,
// writes, a sweep, a range and close. None may panic or end the process: a
// damaged store's call fails with an error, which must wrap
// backend.ErrCorrupt when it says the files are damaged; calls that do not
// meet the damage work. It fails t unless some rounds met the damage (the
// test must not pass by damaging nothing the store reads).
func Damaged(t *testing.T, d Damage) {
	t.Helper()
	rounds := d.Rounds
	if rounds == 0 {
		rounds = 60
	}
	seed := d.Seed
	if seed == 0 {
		seed = 20261203
	}
	rng := rand.New(rand.NewPCG(seed, seed>>1))
	clean := t.TempDir()
	fill(t, d, clean)
	targets := d.Files(clean)
	if len(targets) == 0 {
		t.Fatal("the store wrote no file to damage")
	}
	met, byKind := 0, map[string]int{}
	for round := range rounds {
		target := targets[round%len(targets)]
		dir := filepath.Join(t.TempDir(), "store")
		copyDir(t, clean, dir)
		how := damageFile(t, rng, filepath.Join(dir, target.Path), target)
		what := fmt.Sprintf("round %d: %s %s: %s", round, target.Kind, target.Path, how)
		errs := exercise(t, d, dir, what)
		if len(errs) > 0 {
			met++
			byKind[target.Kind]++
		}
		for _, err := range errs {
			if !errors.Is(err, backend.ErrCorrupt) && !errors.Is(err, backend.ErrClosed) && !strings.Contains(err.Error(), "format") {
				t.Errorf("%s: an error that does not say the store is damaged: %v", what, err)
			}
		}
	}
	t.Logf("%d of %d damaged copies met the damage (by file: %v)", met, rounds, byKind)
	if met == 0 {
		t.Fatalf("no damaged copy failed a call: the damage never reached what the store reads")
	}
}

// fill writes damageKeys records into a new store in dir, some expired,
// and closes it.
func fill(t *testing.T, d Damage, dir string) {
	t.Helper()
	b, err := d.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UnixNano()
	bt, batched := b.(backend.Durable)
	var batch []backend.Write
	for i := range damageKeys {
		exp := now + int64(time.Hour)
		if i%5 == 0 {
			exp = now - 1 // for the sweep
		}
		if batched {
			batch = append(batch, backend.Write{Key: manyKey(i), Value: manyValue(i), ExpiresAt: exp})
			if len(batch) == 500 {
				if err := bt.WriteBatch(batch, true); err != nil {
					t.Fatal(err)
				}
				batch = batch[:0]
			}
			continue
		}
		if err := b.Put(manyKey(i), manyValue(i), exp); err != nil {
			t.Fatal(err)
		}
	}
	if len(batch) > 0 {
		if err := bt.WriteBatch(batch, true); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
}

// exercise opens the damaged store in dir and runs every kind of call on
// it, returning the errors they gave. A panic fails the test with what.
func exercise(t *testing.T, d Damage, dir, what string) (errs []error) {
	t.Helper()
	defer func() {
		if r := recover(); r != nil {
			t.Fatalf("%s: a call panicked: %v", what, r)
		}
	}()
	b, err := d.Open(dir)
	if err != nil {
		return []error{err}
	}
	note := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	now := time.Now().UnixNano()
	for i := range damageKeys {
		_, err := b.Get(manyKey(i), now)
		note(err)
	}
	for i := range 50 {
		note(b.Put(manyKey(i*7), []byte("rewritten"), now+int64(time.Hour)))
	}
	if bt, ok := b.(backend.Durable); ok {
		var w []backend.Write
		for i := range 200 {
			w = append(w, backend.Write{Key: manyKey(damageKeys + i), Value: []byte("new"), ExpiresAt: now + int64(time.Hour)})
		}
		note(bt.WriteBatch(w, true))
	}
	if sw, ok := b.(backend.Sweeper); ok {
		for range 5 {
			_, err := sw.Sweep(now, 1000)
			note(err)
		}
	}
	if r, ok := b.(backend.Durable); ok {
		note(r.Range(nil, func(backend.Record) bool { return true }))
	}
	note(b.Close())
	return errs
}

// damageFile damages target's range of the file at path and says how.
func damageFile(t *testing.T, rng *rand.Rand, path string, target Target) string {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	from, upto := target.From, target.Upto
	if upto <= 0 || upto > info.Size() {
		upto = info.Size()
	}
	if from >= upto {
		from = 0
	}
	if rng.IntN(3) == 0 {
		// A run of garbage, as a torn or misdirected write leaves.
		n := min(int64(64+rng.IntN(2048)), upto-from)
		off := from + rng.Int64N(upto-from-n+1)
		buf := make([]byte, n)
		for i := range buf {
			buf[i] = byte(rng.Uint32())
		}
		if _, err := f.WriteAt(buf, off); err != nil {
			t.Fatal(err)
		}
		return fmt.Sprintf("%d random bytes at %d", n, off)
	}
	n := 1 + rng.IntN(16)
	var at []int64
	for range n {
		off := from + rng.Int64N(upto-from)
		var b [1]byte
		if _, err := f.ReadAt(b[:], off); err != nil {
			t.Fatal(err)
		}
		b[0] ^= byte(1 + rng.IntN(255))
		if _, err := f.WriteAt(b[:], off); err != nil {
			t.Fatal(err)
		}
		at = append(at, off)
	}
	return fmt.Sprintf("%d bytes flipped at %v", n, at)
}

// copyDir copies the regular files of src into a new directory dst.
func copyDir(t *testing.T, src, dst string) {
	t.Helper()
	if err := os.MkdirAll(dst, 0o755); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		in, err := os.Open(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out, err := os.Create(filepath.Join(dst, e.Name()))
		if err == nil {
			_, err = io.Copy(out, in)
			out.Close()
		}
		in.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
}
