package backendtest

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-go/sluice/backend"
)

// RunSwapper runs the conformance suite of backend.Swapper against the stores
// open returns: atomic multi-key compare-and-swap, all or nothing, the
// current records returned on a mismatch, compare-only swaps, deletion,
// ownership of slices, the store's clock, Close, atomicity under
// concurrent increments, the groups of keys, the watch of deletions and
// Range. Its multi-key swaps are over keys of one group on a store that
// puts every key in one (a standalone Redis server, not a Cluster). open must return a new, empty store on each call;
// the suite closes every store it opens. Records are written with an hour's
// TTL on the store's own clock, so a store on the real clock (Redis) runs it
// unchanged; Run covers the plain backend.Backend contract.
func RunSwapper(t *testing.T, open func(t *testing.T) backend.Swapper) {
	t.Helper()
	tests := []struct {
		name string
		fn   func(t *testing.T, s backend.Swapper)
	}{
		{"Clock", testSwapClock},
		{"Create", testSwapCreate},
		{"MismatchWritesNothing", testSwapMismatch},
		{"Update", testSwapUpdate},
		{"AllOrNothing", testSwapAllOrNothing},
		{"Delete", testSwapDelete},
		{"ZeroTTLDeletes", testSwapZeroTTL},
		{"Keep", testSwapKeep},
		{"KeepLengthens", testSwapKeepLengthens},
		{"ExpiredIsAbsent", testSwapExpired},
		{"Ownership", testSwapOwnership},
		{"EmptyKey", testSwapEmptyKey},
		{"Close", testSwapClose},
		{"ConcurrentIncrements", testSwapConcurrent},
		{"Group", testSwapGroup},
		{"WatchDeletes", testSwapWatchDeletes},
		{"Range", testSwapRange},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := open(t)
			t.Cleanup(func() { s.Close() })
			tt.fn(t, s)
		})
	}
}

const swapTTL = time.Hour

// cas calls CompareAndSwap and fails the test on an error.
func cas(t *testing.T, s backend.Swapper, swaps ...backend.Swap) (bool, [][]byte) {
	t.Helper()
	ok, cur, _, err := s.CompareAndSwap(context.Background(), swaps)
	if err != nil {
		t.Fatalf("CompareAndSwap(%s): %v", showSwaps(swaps), err)
	}
	switch {
	case ok && cur != nil:
		t.Fatalf("CompareAndSwap(%s) = true with records %q, want none", showSwaps(swaps), cur)
	case !ok && len(cur) != len(swaps):
		t.Fatalf("CompareAndSwap(%s) = false with %d records, want %d", showSwaps(swaps), len(cur), len(swaps))
	}
	return ok, cur
}

func showSwaps(swaps []backend.Swap) string {
	var b bytes.Buffer
	for i, w := range swaps {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%q: %s→%s", w.Key, show(w.Expected), show(w.Value))
		if w.Keep {
			b.WriteString(" (keep)")
		}
	}
	return b.String()
}

func wantCurrent(t *testing.T, call string, got [][]byte, want ...[]byte) {
	t.Helper()
	for i := range want {
		if (got[i] == nil) != (want[i] == nil) || !bytes.Equal(got[i], want[i]) {
			t.Fatalf("%s: current[%d] = %s, want %s", call, i, show(got[i]), show(want[i]))
		}
	}
}

// wantSwapGet checks k's record through a compare-only swap: the store's
// own clock decides expiry.
func wantSwapGet(t *testing.T, s backend.Swapper, k, want []byte) {
	t.Helper()
	ok, cur := cas(t, s, backend.Swap{Key: k, Expected: want, Keep: true})
	if !ok {
		t.Fatalf("record %q = %s, want %s", k, show(cur[0]), show(want))
	}
}

func testSwapClock(t *testing.T, s backend.Swapper) {
	ok, cur, now, err := s.CompareAndSwap(context.Background(), nil)
	if err != nil || !ok || cur != nil {
		t.Fatalf("CompareAndSwap(nil) = %v, %q, %d, %v; want true, nil, the time, nil", ok, cur, now, err)
	}
	if now < 0 {
		t.Fatalf("CompareAndSwap(nil) time = %d, want zero (no clock) or a time", now)
	}
}

