// Package backendtest is the conformance suite every Sluice backend must
// pass unchanged: call Run from the backend's own tests.
//
// The suite checks the backend.Backend contract (copies, overwrites, expiry,
// empty keys, Close, binary and large records, many keys, concurrent use),
// the locked operations of a backend.Striped, the counts of a
// backend.Stats and the sweeps of a backend.Sweeper, and a model property: random sequences of operations and
// clock steps over a few keys, run with pgregory.net/rapid, give the same
// answers as a plain Go map with expiry. Run the suite under -race.
//
// Time in the suite starts an hour ahead of the wall clock. A backend whose
// sweeper reads the real clock therefore never removes a record the suite
// still considers live, and records the suite considers expired may be
// swept or not, as the contract allows.
//
// RunDurable checks what a backend.Durable adds (persistence, batches,
// Load, Range, sweeping on disk, surviving a crash), RunSwapper the
// backend.Swapper contract (atomic multi-key compare-and-swap, groups,
// the watch of deletions, Range). SwapStore is an in-process Swapper, with hooks for
// delays and for writes slipped in between the engine's read and its
// commit, on which the engine's compare-and-swap path is tested.
package backendtest

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/sluice-go/sluice/backend"
)

// Run runs the conformance suite against the backends open returns. open must
// return a new, empty backend on each call: the suite opens one per subtest
// and one per run of the model property. open may register cleanups on t;
// the suite closes every backend it opens (a second Close must return nil
// anyway). Failures name the call, the key and both records, as in
// Get("k") = 0102, want 0103.
func Run(t *testing.T, open func(t *testing.T) backend.Backend) {
	t.Helper()
	fresh := func(t *testing.T) backend.Backend {
		t.Helper()
		b := open(t)
		t.Cleanup(func() { b.Close() })
		return b
	}
	tests := []struct {
		name string
		fn   func(t *testing.T, b backend.Backend)
	}{
		{"GetMissing", testGetMissing},
		{"PutGet", testPutGet},
		{"EmptyValue", testEmptyValue},
		{"GetReturnsCopy", testGetReturnsCopy},
		{"PutCopiesArguments", testPutCopiesArguments},
		{"Overwrite", testOverwrite},
		{"Delete", testDelete},
		{"Expiry", testExpiry},
		{"PutOverExpired", testPutOverExpired},
		{"EmptyKey", testEmptyKey},
		{"Close", testClose},
		{"ManyKeys", testManyKeys},
		{"BinaryData", testBinaryData},
		{"LargeValues", testLargeValues},
		{"ConcurrentDistinctKeys", testConcurrentDistinctKeys},
		{"ConcurrentSameKey", testConcurrentSameKey},
		{"Counter", testCounter},
		{"Sweep", testSweep},
		{"Striped/Stripes", testStripes},
		{"Striped/LockedAlias", testLockedAlias},
		{"Striped/LockedResize", testLockedResize},
		{"Striped/LockedExpiry", testLockedExpiry},
		{"Striped/LockedAgreesWithPlain", testLockedAgreesWithPlain},
		{"Striped/LockedCollision", testLockedCollision},
		{"Striped/LockedCollisionMany", testLockedCollisionMany},
		{"Striped/ConcurrentLockedCounter", testConcurrentLockedCounter},
		{"Striped/ExtendLocked", testExtendLocked},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.fn(t, fresh(t))
		})
	}
	t.Run("Model", func(t *testing.T) { testModel(t, open) })
}

// base returns the suite's time origin: an hour past the wall clock.
func base() int64 { return time.Now().Add(time.Hour).UnixNano() }

// show formats a record for a failure message, telling nil from empty.
func show(v []byte) string {
	if v == nil {
		return "nil"
	}
	if len(v) > 64 {
		return fmt.Sprintf("%x… (%d bytes)", v[:32], len(v))
	}
	return fmt.Sprintf("%x", v)
}

func put(t *testing.T, b backend.Backend, key, value []byte, expiresAt int64) {
	t.Helper()
	if err := b.Put(key, value, expiresAt); err != nil {
		t.Fatalf("Put(%q, %s, %d) = %v, want nil", key, show(value), expiresAt, err)
	}
}

func del(t *testing.T, b backend.Backend, key []byte) {
	t.Helper()
	if err := b.Delete(key); err != nil {
		t.Fatalf("Delete(%q) = %v, want nil", key, err)
	}
}

// wantGet checks that Get(key, now) returns want, nil meaning absent.
func wantGet(t *testing.T, b backend.Backend, key []byte, now int64, want []byte) {
	t.Helper()
	got, err := b.Get(key, now)
	if err != nil {
		t.Fatalf("Get(%q) error = %v, want nil", key, err)
	}
	if want == nil {
		if got != nil {
			t.Fatalf("Get(%q) = %s, want nil (absent)", key, show(got))
		}
		return
	}
	if got == nil || !bytes.Equal(got, want) {
		t.Fatalf("Get(%q) = %s, want %s", key, show(got), show(want))
	}
}

