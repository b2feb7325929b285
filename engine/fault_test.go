package engine_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/sluice-go/sluice/algo"
	"github.com/sluice-go/sluice/backend"
	"github.com/sluice-go/sluice/backend/faulty"
	"github.com/sluice-go/sluice/backend/memory"
	"github.com/sluice-go/sluice/backend/pebble"
	"github.com/sluice-go/sluice/engine"
)

// quiet is a logger for tests that provoke warnings on purpose.
var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func addRule(t testing.TB, f *faulty.Faults, r faulty.Rule) faulty.ID {
	t.Helper()
	id, err := f.Add(r)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func openPebble(t testing.TB, dir string) *pebble.Store {
	t.Helper()
	s, err := pebble.Open(dir, &pebble.Options{SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestFailedWriteOfANewKey: over every kind of store a write that fails is an
// ErrStore wrapping the cause, spends nothing, and the next call works.
func TestFailedWriteOfANewKey(t *testing.T) {
	stores := []struct {
		name string
		open func(t *testing.T) backend.Backend
		mode engine.Durability
	}{
		{"plain", func(*testing.T) backend.Backend { return newMapBackend() }, engine.Interval},
		{"memory", func(*testing.T) backend.Backend { return memory.New(&memory.Options{SweepInterval: -1}) }, engine.Interval},
		{"pebble-sync", func(t *testing.T) backend.Backend { return openPebble(t, t.TempDir()) }, engine.Sync},
	}
	for _, s := range stores {
		t.Run(s.name, func(t *testing.T) {
			b, f := faulty.Wrap(s.open(t))
			e := openDurable(t, b, engine.NewFakeClock(t0), s.mode)
			defer e.Close()
			l := limit(algo.TokenBucketName, algo.Params{Limit: 3, Window: time.Minute}, "x")
			addRule(t, f, faulty.Rule{Ops: faulty.Writes, Times: 1, Err: faulty.ErrInjected})
			_, err := e.Apply(context.Background(), l, "new", 1)
			if !errors.Is(err, engine.ErrStore) || !errors.Is(err, faulty.ErrInjected) {
				t.Fatalf("Apply with a failing write = %v, want ErrStore wrapping the cause", err)
			}
			if f.Faulted() != 1 {
				t.Fatalf("%d calls faulted, want 1", f.Faulted())
			}
			d, err := e.Apply(context.Background(), l, "new", 1)
			if err != nil || !d.Allowed {
				t.Fatalf("next Apply: %+v, %v", d, err)
			}
			// Sync mode keeps a failed commit's record in memory and
			// commits it with the next one (spending is never refunded);
			// over the other stores the failed write stored nothing.
			want := int64(2)
			if s.mode == engine.Sync {
				want = 1
			}
			if d.Remaining != want {
				t.Fatalf("remaining %d after one failed and one good call, want %d", d.Remaining, want)
			}
			if got := e.Stats().StoreErrors; got != 1 {
				t.Fatalf("StoreErrors = %d, want 1", got)
			}
		})
	}
}

// TestFailedFlushesAreRetriedInTheBackground: with the flusher on a short
// tick and the disk (Pebble, bbolt) refusing the first batches, every
// admitted request's spending is on disk after the disk recovers and the
// engine closes and is opened again. While the flushes fail, a decision
// that spends is a store error, its spending kept in memory: it is on
// disk too.
func TestFailedFlushesAreRetriedInTheBackground(t *testing.T) {
	for _, d := range durables {
		t.Run(d.name, func(t *testing.T) {
			dir := t.TempDir()
			b, f := faulty.Wrap(d.open(t, dir))
			clock := engine.NewFakeClock(t0)
			e, err := engine.New(b, &engine.Options{Clock: clock, FlushInterval: 2 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			const failures = 5
			addRule(t, f, faulty.Rule{Ops: []faulty.Op{faulty.OpWriteBatch}, Times: failures, Err: faulty.ErrInjected})
			l := limit(algo.FixedWindowName, algo.Params{Limit: 50, Window: time.Hour}, "x")
			admitted := map[string]int64{}
			deadline := time.Now().Add(5 * time.Second)
			for i := 0; e.Stats().Flushes <= failures; i++ {
				if time.Now().After(deadline) {
					t.Fatalf("no successful flush in 5s: %+v", e.Stats())
				}
				key := fmt.Sprintf("k%d", i%7)
				p, err := e.Peek(context.Background(), l, key, 1)
				if err != nil {
					t.Fatal(err)
				}
				d, err := e.Apply(context.Background(), l, key, 1)
				if err != nil {
					if !errors.Is(err, engine.ErrStore) {
						t.Fatalf("Apply while flushes fail = %v, want a store error", err)
					}
					d.Allowed = p.Allowed // spent, or not, in memory
				}
				if d.Allowed {
					admitted[key]++
				}
				time.Sleep(200 * time.Microsecond)
			}
			if s := e.Stats(); s.FlushErrors != failures {
				t.Fatalf("FlushErrors = %d, want %d", s.FlushErrors, failures)
			}
			if err := e.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			e = openDurable(t, d.open(t, dir), clock, engine.Interval)
			defer e.Close()
			for key, n := range admitted {
				// Peek answers as if this request were spent too.
				if d, err := e.Peek(context.Background(), l, key, 1); err != nil || d.Remaining != 50-n-1 {
					t.Errorf("%s after restart: remaining %d, %v; want %d (%d admitted, then the peek)", key, d.Remaining, err, 50-n-1, n)
				}
			}
		})
	}
}

// TestCloseReportsAnUnflushableDisk: when the last flush fails too, Close
// says so rather than dropping the spending in silence.
func TestCloseReportsAnUnflushableDisk(t *testing.T) {
	b, f := faulty.Wrap(openPebble(t, t.TempDir()))
	e := openDurable(t, b, engine.NewFakeClock(t0), engine.Interval)
	l := limit(algo.FixedWindowName, algo.Params{Limit: 5, Window: time.Hour}, "x")
	if _, err := e.Apply(context.Background(), l, "k", 1); err != nil {
		t.Fatal(err)
	}
	addRule(t, f, faulty.Rule{Ops: []faulty.Op{faulty.OpWriteBatch}, Err: faulty.ErrInjected})
	if err := e.Close(); !errors.Is(err, faulty.ErrInjected) {
		t.Fatalf("Close over a disk refusing every batch = %v, want the disk's error", err)
	}
}

// TestCorruptReadsAreCountedAndFresh: whatever bytes a read returns (Get over
// a plain store, GetLocked over memory, Load under the durable tier), Apply
// neither panics nor fails, answers a valid decision, and counts every
// record it had to treat as absent.
func TestCorruptReadsAreCountedAndFresh(t *testing.T) {
	stores := []struct {
		name string
		open func(t *testing.T) backend.Backend
	}{
		{"plain", func(*testing.T) backend.Backend { return newMapBackend() }},
		{"memory", func(*testing.T) backend.Backend { return memory.New(&memory.Options{SweepInterval: -1}) }},
		{"pebble", func(t *testing.T) backend.Backend { return openPebble(t, t.TempDir()) }},
	}
	for _, s := range stores {
		t.Run(s.name, func(t *testing.T) {
			b, f := faulty.Wrap(s.open(t))
			clock := engine.NewFakeClock(t0)
			e, err := engine.New(b, &engine.Options{Clock: clock, FlushInterval: time.Hour, Logger: quiet})
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			var corrupt uint64
			n := 0
			rapid.Check(t, func(rt *rapid.T) {
				name := rapid.SampledFrom(algo.Names).Draw(rt, "algorithm")
				l := limit(name, algo.Params{Limit: 4, Window: time.Minute}, string(name))
				junk := rapid.SliceOfN(rapid.Byte(), 0, 64).Draw(rt, "junk")
				if rapid.Bool().Draw(rt, "tagged") && len(junk) > 0 {
					junk[0] = byte(rapid.IntRange(0, 8).Draw(rt, "tag")) // near a real tag
				}
				n++
				key := fmt.Sprintf("k%d", n) // a cold key, so the durable tier loads it
				id := addRule(t, f, faulty.Rule{Ops: faulty.Reads, Times: 1, Corrupt: faulty.Garbage(junk)})
				defer f.Remove(id)
				d, err := e.Apply(context.Background(), l, key, 1)
				if err != nil {
					rt.Fatalf("%s over %x: %v", name, junk, err)
				}
				if d.CorruptState {
					corrupt++
					if !d.Allowed {
						rt.Fatalf("%s over %x: corrupt record not treated as fresh: %+v", name, junk, d)
					}
				}
				if d.Remaining < 0 || d.Remaining > d.Limit || d.RetryAfter < 0 || d.Reset < 0 || d.TTL < 0 {
					rt.Fatalf("%s over %x: invalid decision %+v", name, junk, d)
				}
				if got := e.Stats().CorruptRecords; got != corrupt {
					rt.Fatalf("CorruptRecords = %d, want %d", got, corrupt)
				}
				clock.Advance(time.Second)
			})
			if corrupt == 0 {
				t.Fatal("no drawn record was corrupt: the test exercised nothing")
			}
		})
	}
}

// stripeKeys returns two keys of namespace ns on one stripe of n and one key
// on another.
func stripeKeys(ns string, n int) (a, sameAsA, other string) {
	stripe := func(k string) uint64 { return backend.Hash(engine.AppendKey(nil, ns, k)) & uint64(n-1) }
	a = "slow"
	for i := 0; sameAsA == "" || other == ""; i++ {
		k := fmt.Sprintf("k%d", i)
		if stripe(k) == stripe(a) {
			if sameAsA == "" {
				sameAsA = k
			}
		} else if other == "" {
			other = k
		}
	}
	return a, sameAsA, other
}

// TestSlowReadHoldsOnlyItsStripe: a read that hangs (a cold load under the
// durable tier, a Get over a plain store) holds its key's stripe lock, as the
// design says the only I/O under a stripe lock is that read. A key on another
// stripe is decided meanwhile; a key on the same stripe waits.
func TestSlowReadHoldsOnlyItsStripe(t *testing.T) {
	stores := []struct {
		name string
		open func(t *testing.T) backend.Backend
		op   faulty.Op
	}{
		{"plain", func(*testing.T) backend.Backend { return newMapBackend() }, faulty.OpGet},
		{"pebble", func(t *testing.T) backend.Backend { return openPebble(t, t.TempDir()) }, faulty.OpLoad},
	}
	for _, s := range stores {
		t.Run(s.name, func(t *testing.T) {
			b, f := faulty.Wrap(s.open(t))
			e := openDurable(t, b, engine.NewFakeClock(t0), engine.Interval) // 8 stripes
			defer e.Close()
			l := limit(algo.GCRAName, fivePerMinute, "x")
			slow, same, other := stripeKeys("x", 8)
			hold := make(chan struct{})
			addRule(t, f, faulty.Rule{
				Ops: []faulty.Op{s.op}, Hold: hold,
				Match: func(c faulty.Call) bool { return string(c.Key) == string(engine.AppendKey(nil, "x", slow)) },
			})
			results := make(chan string, 2)
			apply := func(key string) {
				if _, err := e.Apply(context.Background(), l, key, 1); err != nil {
					t.Error(err)
				}
				results <- key
			}
			go apply(slow)
			for f.Faulted() == 0 {
				time.Sleep(time.Millisecond)
			}
			go apply(same)
			select {
			case <-results:
				t.Fatal("a call finished while the slow read held its stripe")
			case <-time.After(20 * time.Millisecond):
			}
			done := make(chan struct{})
			go func() {
				defer close(done)
				if _, err := e.Apply(context.Background(), l, other, 1); err != nil {
					t.Error(err)
				}
			}()
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				t.Fatal("a key on another stripe waited for the slow read")
			}
			// The key on the other stripe has been decided; the one on the
			// held stripe still waits. (Once the read is released the two
			// finish in either order: the slow call reports after it has
			// unlocked, so nothing more is asserted about the order.)
			select {
			case key := <-results:
				t.Fatalf("%s finished while the slow read held its stripe", key)
			default:
			}
			close(hold)
			got := map[string]bool{<-results: true, <-results: true}
			if !got[slow] || !got[same] {
				t.Fatalf("finished %v, want %s and %s", got, slow, same)
			}
		})
	}
}

// TestSlowFlushBlocksNoDecision: a flush in Interval mode writes its batch
// outside every stripe lock, so a disk that hangs mid-flush delays no
// decision, on any key.
func TestSlowFlushBlocksNoDecision(t *testing.T) {
	b, f := faulty.Wrap(openPebble(t, t.TempDir()))
	e := openDurable(t, b, engine.NewFakeClock(t0), engine.Interval)
	defer e.Close()
	l := limit(algo.TokenBucketName, algo.Params{Limit: 100, Window: time.Minute}, "x")
	for i := range 16 {
		if _, err := e.Apply(context.Background(), l, fmt.Sprintf("k%d", i), 1); err != nil {
			t.Fatal(err)
		}
	}
	hold := make(chan struct{})
	addRule(t, f, faulty.Rule{Ops: []faulty.Op{faulty.OpWriteBatch}, Times: 1, Hold: hold})
	flushed := make(chan error)
	go func() { flushed <- e.Flush(context.Background()) }()
	for f.Faulted() == 0 {
		time.Sleep(time.Millisecond)
	}
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := e.Apply(context.Background(), l, fmt.Sprintf("k%d", i), 1); err != nil {
				t.Error(err)
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("decisions waited for a hanging flush")
	}
	close(hold)
	if err := <-flushed; err != nil {
		t.Fatal(err)
	}
}

// TestDirtyCountsAWriteInFlight: records taken by a flush (Interval) or a
// recommit (Sync) stay counted in Stats().Dirty, and the store stays
// failing, until the disk has them: a caller that waits for Dirty to reach
// zero, the store writing, and then reads the disk finds every spending
// there, and never reads it while the write that holds it is in flight.
func TestDirtyCountsAWriteInFlight(t *testing.T) {
	for _, mode := range []engine.Durability{engine.Interval, engine.Sync} {
		t.Run(mode.String(), func(t *testing.T) {
			b, f := faulty.Wrap(openPebble(t, t.TempDir()))
			e, err := engine.New(b, &engine.Options{Clock: engine.NewFakeClock(t0), Durability: mode, Stripes: 8,
				FlushInterval: time.Hour, Logger: quiet})
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			l := limit(algo.TokenBucketName, algo.Params{Limit: 100, Window: time.Minute}, "x")
			// One failed write, so that the store is failing and the
			// key's record awaits a retry.
			fail := addRule(t, f, faulty.Rule{Ops: []faulty.Op{faulty.OpWriteBatch}, Times: 1, Err: faulty.ErrInjected})
			if _, err := e.Apply(context.Background(), l, "k", 1); err != nil && !errors.Is(err, faulty.ErrInjected) {
				t.Fatal(err)
			}
			if mode == engine.Interval {
				if err := e.Flush(context.Background()); !errors.Is(err, faulty.ErrInjected) {
					t.Fatalf("Flush over a failing disk = %v, want the disk's error", err)
				}
			}
			f.Remove(fail)
			if s := e.Stats(); s.Dirty != 1 || !s.StoreFailing {
				t.Fatalf("after a failed write: Dirty %d, StoreFailing %v; want 1, true", s.Dirty, s.StoreFailing)
			}
			// The retry hangs in the disk's write.
			hold := make(chan struct{})
			before := f.Faulted()
			addRule(t, f, faulty.Rule{Ops: []faulty.Op{faulty.OpWriteBatch}, Times: 1, Hold: hold})
			flushed := make(chan error)
			go func() { flushed <- e.Flush(context.Background()) }()
			for f.Faulted() == before {
				time.Sleep(time.Millisecond)
			}
			if s := e.Stats(); s.Dirty != 1 || !s.StoreFailing {
				t.Errorf("while the retry's write is in flight: Dirty %d, StoreFailing %v; want 1, true (the disk lacks the record)", s.Dirty, s.StoreFailing)
			}
			close(hold)
			if err := <-flushed; err != nil {
				t.Fatal(err)
			}
			if s := e.Stats(); s.Dirty != 0 || s.StoreFailing {
				t.Fatalf("after the retry wrote: Dirty %d, StoreFailing %v; want 0, false", s.Dirty, s.StoreFailing)
			}
		})
	}
}