func testSwapCreate(t *testing.T, s backend.Swapper) {
	k := []byte("k")
	if ok, _ := cas(t, s, backend.Swap{Key: k, Value: []byte("v1"), TTL: swapTTL}); !ok {
		t.Fatal("creating an absent key failed")
	}
	wantSwapGet(t, s, k, []byte("v1"))
	wantGet(t, s, k, time.Now().UnixNano(), []byte("v1"))
}

func testSwapMismatch(t *testing.T, s backend.Swapper) {
	k := []byte("k")
	ok, cur := cas(t, s, backend.Swap{Key: k, Expected: []byte("old"), Value: []byte("new"), TTL: swapTTL})
	if ok {
		t.Fatal("expecting a record where there is none succeeded")
	}
	wantCurrent(t, "expecting old over none", cur, nil)
	wantSwapGet(t, s, k, nil)
	if ok, _ := cas(t, s, backend.Swap{Key: k, Value: []byte("v1"), TTL: swapTTL}); !ok {
		t.Fatal("create failed")
	}
	ok, cur = cas(t, s, backend.Swap{Key: k, Value: []byte("v2"), TTL: swapTTL})
	if ok {
		t.Fatal("expecting none where there is a record succeeded")
	}
	wantCurrent(t, "expecting none over v1", cur, []byte("v1"))
	ok, cur = cas(t, s, backend.Swap{Key: k, Expected: []byte("v0"), Value: []byte("v2"), TTL: swapTTL})
	if ok {
		t.Fatal("expecting v0 over v1 succeeded")
	}
	wantCurrent(t, "expecting v0 over v1", cur, []byte("v1"))
	wantSwapGet(t, s, k, []byte("v1"))
}

func testSwapUpdate(t *testing.T, s backend.Swapper) {
	k := []byte("k")
	var prev []byte
	for i := range 5 {
		v := []byte(fmt.Sprintf("v%d", i))
		if ok, cur := cas(t, s, backend.Swap{Key: k, Expected: prev, Value: v, TTL: swapTTL}); !ok {
			t.Fatalf("update %d from %s: mismatch, current %s", i, show(prev), show(cur[0]))
		}
		prev = v
	}
	wantSwapGet(t, s, k, []byte("v4"))
}

func testSwapAllOrNothing(t *testing.T, s backend.Swapper) {
	a, b, c := []byte("a"), []byte("b"), []byte("c")
	if ok, _ := cas(t, s,
		backend.Swap{Key: a, Value: []byte("a1"), TTL: swapTTL},
		backend.Swap{Key: b, Value: []byte("b1"), TTL: swapTTL}); !ok {
		t.Fatal("creating two keys failed")
	}
	// a and c as expected, b not: nothing is written.
	ok, cur := cas(t, s,
		backend.Swap{Key: a, Expected: []byte("a1"), Value: []byte("a2"), TTL: swapTTL},
		backend.Swap{Key: b, Expected: []byte("bX"), Value: []byte("b2"), TTL: swapTTL},
		backend.Swap{Key: c, Value: []byte("c2"), TTL: swapTTL})
	if ok {
		t.Fatal("a swap with one stale key succeeded")
	}
	wantCurrent(t, "one stale key of three", cur, []byte("a1"), []byte("b1"), nil)
	wantSwapGet(t, s, a, []byte("a1"))
	wantSwapGet(t, s, b, []byte("b1"))
	wantSwapGet(t, s, c, nil)
	ok, _ = cas(t, s,
		backend.Swap{Key: a, Expected: []byte("a1"), Value: []byte("a2"), TTL: swapTTL},
		backend.Swap{Key: b, Expected: []byte("b1"), Value: []byte("b2"), TTL: swapTTL},
		backend.Swap{Key: c, Value: []byte("c2"), TTL: swapTTL})
	if !ok {
		t.Fatal("a swap with every key current failed")
	}
	wantSwapGet(t, s, a, []byte("a2"))
	wantSwapGet(t, s, b, []byte("b2"))
	wantSwapGet(t, s, c, []byte("c2"))
}