func striped(t *testing.T, b backend.Backend) backend.Striped {
	t.Helper()
	sb, ok := b.(backend.Striped)
	if !ok {
		t.Skipf("%T does not implement backend.Striped", b)
	}
	return sb
}

func stripeOf(sb backend.Striped, hash uint64) int {
	return int(hash & uint64(sb.Stripes()-1))
}

func testGetMissing(t *testing.T, b backend.Backend) {
	now := base()
	wantGet(t, b, []byte("missing"), now, nil)
	put(t, b, []byte("present"), []byte("v"), 0)
	wantGet(t, b, []byte("missing"), now, nil)
	wantGet(t, b, []byte("presen"), now, nil)
	wantGet(t, b, []byte("present!"), now, nil)
}

func testPutGet(t *testing.T, b backend.Backend) {
	now := base()
	recs := map[string]string{
		"k":                   "v",
		"user:42":             "0123456789abcdef0",
		"a-somewhat-long-key": "a value that is longer than the key it lives under",
	}
	for k, v := range recs {
		put(t, b, []byte(k), []byte(v), 0)
	}
	for k, v := range recs {
		wantGet(t, b, []byte(k), now, []byte(v))
	}
}

func testEmptyValue(t *testing.T, b backend.Backend) {
	put(t, b, []byte("k"), []byte{}, 0)
	got, err := b.Get([]byte("k"), base())
	if err != nil || len(got) != 0 {
		t.Fatalf("Get(%q) = %s, %v, want an empty record and nil", "k", show(got), err)
	}
}

func testGetReturnsCopy(t *testing.T, b backend.Backend) {
	now := base()
	key, want := []byte("k"), []byte("0123456789abcdef0")
	put(t, b, key, want, 0)
	got, err := b.Get(key, now)
	if err != nil {
		t.Fatalf("Get(%q) error = %v", key, err)
	}
	for i := range got {
		got[i] ^= 0xff
	}
	_ = append(got[:len(got):len(got)], 'x')
	wantGet(t, b, key, now, want)
}

func testPutCopiesArguments(t *testing.T, b backend.Backend) {
	now := base()
	kbuf := []byte("key-one")
	vbuf := []byte("value-one")
	put(t, b, kbuf, vbuf, 0)
	// Reuse both buffers for a second record, as a caller may.
	copy(kbuf, "key-two")
	copy(vbuf, "value-two")
	put(t, b, kbuf, vbuf, 0)
	copy(kbuf, "key-xxx")
	copy(vbuf, "value-xxx")
	wantGet(t, b, []byte("key-one"), now, []byte("value-one"))
	wantGet(t, b, []byte("key-two"), now, []byte("value-two"))
	wantGet(t, b, []byte("key-xxx"), now, nil)
}

func testOverwrite(t *testing.T, b backend.Backend) {
	now := base()
	key := []byte("k")
	put(t, b, []byte("before"), []byte("neighbour-1"), 0)
	steps := []struct {
		name string
		n    int
	}{
		{"first", 17},
		{"same length", 17},
		{"shorter", 5},
		{"longer than first", 40},
		{"one byte", 1},
		{"back to first", 17},
		{"much longer", 1000},
		{"same as much longer", 1000},
		{"shorter again", 16},
	}
	for i, st := range steps {
		v := bytes.Repeat([]byte{byte('a' + i)}, st.n)
		put(t, b, key, v, 0)
		wantGet(t, b, key, now, v)
		if t.Failed() {
			t.Fatalf("step %d (%s) failed", i, st.name)
		}
	}
	put(t, b, []byte("after"), []byte("neighbour-2"), 0)
	wantGet(t, b, []byte("before"), now, []byte("neighbour-1"))
	wantGet(t, b, []byte("after"), now, []byte("neighbour-2"))
}

func testDelete(t *testing.T, b backend.Backend) {
	now := base()
	key := []byte("k")
	del(t, b, []byte("never-stored"))
	put(t, b, key, []byte("v"), 0)
	put(t, b, []byte("other"), []byte("o"), 0)
	del(t, b, key)
	wantGet(t, b, key, now, nil)
	del(t, b, key)
	wantGet(t, b, []byte("other"), now, []byte("o"))
	put(t, b, key, []byte("again"), 0)
	wantGet(t, b, key, now, []byte("again"))
}

