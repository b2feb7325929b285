package backendtest

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
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
	// Kinds are the kinds of file (Target.Kind) that must be among Files'
	// targets and whose damage some round must meet: a call fails, or a
	// record reads back other than it was written. The test fails when one
	// is missing, so that it cannot pass without damaging, say, a WAL it
	// claims to. Nil means every kind Files returns.
	Kinds []string
	// Engine, when set, wraps b in a rate-limit engine (package engine,
	// which backendtest may not import) and returns its decision for a
	// caller (engine.Apply, spending one unit of a budget that does not
	// refill during the test) with the units left, and its Close, which
	// closes b. Damaged then fills the store with decisions as well as
	// records, and decides every caller again on each damaged copy: a
	// caller whose spending was lost (more left than before) is a record
	// that read back other than it was written.
	Engine func(b backend.Backend) (decide func(caller string) (remaining int64, err error), close func() error, err error)
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

// expiredKey reports whether Damaged writes record i (manyKey(i)) already
// expired, for the sweep: every fifth of the first damageKeys.
func expiredKey(i int) bool { return i < damageKeys && i%5 == 0 }

// Damaged fills a store, closes it, and then, round after round, copies its
// directory, damages the copy (bytes flipped at random offsets of one of
// its files, or a run of random bytes written over them), and runs on the
// copy what a gateway and an operator run: open, reads of every key,
// writes, a sweep, a range, an engine's decisions (Damage.Engine) and
// close. None may panic or end the process: a damaged store's call fails
// with an error, which must wrap backend.ErrCorrupt (or backend.ErrClosed,
// for a call after the store gave up); calls that do not meet the damage
// work. It fails t unless every kind of file (Damage.Kinds) was damaged,
// its bytes changed, in some round whose calls met the damage (the test
// must not pass by damaging nothing the store reads).
func Damaged(t *testing.T, d Damage) {
	t.Helper()
	rounds := d.Rounds
	if rounds == 0 {
		rounds = 60
	}
	seed := d.Seed
	if seed == 0 {
		seed = 20261203
		if e := os.Getenv("DSEED"); e != "" {
			fmt.Sscan(e, &seed)
		}
	}
	rng := rand.New(rand.NewPCG(seed, seed>>1))
	clean := t.TempDir()
	fill(t, d, clean)
	targets := d.Files(clean)
	if len(targets) == 0 {
		t.Fatal("the store wrote no file to damage")
	}
	kinds := d.Kinds
	if kinds == nil {
		for _, tg := range targets {
			if !slices.Contains(kinds, tg.Kind) {
				kinds = append(kinds, tg.Kind)
			}
		}
	} else {
		for _, k := range kinds {
			if !slices.ContainsFunc(targets, func(tg Target) bool { return tg.Kind == k }) {
				t.Errorf("the store in %s has no %s to damage: the test would not damage one", clean, k)
			}
		}
	}
	met, damaged, byKind := 0, map[string]int{}, map[string]int{}
	for round := range rounds {
		target := targets[round%len(targets)]
		dir := filepath.Join(t.TempDir(), "store")
		CopyDir(t, clean, dir)
		how := DamageFile(t, rng, filepath.Join(dir, target.Path), target)
		if sameFile(t, filepath.Join(clean, target.Path), filepath.Join(dir, target.Path)) {
			continue // the random bytes were those already there
		}
		damaged[target.Kind]++
		what := fmt.Sprintf("round %d: %s %s: %s", round, target.Kind, target.Path, how)
		errs, differ := exercise(t, d, dir, what)
		if len(errs) > 0 || differ > 0 {
			met++
			byKind[target.Kind]++
		}
		for _, err := range errs {
			if !errors.Is(err, backend.ErrCorrupt) && !errors.Is(err, backend.ErrClosed) {
				t.Errorf("%s: an error that does not wrap backend.ErrCorrupt: %v", what, err)
			}
		}
	}
	t.Logf("%d of %d damaged copies met the damage (damaged by file: %v; met: %v)", met, rounds, damaged, byKind)
	for _, k := range kinds {
		if byKind[k] == 0 {
			t.Errorf("no round met the damage of a %s (%d damaged): its damage never reached what the store reads", k, damaged[k])
		}
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
		if expiredKey(i) {
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
	// A tail of single writes, too few to be flushed out of a store's log
	// (Pebble's WAL) before it is closed, so that the log holds records
	// it must read back.
	for i := damageKeys; i < damageKeys+damageTail; i++ {
		if err := b.Put(manyKey(i), manyValue(i), now+int64(time.Hour)); err != nil {
			t.Fatal(err)
		}
	}
	closeStore := b.Close
	if d.Engine != nil {
		decide, closeEngine, err := d.Engine(b)
		if err != nil {
			t.Fatal(err)
		}
		for i := range damageCallers {
			if _, err := decide(damageCaller(i)); err != nil {
				t.Fatal(err)
			}
		}
		closeStore = closeEngine
	}
	if err := closeStore(); err != nil {
		t.Fatal(err)
	}
}

// damageTail is how many records fill writes one at a time, last, and
// damageCallers how many callers an engine decides over the store.
const (
	damageTail    = 100
	damageCallers = 100
)

func damageCaller(i int) string { return fmt.Sprintf("caller-%d", i) }

// exercise opens the damaged store in dir and runs every kind of call on
// it, returning the errors they gave and how many records read back other
// than they were written (missing or changed) without an error. A panic
// fails the test with what.
func exercise(t *testing.T, d Damage, dir, what string) (errs []error, differ int) {
	t.Helper()
	defer func() {
		if r := recover(); r != nil {
			t.Fatalf("%s: a call panicked: %v", what, r)
		}
	}()
	b, err := d.Open(dir)
	if err != nil {
		return []error{err}, 0
	}
	note := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	now := time.Now().UnixNano()
	for i := range damageKeys + damageTail {
		v, err := b.Get(manyKey(i), now)
		note(err)
		if err == nil && !expiredKey(i) && !bytes.Equal(v, manyValue(i)) {
			differ++
		}
	}
	for i := range 50 {
		note(b.Put(manyKey(i*7), []byte("rewritten"), now+int64(time.Hour)))
	}
	if bt, ok := b.(backend.Durable); ok {
		var w []backend.Write
		for i := range 200 {
			w = append(w, backend.Write{Key: manyKey(damageKeys + damageTail + i), Value: []byte("new"), ExpiresAt: now + int64(time.Hour)})
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
	closeStore := b.Close
	if d.Engine != nil {
		decide, closeEngine, err := d.Engine(b)
		if err != nil {
			note(err)
		} else {
			// Each caller spent one unit in fill: its decision now leaves
			// one less than a new caller's does.
			fresh, err := decide(damageCaller(damageCallers))
			if note(err); err != nil {
				fresh = -1
			}
			for i := range damageCallers {
				left, err := decide(damageCaller(i))
				note(err)
				if err == nil && fresh >= 0 && left != fresh-1 {
					differ++
				}
			}
			closeStore = closeEngine
		}
	}
	note(closeStore())
	return errs, differ
}

// sameFile reports whether the files at a and b hold the same bytes.
func sameFile(t *testing.T, a, b string) bool {
	t.Helper()
	da, err := os.ReadFile(a)
	if err != nil {
		t.Fatal(err)
	}
	db, err := os.ReadFile(b)
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Equal(da, db)
}

// DamageFile damages target's range of the file at path (its Path is not
// read) with rng: a run of random bytes, as a torn or misdirected write
// leaves, or bytes flipped. It says what it did.
func DamageFile(t *testing.T, rng *rand.Rand, path string, target Target) string {
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

// CopyDir copies the regular files of src into a new directory dst.
func CopyDir(t *testing.T, src, dst string) {
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