func testSwapDelete(t *testing.T, s backend.Swapper) {
	k := []byte("k")
	cas(t, s, backend.Swap{Key: k, Value: []byte("v"), TTL: swapTTL})
	if ok, _ := cas(t, s, backend.Swap{Key: k, Expected: []byte("v")}); !ok {
		t.Fatal("deleting failed")
	}
	wantSwapGet(t, s, k, nil)
	if err := s.Put(k, []byte("p"), 0); err != nil {
		t.Fatal(err)
	}
	wantSwapGet(t, s, k, []byte("p"))
	if err := s.Delete(k); err != nil {
		t.Fatal(err)
	}
	wantSwapGet(t, s, k, nil)
}

func testSwapZeroTTL(t *testing.T, s backend.Swapper) {
	k := []byte("k")
	cas(t, s, backend.Swap{Key: k, Value: []byte("v"), TTL: swapTTL})
	if ok, _ := cas(t, s, backend.Swap{Key: k, Expected: []byte("v"), Value: []byte("w"), TTL: 0}); !ok {
		t.Fatal("a swap with TTL 0 failed")
	}
	wantSwapGet(t, s, k, nil)
	if ok, _ := cas(t, s, backend.Swap{Key: k, Value: []byte("w"), TTL: -time.Second}); !ok {
		t.Fatal("a swap with a negative TTL failed")
	}
	wantSwapGet(t, s, k, nil)
}

func testSwapKeep(t *testing.T, s backend.Swapper) {
	a, b := []byte("a"), []byte("b")
	cas(t, s, backend.Swap{Key: a, Value: []byte("a1"), TTL: swapTTL})
	// Keep on a with a write to b: b is written, a left as it is.
	if ok, _ := cas(t, s,
		backend.Swap{Key: a, Expected: []byte("a1"), Value: []byte("ignored"), Keep: true},
		backend.Swap{Key: b, Value: []byte("b1"), TTL: swapTTL}); !ok {
		t.Fatal("keep with a write failed")
	}
	wantSwapGet(t, s, a, []byte("a1"))
	wantSwapGet(t, s, b, []byte("b1"))
	// A Keep that does not match fails the whole swap.
	ok, cur := cas(t, s,
		backend.Swap{Key: a, Expected: []byte("a0"), Keep: true},
		backend.Swap{Key: b, Expected: []byte("b1"), Value: []byte("b2"), TTL: swapTTL})
	if ok {
		t.Fatal("a stale keep let the swap through")
	}
	wantCurrent(t, "stale keep", cur, []byte("a1"), []byte("b1"))
	wantSwapGet(t, s, b, []byte("b1"))
}

// testSwapKeepLengthens checks a Keep with a TTL: a record that would
// expire sooner is kept that long, one that would not is left as it is,
// and its value is never touched. It reads expiries through Range.
func testSwapKeepLengthens(t *testing.T, s backend.Swapper) {
	expiry := func() int64 {
		t.Helper()
		var exp int64
		if err := s.Range(nil, func(rec backend.Record) bool { exp = rec.ExpiresAt; return false }); err != nil {
			t.Fatal(err)
		}
		return exp
	}
	k, v := []byte("k"), []byte("v")
	cas(t, s, backend.Swap{Key: k, Value: v, TTL: swapTTL})
	before := expiry()
	// Sooner than the record's own expiry: left as it is.
	cas(t, s, backend.Swap{Key: k, Expected: v, TTL: swapTTL / 2, Keep: true})
	if got := expiry(); got < before-int64(time.Minute) {
		t.Fatalf("a Keep with half the TTL moved the expiry %v earlier", time.Duration(before-got))
	}
	// Later: kept that long, the value untouched.
	cas(t, s, backend.Swap{Key: k, Expected: v, Value: []byte("ignored"), TTL: 3 * swapTTL, Keep: true})
	if got := expiry(); got < before+int64(swapTTL) {
		t.Fatalf("a Keep with three times the TTL lengthened the expiry by %v, want about %v", time.Duration(got-before), 2*swapTTL)
	}
	wantSwapGet(t, s, k, v)
}