func testExpiry(t *testing.T, b backend.Backend) {
	now := base()
	tests := []struct {
		name      string
		expiresAt int64
		present   bool
	}{
		{"long past", now - int64(time.Minute), false},
		{"just past", now - 1, false},
		{"exactly now", now, false},
		{"just ahead", now + 1, true},
		{"far ahead", now + int64(time.Hour), true},
		{"zero never expires", 0, true},
		{"negative never expires", -1, true},
		{"very negative never expires", -now, true},
	}
	for i, tt := range tests {
		key := []byte(fmt.Sprintf("k%d", i))
		val := []byte(tt.name)
		put(t, b, key, val, tt.expiresAt)
		want := val
		if !tt.present {
			want = nil
		}
		got, err := b.Get(key, now)
		if err != nil {
			t.Fatalf("%s: Get(%q) error = %v", tt.name, key, err)
		}
		if (want == nil) != (got == nil) || !bytes.Equal(got, want) {
			t.Errorf("%s: expiresAt=now%+d: Get(%q) = %s, want %s", tt.name, tt.expiresAt-now, key, show(got), show(want))
		}
	}
	// Time moves on: a record expiring at now+1 is gone at now+1.
	wantGet(t, b, []byte("k3"), now+1, nil)
	wantGet(t, b, []byte("k4"), now+1, []byte("far ahead"))
	wantGet(t, b, []byte("k5"), now+int64(100*365*24*time.Hour), []byte("zero never expires"))
}

func testPutOverExpired(t *testing.T, b backend.Backend) {
	now := base()
	key := []byte("k")
	put(t, b, key, []byte("old-value"), now+10)
	wantGet(t, b, key, now+5, []byte("old-value"))
	wantGet(t, b, key, now+20, nil)
	put(t, b, key, []byte("new"), now+100)
	wantGet(t, b, key, now+20, []byte("new"))
	put(t, b, key, []byte("newer and longer"), now+30)
	wantGet(t, b, key, now+40, nil)
	put(t, b, key, []byte("forever"), 0)
	wantGet(t, b, key, now+40, []byte("forever"))
}

func testEmptyKey(t *testing.T, b backend.Backend) {
	now := base()
	for _, key := range [][]byte{nil, {}} {
		if _, err := b.Get(key, now); !errors.Is(err, backend.ErrEmptyKey) {
			t.Errorf("Get(%q) error = %v, want ErrEmptyKey", key, err)
		}
		if err := b.Put(key, []byte("v"), 0); !errors.Is(err, backend.ErrEmptyKey) {
			t.Errorf("Put(%q) error = %v, want ErrEmptyKey", key, err)
		}
		if err := b.Delete(key); !errors.Is(err, backend.ErrEmptyKey) {
			t.Errorf("Delete(%q) error = %v, want ErrEmptyKey", key, err)
		}
		sb, ok := b.(backend.Striped)
		if !ok {
			continue
		}
		h := backend.Hash(key)
		i := stripeOf(sb, h)
		sb.Lock(i)
		_, gerr := sb.GetLocked(h, key, now)
		perr := sb.PutLocked(h, key, []byte("v"), 0)
		derr := sb.DeleteLocked(h, key)
		sb.Unlock(i)
		if !errors.Is(gerr, backend.ErrEmptyKey) {
			t.Errorf("GetLocked(%q) error = %v, want ErrEmptyKey", key, gerr)
		}
		if !errors.Is(perr, backend.ErrEmptyKey) {
			t.Errorf("PutLocked(%q) error = %v, want ErrEmptyKey", key, perr)
		}
		if !errors.Is(derr, backend.ErrEmptyKey) {
			t.Errorf("DeleteLocked(%q) error = %v, want ErrEmptyKey", key, derr)
		}
	}
	if c, ok := b.(backend.Stats); ok && c.Len() != 0 {
		t.Errorf("Len() = %d after refused writes, want 0", c.Len())
	}
}

func testClose(t *testing.T, b backend.Backend) {
	now := base()
	key := []byte("k")
	put(t, b, key, []byte("v"), 0)
	if err := b.Close(); err != nil {
		t.Fatalf("Close() = %v, want nil", err)
	}
	if _, err := b.Get(key, now); !errors.Is(err, backend.ErrClosed) {
		t.Errorf("Get after Close: error = %v, want ErrClosed", err)
	}
	if _, err := b.Get([]byte("missing"), now); !errors.Is(err, backend.ErrClosed) {
		t.Errorf("Get(missing) after Close: error = %v, want ErrClosed", err)
	}
	if err := b.Put(key, []byte("v2"), 0); !errors.Is(err, backend.ErrClosed) {
		t.Errorf("Put after Close: error = %v, want ErrClosed", err)
	}
	if err := b.Put([]byte("new"), []byte("v2"), 0); !errors.Is(err, backend.ErrClosed) {
		t.Errorf("Put(new key) after Close: error = %v, want ErrClosed", err)
	}
	if err := b.Delete(key); !errors.Is(err, backend.ErrClosed) {
		t.Errorf("Delete after Close: error = %v, want ErrClosed", err)
	}
	if sb, ok := b.(backend.Striped); ok {
		h := backend.Hash(key)
		i := stripeOf(sb, h)
		sb.Lock(i)
		_, gerr := sb.GetLocked(h, key, now)
		perr := sb.PutLocked(h, key, []byte("v2"), 0)
		derr := sb.DeleteLocked(h, key)
		sb.Unlock(i)
		if !errors.Is(gerr, backend.ErrClosed) {
			t.Errorf("GetLocked after Close: error = %v, want ErrClosed", gerr)
		}
		if !errors.Is(perr, backend.ErrClosed) {
			t.Errorf("PutLocked after Close: error = %v, want ErrClosed", perr)
		}
		if !errors.Is(derr, backend.ErrClosed) {
			t.Errorf("DeleteLocked after Close: error = %v, want ErrClosed", derr)
		}
	}
	if err := b.Close(); err != nil {
		t.Errorf("second Close() = %v, want nil", err)
	}
}