func testSwapExpired(t *testing.T, s backend.Swapper) {
	k := []byte("k")
	// Expired in 1970 by any clock: absent to a swap.
	if err := s.Put(k, []byte("old"), 1); err != nil {
		t.Fatal(err)
	}
	ok, cur := cas(t, s, backend.Swap{Key: k, Expected: []byte("old"), Value: []byte("v"), TTL: swapTTL})
	if ok {
		t.Fatal("an expired record matched")
	}
	wantCurrent(t, "expecting an expired record", cur, nil)
	if ok, _ := cas(t, s, backend.Swap{Key: k, Value: []byte("v"), TTL: swapTTL}); !ok {
		t.Fatal("expecting none over an expired record failed")
	}
	wantSwapGet(t, s, k, []byte("v"))
}

func testSwapOwnership(t *testing.T, s backend.Swapper) {
	k, v := []byte("k"), []byte("v1")
	cas(t, s, backend.Swap{Key: k, Value: v, TTL: swapTTL})
	v[1] = '9' // the store must have copied it
	k[0] = 'x'
	wantSwapGet(t, s, []byte("k"), []byte("v1"))
	_, cur := cas(t, s, backend.Swap{Key: []byte("k"), Value: []byte("v2"), TTL: swapTTL})
	cur[0][1] = '9' // the caller's to change
	wantSwapGet(t, s, []byte("k"), []byte("v1"))
}

func testSwapEmptyKey(t *testing.T, s backend.Swapper) {
	_, _, _, err := s.CompareAndSwap(context.Background(), []backend.Swap{{Key: []byte("a"), Value: []byte("v"), TTL: swapTTL}, {Key: nil, Value: []byte("v"), TTL: swapTTL}})
	if !errors.Is(err, backend.ErrEmptyKey) {
		t.Fatalf("CompareAndSwap with an empty key = %v, want ErrEmptyKey", err)
	}
	wantSwapGet(t, s, []byte("a"), nil)
}