// manyKey and manyValue build the i'th record of testManyKeys.
func manyKey(i int) []byte { return []byte(fmt.Sprintf("user:%08d", i)) }
func manyValue(i int) []byte {
	v := make([]byte, 8+i%13)
	binary.LittleEndian.PutUint64(v, uint64(i)*0x9e3779b97f4a7c15)
	return v
}

func testManyKeys(t *testing.T, b backend.Backend) {
	const n = 10000
	now := base()
	for i := range n {
		put(t, b, manyKey(i), manyValue(i), 0)
	}
	if c, ok := b.(backend.Stats); ok {
		if got := c.Len(); got != n {
			t.Errorf("Len() = %d after %d puts, want %d", got, n, n)
		}
	}
	for i := range n {
		wantGet(t, b, manyKey(i), now, manyValue(i))
	}
	for i := 0; i < n; i += 2 {
		del(t, b, manyKey(i))
	}
	for i := range n {
		var want []byte
		if i%2 == 1 {
			want = manyValue(i)
		}
		wantGet(t, b, manyKey(i), now, want)
	}
	if c, ok := b.(backend.Stats); ok {
		if got := c.Len(); got != n/2 {
			t.Errorf("Len() = %d after deleting half, want %d", got, n/2)
		}
	}
}

func testBinaryData(t *testing.T, b backend.Backend) {
	now := base()
	keys := [][]byte{
		{0x00}, {0x00, 0x00}, {0xff}, {0xff, 0xff}, {0x00, 0xff}, {0xff, 0x00},
		[]byte("a"), []byte("a\x00"), []byte("a\x00b"), []byte("ab"), []byte("abc"),
		[]byte("\x80\x81\xfe"), bytes.Repeat([]byte{0}, 64), bytes.Repeat([]byte{0xff}, 64),
	}
	value := func(i int) []byte {
		return []byte{0x00, byte(i), 0xff, 0x00, 0x80, 0x7f, 0xff}
	}
	for i, k := range keys {
		put(t, b, k, value(i), 0)
	}
	for i, k := range keys {
		wantGet(t, b, k, now, value(i))
	}
	del(t, b, []byte{0x00})
	wantGet(t, b, []byte{0x00}, now, nil)
	wantGet(t, b, []byte{0x00, 0x00}, now, value(1))
	put(t, b, []byte{0x01}, []byte{0x00}, 0)
	wantGet(t, b, []byte{0x01}, now, []byte{0x00})
	put(t, b, []byte{0x02}, []byte{0xff}, 0)
	wantGet(t, b, []byte{0x02}, now, []byte{0xff})
}

func testLargeValues(t *testing.T, b backend.Backend) {
	now := base()
	r := rand.New(rand.NewPCG(1, 2))
	large := func() []byte {
		v := make([]byte, 64<<10)
		for i := range v {
			v[i] = byte(r.Uint32())
		}
		return v
	}
	k := []byte("large")
	v1 := large()
	put(t, b, k, v1, 0)
	wantGet(t, b, k, now, v1)
	v2 := large()
	put(t, b, k, v2, 0)
	wantGet(t, b, k, now, v2)
	put(t, b, k, []byte{1}, 0)
	wantGet(t, b, k, now, []byte{1})
	v3 := append(large(), large()...)
	put(t, b, k, v3, 0)
	wantGet(t, b, k, now, v3)
	others := make([][]byte, 8)
	for i := range others {
		others[i] = large()
		put(t, b, []byte(fmt.Sprintf("large-%d", i)), others[i], 0)
	}
	for i := range others {
		wantGet(t, b, []byte(fmt.Sprintf("large-%d", i)), now, others[i])
	}
	wantGet(t, b, k, now, v3)
}

// workers is the number of goroutines in the concurrency tests.
const workers = 8

func testConcurrentDistinctKeys(t *testing.T, b backend.Backend) {
	now := base()
	const keysPer, rounds = 64, 20
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			for r := range rounds {
				for i := range keysPer {
					k := []byte(fmt.Sprintf("w%d:k%d", w, i))
					// The length changes every round, so stores that
					// relocate or compact records do so concurrently.
					v := bytes.Repeat([]byte{byte(w), byte(i), byte(r)}, 1+(r+i)%7)
					if err := b.Put(k, v, 0); err != nil {
						errs <- fmt.Errorf("Put(%q) = %v", k, err)
						return
					}
					got, err := b.Get(k, now)
					if err != nil || !bytes.Equal(got, v) {
						errs <- fmt.Errorf("Get(%q) = %s, %v, want %s", k, show(got), err, show(v))
						return
					}
					if (r+i)%5 == 0 {
						if err := b.Delete(k); err != nil {
							errs <- fmt.Errorf("Delete(%q) = %v", k, err)
							return
						}
						if got, err := b.Get(k, now); err != nil || got != nil {
							errs <- fmt.Errorf("Get(%q) after Delete = %s, %v, want nil", k, show(got), err)
							return
						}
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func testConcurrentSameKey(t *testing.T, b backend.Backend) {
	now := base()
	key := []byte("hot")
	const rounds = 500
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			// Worker w writes records of w+1 bytes all equal to w, so a
			// torn or mixed record is detectable.
			mine := bytes.Repeat([]byte{byte(w)}, w+1)
			for r := range rounds {
				var err error
				if r%17 == 16 {
					err = b.Delete(key)
				} else {
					err = b.Put(key, mine, 0)
				}
				if err != nil {
					errs <- fmt.Errorf("worker %d: write = %v", w, err)
					return
				}
				got, err := b.Get(key, now)
				if err != nil {
					errs <- fmt.Errorf("worker %d: Get(%q) error = %v", w, key, err)
					return
				}
				if got == nil {
					continue
				}
				if len(got) == 0 || len(got) != int(got[0])+1 || !bytes.Equal(got, bytes.Repeat(got[:1], len(got))) {
					errs <- fmt.Errorf("Get(%q) = %s, a record no worker wrote", key, show(got))
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func testCounter(t *testing.T, b backend.Backend) {
	c, ok := b.(backend.Stats)
	if !ok {
		t.Skipf("%T does not implement backend.Stats", b)
	}
	check := func(step string, want int) {
		t.Helper()
		if got := c.Len(); got != want {
			t.Fatalf("%s: Len() = %d, want %d", step, got, want)
		}
	}
	check("empty", 0)
	put(t, b, []byte("a"), []byte("1"), 0)
	check("one key", 1)
	put(t, b, []byte("b"), []byte("2"), 0)
	check("two keys", 2)
	put(t, b, []byte("a"), []byte("longer value"), 0)
	check("overwrite", 2)
	del(t, b, []byte("missing"))
	check("delete missing", 2)
	del(t, b, []byte("a"))
	check("delete", 1)
	del(t, b, []byte("b"))
	check("delete last", 0)
}

// testSweep: Sweep removes the records expired at now, and only those,
// and a backend.Stats counts them as evicted.
func testSweep(t *testing.T, b backend.Backend) {
	sw, ok := b.(backend.Sweeper)
	if !ok {
		t.Skipf("%T does not implement backend.Sweeper", b)
	}
	c, counts := b.(backend.Stats)
	var before uint64
	if counts {
		before = c.Evictions()
	}
	now := base()
	put(t, b, []byte("a"), []byte("1"), now+10)
	put(t, b, []byte("b"), []byte("2"), now+10)
	put(t, b, []byte("c"), []byte("3"), now+30)
	put(t, b, []byte("d"), []byte("4"), 0)
	removed := 0
	for range 1000 {
		n, err := sw.Sweep(now+20, 0)
		if err != nil {
			t.Fatalf("Sweep = %v", err)
		}
		if removed += n; removed >= 2 {
			break
		}
	}
	if removed != 2 {
		t.Fatalf("Sweep at now+20 removed %d records, want the 2 expired", removed)
	}
	wantGet(t, b, []byte("c"), now+20, []byte("3"))
	wantGet(t, b, []byte("d"), now+20, []byte("4"))
	if counts {
		if got := c.Evictions() - before; got != 2 {
			t.Errorf("Evictions() rose by %d after sweeping 2 records, want 2", got)
		}
		if got := c.Len(); got != 2 {
			t.Errorf("Len() = %d after sweeping 2 of 4 records, want 2", got)
		}
	}
}

func testStripes(t *testing.T, b backend.Backend) {
	sb := striped(t, b)
	n := sb.Stripes()
	if n <= 0 || n&(n-1) != 0 {
		t.Fatalf("Stripes() = %d, want a power of two", n)
	}
	// Every stripe can be locked and unlocked, and locks are independent.
	for i := range n {
		sb.Lock(i)
	}
	for i := range n {
		sb.Unlock(i)
	}
}

// lockedGet runs GetLocked under the key's stripe lock and returns a copy.
func lockedGet(t *testing.T, sb backend.Striped, hash uint64, key []byte, now int64) []byte {
	t.Helper()
	i := stripeOf(sb, hash)
	sb.Lock(i)
	v, err := sb.GetLocked(hash, key, now)
	if v != nil {
		v = append([]byte{}, v...)
	}
	sb.Unlock(i)
	if err != nil {
		t.Fatalf("GetLocked(%#x, %q) error = %v", hash, key, err)
	}
	return v
}

func wantLocked(t *testing.T, sb backend.Striped, hash uint64, key []byte, now int64, want []byte) {
	t.Helper()
	got := lockedGet(t, sb, hash, key, now)
	if (want == nil) != (got == nil) || !bytes.Equal(got, want) {
		t.Fatalf("GetLocked(%#x, %q) = %s, want %s", hash, key, show(got), show(want))
	}
}

func putLocked(t *testing.T, sb backend.Striped, hash uint64, key, value []byte, expiresAt int64) {
	t.Helper()
	i := stripeOf(sb, hash)
	sb.Lock(i)
	err := sb.PutLocked(hash, key, value, expiresAt)
	sb.Unlock(i)
	if err != nil {
		t.Fatalf("PutLocked(%#x, %q, %s) = %v", hash, key, show(value), err)
	}
}

func deleteLocked(t *testing.T, sb backend.Striped, hash uint64, key []byte) {
	t.Helper()
	i := stripeOf(sb, hash)
	sb.Lock(i)
	err := sb.DeleteLocked(hash, key)
	sb.Unlock(i)
	if err != nil {
		t.Fatalf("DeleteLocked(%#x, %q) = %v", hash, key, err)
	}
}

func testLockedAlias(t *testing.T, b backend.Backend) {
	sb := striped(t, b)
	now := base()
	key := []byte("hot")
	h := backend.Hash(key)
	i := stripeOf(sb, h)
	putLocked(t, sb, h, key, []byte("0123456789abcdef0"), 0)

	sb.Lock(i)
	for step := range 100 {
		v, err := sb.GetLocked(h, key, now)
		if err != nil || len(v) != 17 {
			sb.Unlock(i)
			t.Fatalf("step %d: GetLocked(%q) = %s, %v, want 17 bytes", step, key, show(v), err)
		}
		// Step the record in place, as the engine does, and write it back.
		n := binary.LittleEndian.Uint64(v)
		binary.LittleEndian.PutUint64(v, n+1)
		v[16] = byte(step)
		if err := sb.PutLocked(h, key, v, now+int64(time.Hour)); err != nil {
			sb.Unlock(i)
			t.Fatalf("step %d: PutLocked(%q) = %v", step, key, err)
		}
	}
	sb.Unlock(i)

	want := []byte("0123456789abcdef0")
	binary.LittleEndian.PutUint64(want, binary.LittleEndian.Uint64(want)+100)
	want[16] = 99
	wantLocked(t, sb, h, key, now, want)
	wantGet(t, b, key, now, want)
	// The expiry written with the in-place record holds.
	wantGet(t, b, key, now+int64(time.Hour), nil)
}

func testLockedResize(t *testing.T, b backend.Backend) {
	sb := striped(t, b)
	now := base()
	key := []byte("resize")
	h := backend.Hash(key)
	i := stripeOf(sb, h)
	putLocked(t, sb, h, key, []byte("0123456789abcdef0"), 0)
	for step, n := range []int{17, 8, 24, 24, 1, 300, 299, 17, 4000, 16} {
		sb.Lock(i)
		v, err := sb.GetLocked(h, key, now)
		if err != nil || v == nil {
			sb.Unlock(i)
			t.Fatalf("step %d: GetLocked(%q) = %s, %v", step, key, show(v), err)
		}
		if step > 0 && v[0] != byte(step-1) {
			sb.Unlock(i)
			t.Fatalf("step %d: GetLocked(%q) = %s, want the record of step %d", step, key, show(v), step-1)
		}
		// Write a record of another size, as an algorithm whose record
		// grows or shrinks does.
		next := bytes.Repeat([]byte{byte(step)}, n)
		if err := sb.PutLocked(h, key, next, 0); err != nil {
			sb.Unlock(i)
			t.Fatalf("step %d: PutLocked(%q, %d bytes) = %v", step, key, n, err)
		}
		got, err := sb.GetLocked(h, key, now)
		if err != nil || !bytes.Equal(got, next) {
			sb.Unlock(i)
			t.Fatalf("step %d: GetLocked(%q) = %s, %v, want %s", step, key, show(got), err, show(next))
		}
		sb.Unlock(i)
	}
	// Several writes of different lengths under one lock hold, with no
	// read between them.
	sb.Lock(i)
	for step, n := range []int{17, 5, 17, 40, 17, 3} {
		next := bytes.Repeat([]byte{byte(step + 1)}, n)
		if err := sb.PutLocked(h, key, next, 0); err != nil {
			sb.Unlock(i)
			t.Fatalf("write %d: PutLocked(%q, %d bytes) = %v", step, key, n, err)
		}
	}
	got, err := sb.GetLocked(h, key, now)
	sb.Unlock(i)
	if want := bytes.Repeat([]byte{6}, 3); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("GetLocked(%q) after writes = %s, %v, want %s", key, show(got), err, show(want))
	}
	putLocked(t, sb, h, key, bytes.Repeat([]byte{9}, 16), 0)

	// Shrink a record by writing back a prefix of the aliased slice.
	sb.Lock(i)
	v, _ := sb.GetLocked(h, key, now)
	err = sb.PutLocked(h, key, v[:3], 0)
	sb.Unlock(i)
	if err != nil {
		t.Fatalf("PutLocked(%q, prefix) = %v", key, err)
	}
	wantGet(t, b, key, now, []byte{9, 9, 9})
}

func testLockedExpiry(t *testing.T, b backend.Backend) {
	sb := striped(t, b)
	now := base()
	key := []byte("k")
	h := backend.Hash(key)
	putLocked(t, sb, h, key, []byte("v1"), now+10)
	wantLocked(t, sb, h, key, now+9, []byte("v1"))
	wantLocked(t, sb, h, key, now+10, nil)
	// The engine writes a fresh record over an expired one.
	putLocked(t, sb, h, key, []byte("v2"), now+20)
	wantLocked(t, sb, h, key, now+10, []byte("v2"))
	putLocked(t, sb, h, key, []byte("v3"), 0)
	wantLocked(t, sb, h, key, now+1000, []byte("v3"))
}

// testExtendLocked: ExtendLocked lengthens a live record's expiry and
// reports it, and never shortens one, revives an expired one, adds a
// missing one or limits one that never expires.
func testExtendLocked(t *testing.T, b backend.Backend) {
	sb := striped(t, b)
	now := base()
	key, v := []byte("k"), []byte("v")
	h := backend.Hash(key)
	extend := func(at, expiresAt int64, want bool) {
		t.Helper()
		i := stripeOf(sb, h)
		sb.Lock(i)
		ok, err := sb.ExtendLocked(h, key, at, expiresAt)
		sb.Unlock(i)
		if err != nil || ok != want {
			t.Fatalf("ExtendLocked(%q, now+%d, now+%d) = %v, %v; want %v", key, at-now, expiresAt-now, ok, err, want)
		}
	}
	extend(now, now+100, false) // missing
	putLocked(t, sb, h, key, v, now+100)
	extend(now, now+50, false) // sooner: left
	wantLocked(t, sb, h, key, now+99, v)
	extend(now, now+200, true)
	wantLocked(t, sb, h, key, now+199, v)
	wantLocked(t, sb, h, key, now+200, nil)
	extend(now+300, now+400, false) // expired: not revived
	wantLocked(t, sb, h, key, now+300, nil)
	putLocked(t, sb, h, key, v, 0)
	extend(now, now+100, false) // never expires: left so
	wantLocked(t, sb, h, key, now+1000, v)
}

func testLockedAgreesWithPlain(t *testing.T, b backend.Backend) {
	sb := striped(t, b)
	now := base()
	for i := range 100 {
		k := manyKey(i)
		h := backend.Hash(k)
		if i%2 == 0 {
			put(t, b, k, manyValue(i), 0)
			wantLocked(t, sb, h, k, now, manyValue(i))
		} else {
			putLocked(t, sb, h, k, manyValue(i), 0)
			wantGet(t, b, k, now, manyValue(i))
		}
	}
	for i := range 100 {
		k := manyKey(i)
		if i%3 == 0 {
			deleteLocked(t, sb, backend.Hash(k), k)
			wantGet(t, b, k, now, nil)
		} else {
			del(t, b, k)
			wantLocked(t, sb, backend.Hash(k), k, now, nil)
		}
	}
}

// collidingHash is the hash the collision tests force on distinct keys.
const collidingHash = 0x9e3779b97f4a7c15

func testLockedCollision(t *testing.T, b backend.Backend) {
	sb := striped(t, b)
	now := base()
	const h = collidingHash
	a, c := []byte("collide-a"), []byte("collide-b")
	putLocked(t, sb, h, a, []byte("value-a"), 0)
	putLocked(t, sb, h, c, []byte("value-b"), 0)
	wantLocked(t, sb, h, a, now, []byte("value-a"))
	wantLocked(t, sb, h, c, now, []byte("value-b"))

	// Overwrite one with a different length: the other is untouched.
	putLocked(t, sb, h, a, []byte("a much longer value for a"), 0)
	wantLocked(t, sb, h, a, now, []byte("a much longer value for a"))
	wantLocked(t, sb, h, c, now, []byte("value-b"))

	deleteLocked(t, sb, h, a)
	wantLocked(t, sb, h, a, now, nil)
	wantLocked(t, sb, h, c, now, []byte("value-b"))

	putLocked(t, sb, h, a, []byte("a-again"), 0)
	wantLocked(t, sb, h, a, now, []byte("a-again"))
	wantLocked(t, sb, h, c, now, []byte("value-b"))

	deleteLocked(t, sb, h, c)
	wantLocked(t, sb, h, c, now, nil)
	wantLocked(t, sb, h, a, now, []byte("a-again"))

	// A key stored under its true hash and another forced onto the same
	// hash stay distinct too.
	real := []byte("real")
	rh := backend.Hash(real)
	put(t, b, real, []byte("real-value"), 0)
	putLocked(t, sb, rh, []byte("impostor"), []byte("impostor-value"), 0)
	wantGet(t, b, real, now, []byte("real-value"))
	wantLocked(t, sb, rh, []byte("impostor"), now, []byte("impostor-value"))
	del(t, b, real)
	wantLocked(t, sb, rh, []byte("impostor"), now, []byte("impostor-value"))
	wantLocked(t, sb, rh, real, now, nil)
}

func testLockedCollisionMany(t *testing.T, b backend.Backend) {
	sb := striped(t, b)
	now := base()
	const h, n = collidingHash, 300
	key := func(i int) []byte { return []byte(fmt.Sprintf("c%d", i)) }
	for i := range n {
		putLocked(t, sb, h, key(i), manyValue(i), 0)
	}
	for i := range n {
		wantLocked(t, sb, h, key(i), now, manyValue(i))
	}
	for i := 0; i < n; i += 3 {
		deleteLocked(t, sb, h, key(i))
	}
	for i := range n {
		var want []byte
		if i%3 != 0 {
			want = manyValue(i)
		}
		wantLocked(t, sb, h, key(i), now, want)
	}
	for i := 0; i < n; i += 3 {
		putLocked(t, sb, h, key(i), manyValue(i+1), 0)
	}
	for i := range n {
		want := manyValue(i)
		if i%3 == 0 {
			want = manyValue(i + 1)
		}
		wantLocked(t, sb, h, key(i), now, want)
	}
	if c, ok := b.(backend.Stats); ok && c.Len() != n {
		t.Errorf("Len() = %d, want %d", c.Len(), n)
	}
}

func testConcurrentLockedCounter(t *testing.T, b backend.Backend) {
	sb := striped(t, b)
	now := base()
	const rounds = 1000
	keys := [][]byte{[]byte("counter-a"), []byte("counter-b")}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for r := range rounds {
				k := keys[(w+r)%len(keys)]
				h := backend.Hash(k)
				i := stripeOf(sb, h)
				sb.Lock(i)
				v, err := sb.GetLocked(h, k, now)
				switch {
				case err != nil:
					sb.Unlock(i)
					t.Errorf("GetLocked(%q) error = %v", k, err)
					return
				case v == nil:
					err = sb.PutLocked(h, k, binary.LittleEndian.AppendUint64(nil, 1), 0)
				default:
					binary.LittleEndian.PutUint64(v, binary.LittleEndian.Uint64(v)+1)
					err = sb.PutLocked(h, k, v, 0)
				}
				sb.Unlock(i)
				if err != nil {
					t.Errorf("PutLocked(%q) = %v", k, err)
					return
				}
			}
		})
	}
	// A plain reader runs alongside and must only see whole counters.
	wg.Go(func() {
		for range rounds {
			v, err := b.Get(keys[0], now)
			if err != nil || (v != nil && len(v) != 8) {
				t.Errorf("Get(%q) = %s, %v, want 8 bytes or nil", keys[0], show(v), err)
				return
			}
		}
	})
	wg.Wait()
	var total uint64
	for _, k := range keys {
		v := lockedGet(t, sb, backend.Hash(k), k, now)
		if len(v) != 8 {
			t.Fatalf("GetLocked(%q) = %s, want 8 bytes", k, show(v))
		}
		total += binary.LittleEndian.Uint64(v)
	}
	if want := uint64(workers * rounds); total != want {
		t.Errorf("sum of counters = %d, want %d (lost updates under the stripe lock)", total, want)
	}
}