func testSwapClose(t *testing.T, s backend.Swapper) {
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := s.CompareAndSwap(context.Background(), []backend.Swap{{Key: []byte("k"), Value: []byte("v"), TTL: swapTTL}}); !errors.Is(err, backend.ErrClosed) {
		t.Fatalf("CompareAndSwap after Close = %v, want ErrClosed", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close = %v, want nil", err)
	}
}

// testSwapConcurrent: workers increment one counter by compare-and-swap
// loops, each step also touching a key of its own, so several keys commit
// together; no increment is lost.
func testSwapConcurrent(t *testing.T, s backend.Swapper) {
	const each = 200
	shared := []byte("shared")
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			own := []byte(fmt.Sprintf("own%d", w))
			var seen, mine []byte
			for i := 0; i < each; {
				n := uint64(0)
				if seen != nil {
					n = binary.BigEndian.Uint64(seen)
				}
				next := binary.BigEndian.AppendUint64(nil, n+1)
				nextMine := binary.BigEndian.AppendUint64(nil, uint64(i+1))
				ok, cur, _, err := s.CompareAndSwap(context.Background(), []backend.Swap{
					{Key: shared, Expected: seen, Value: next, TTL: swapTTL},
					{Key: own, Expected: mine, Value: nextMine, TTL: swapTTL},
				})
				if err != nil {
					errs <- err
					return
				}
				if ok {
					seen, mine = next, nextMine
					i++
					continue
				}
				seen, mine = cur[0], cur[1]
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	want := binary.BigEndian.AppendUint64(nil, workers*each)
	wantSwapGet(t, s, shared, want)
}

// testSwapGroup: SwapGroup is a function of the key, and keys it puts in
// one group swap together, all or nothing.
func testSwapGroup(t *testing.T, s backend.Swapper) {
	var keys [][]byte
	for c := byte('a'); c <= 'z'; c++ {
		keys = append(keys, []byte{'g', c})
	}
	byGroup := map[string][][]byte{}
	for _, k := range keys {
		g := s.SwapGroup(k)
		if again := s.SwapGroup(bytes.Clone(k)); again != g {
			t.Fatalf("SwapGroup(%q) = %q, then %q", k, g, again)
		}
		byGroup[g] = append(byGroup[g], k)
	}
	for g, ks := range byGroup {
		if len(ks) < 2 {
			continue
		}
		a, b := ks[0], ks[1]
		cas(t, s, backend.Swap{Key: a, Value: []byte("a1"), TTL: swapTTL}, backend.Swap{Key: b, Value: []byte("b1"), TTL: swapTTL})
		if ok, cur := cas(t, s, backend.Swap{Key: a, Expected: []byte("a1"), Value: []byte("a2"), TTL: swapTTL}, backend.Swap{Key: b, Value: []byte("b2"), TTL: swapTTL}); ok {
			t.Fatalf("group %q: a swap expecting %q absent wrote", g, b)
		} else {
			wantCurrent(t, "CompareAndSwap", cur, []byte("a1"), []byte("b1"))
		}
		wantSwapGet(t, s, a, []byte("a1"))
		return
	}
	t.Logf("no two of %d keys share a group: only SwapGroup's stability is checked", len(keys))
}

// testSwapWatchDeletes: a watch hears of every Delete, with the key
// deleted, and nothing after it is stopped.
func testSwapWatchDeletes(t *testing.T, s backend.Swapper) {
	heard := make(chan string, 16)
	stop, err := s.WatchDeletes(func(k []byte) { heard <- string(k) })
	if err != nil {
		t.Fatalf("WatchDeletes = %v", err)
	}
	cas(t, s, backend.Swap{Key: []byte("w"), Value: []byte("v"), TTL: swapTTL})
	if err := s.Delete([]byte("w")); err != nil {
		t.Fatal(err)
	}
	select {
	case k := <-heard:
		if k != "w" {
			t.Fatalf("the watch heard of %q deleted, want \"w\"", k)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the watch did not hear of a Delete within 5s")
	}
	wantSwapGet(t, s, []byte("w"), nil)
	stop()
	if err := s.Delete([]byte("w")); err != nil {
		t.Fatal(err)
	}
	select {
	case k := <-heard:
		t.Fatalf("the watch heard of %q deleted after it was stopped", k)
	case <-time.After(50 * time.Millisecond):
	}
}

// testSwapRange: Range lists every record from start in key order, with
// its value and its expiry on the store's clock, until fn says stop.
func testSwapRange(t *testing.T, s backend.Swapper) {
	_, _, now, err := s.CompareAndSwap(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"r3", "r1", "r2"} {
		cas(t, s, backend.Swap{Key: []byte(k), Value: []byte("v" + k), TTL: swapTTL})
	}
	var got []string
	err = s.Range([]byte("r2"), func(r backend.Record) bool {
		got = append(got, string(r.Key)+"="+string(r.Value))
		if now != 0 && (r.ExpiresAt < now || r.ExpiresAt > now+int64(2*swapTTL)) {
			t.Errorf("Range: %q expires at %d, want about %d", r.Key, r.ExpiresAt, now+int64(swapTTL))
		}
		return true
	})
	if want := "r2=vr2 r3=vr3"; err != nil || strings.Join(got, " ") != want {
		t.Fatalf("Range(r2) = %q, %v; want %s", got, err, want)
	}
	got = nil
	if err := s.Range(nil, func(r backend.Record) bool { got = append(got, string(r.Key)); return false }); err != nil || len(got) != 1 || got[0] != "r1" {
		t.Fatalf("Range(nil) stopped after the first = %q, %v; want [r1]", got, err)
	}
}
