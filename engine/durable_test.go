package engine_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/sluice-go/sluice/algo"
	"github.com/sluice-go/sluice/backend"
	"github.com/sluice-go/sluice/backend/bolt"
	"github.com/sluice-go/sluice/backend/faulty"
	"github.com/sluice-go/sluice/backend/pebble"
	"github.com/sluice-go/sluice/engine"
)

// durables open a store on dir; sweepers are off because a fake clock
// drives the tests.
var durables = []struct {
	name string
	open func(t testing.TB, dir string) backend.Durable
}{
	{"pebble", func(t testing.TB, dir string) backend.Durable {
		s, err := pebble.Open(dir, &pebble.Options{SweepInterval: -1})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}},
	{"bolt", func(t testing.TB, dir string) backend.Durable {
		s, err := bolt.Open(dir, &bolt.Options{SweepInterval: -1})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}},
}

var modes = []engine.Durability{engine.Interval, engine.Sync}

func openDurable(t testing.TB, b backend.Backend, clock engine.Clock, mode engine.Durability) *engine.Engine {
	t.Helper()
	e, err := engine.New(b, &engine.Options{Clock: clock, Durability: mode, Stripes: 8, FlushInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// TestDurableModelEquivalence is DESIGN.md property 5 over the durable
// backends: random traces with restarts (close, reopen the directory, new
// engine) and flushes interleaved answer exactly what the map model answers.
func TestDurableModelEquivalence(t *testing.T) {
	fewerChecksUnderRace(t, 4)
	for _, d := range durables {
		for _, mode := range modes {
			t.Run(d.name+"/"+mode.String(), func(t *testing.T) {
				rapid.Check(t, func(rt *rapid.T) {
					dir := t.TempDir()
					limits := genLimits(rt)
					clock := engine.NewFakeClock(t0)
					e := openDurable(t, d.open(t, dir), clock, mode)
					defer func() { e.Close() }()
					m := &model{recs: map[string]modelRecord{}}
					for i := range rapid.IntRange(1, 60).Draw(rt, "ops") {
						switch rapid.IntRange(0, 9).Draw(rt, "op") {
						case 0:
							step := genStep(rt)
							clock.Advance(max(step, -step))
						case 1:
							if err := e.Close(); err != nil {
								rt.Fatalf("op %d: Close: %v", i, err)
							}
							e = openDurable(t, d.open(t, dir), clock, mode)
						case 2:
							if err := e.Flush(context.Background()); err != nil {
								rt.Fatal(err)
							}
						case 3:
							l := rapid.SampledFrom(limits).Draw(rt, "limit")
							key := rapid.SampledFrom(propKeys).Draw(rt, "key")
							if err := e.Reset(context.Background(), l, key); err != nil {
								rt.Fatal(err)
							}
							delete(m.recs, string(engine.AppendKey(nil, l.Namespace, key)))
						default:
							l := rapid.SampledFrom(limits).Draw(rt, "limit")
							key := rapid.SampledFrom(propKeys).Draw(rt, "key")
							cost := rapid.Int64Range(1, l.Algorithm.Params().Capacity()).Draw(rt, "cost")
							got, err := e.Apply(context.Background(), l, key, cost)
							if err != nil {
								rt.Fatalf("op %d: %v", i, err)
							}
							if want := m.apply(l, key, clock.Now(), cost); got != want {
								rt.Fatalf("op %d: %s %q cost %d:\n got %+v\nwant %+v", i, l.Namespace, key, cost, got, want)
							}
						}
					}
				})
			})
		}
	}
}

// fewerChecksUnderRace divides rapid's checks (-rapid.checks, 100 by
// default) by div for the rest of t, a test that runs no other in
// parallel, under the race detector: a property whose every check opens
// real stores costs several times more there, and make full runs it again
// at the full count in a normal build.
func fewerChecksUnderRace(t *testing.T, div int) {
	t.Helper()
	if !raceEnabled {
		return
	}
	f := flag.Lookup("rapid.checks")
	if f == nil {
		t.Fatal("rapid registers no -rapid.checks flag")
	}
	was := f.Value.String()
	n, err := strconv.Atoi(was)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Value.Set(strconv.Itoa(max(1, n/div))); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Value.Set(was) })
}

func TestRestartKeepsTheBudget(t *testing.T) {
	for _, d := range durables {
		for _, mode := range modes {
			t.Run(d.name+"/"+mode.String(), func(t *testing.T) {
				dir := t.TempDir()
				clock := engine.NewFakeClock(t0)
				l := limit(algo.TokenBucketName, fivePerMinute, "orders-write")
				e := openDurable(t, d.open(t, dir), clock, mode)
				for range 7 {
					e.Apply(context.Background(), l, "u-1", 1)
				}
				if err := e.Close(); err != nil {
					t.Fatal(err)
				}
				clock.Advance(3 * time.Second)
				e = openDurable(t, d.open(t, dir), clock, mode)
				defer e.Close()
				dec, err := e.Apply(context.Background(), l, "u-1", 1)
				if err != nil {
					t.Fatal(err)
				}
				if dec.Allowed || dec.RetryAfter != 9*time.Second {
					t.Fatalf("after restart: allowed %v, retry %v; want denied, retry 9s", dec.Allowed, dec.RetryAfter)
				}
				if n := e.Len(); n != 1 {
					t.Fatalf("keys in memory after one decision = %d, want 1 (loaded lazily)", n)
				}
			})
		}
	}
}

func TestFailedFlushIsRetriedAndLosesNothing(t *testing.T) {
	for _, d := range durables {
		t.Run(d.name, func(t *testing.T) {
			dir := t.TempDir()
			clock := engine.NewFakeClock(t0)
			b, f := faulty.Wrap(d.open(t, dir))
			e := openDurable(t, b, clock, engine.Interval)
			l := limit(algo.FixedWindowName, algo.Params{Limit: 10, Window: time.Hour}, "x")
			for range 4 {
				e.Apply(context.Background(), l, "k", 1)
			}
			addRule(t, f, faulty.Rule{Ops: []faulty.Op{faulty.OpWriteBatch}, Times: 2, Err: faulty.ErrInjected})
			for range 2 {
				if err := e.Flush(context.Background()); !errors.Is(err, faulty.ErrInjected) {
					t.Fatalf("Flush with a failing disk = %v, want the disk's error", err)
				}
			}
			if s := e.Stats(); s.FlushErrors != 2 || s.Dirty != 1 {
				t.Fatalf("stats after two failed flushes: %+v; want 2 flush errors and the record still dirty", s)
			}
			e.Apply(context.Background(), l, "k", 1) // spending goes on while the disk is down
			if err := e.Close(); err != nil {
				t.Fatalf("Close (its flush should now succeed): %v", err)
			}
			e = openDurable(t, d.open(t, dir), clock, engine.Interval)
			defer e.Close()
			if d, _ := e.Peek(context.Background(), l, "k", 1); d.Remaining != 4 {
				t.Fatalf("remaining after restart = %d, want 4 (5 spent, then this peek)", d.Remaining)
			}
		})
	}
}

func TestFailedSyncCommitIsAnErrorAndTheNextCallWorks(t *testing.T) {
	for _, d := range durables {
		t.Run(d.name, func(t *testing.T) {
			dir := t.TempDir()
			clock := engine.NewFakeClock(t0)
			b, f := faulty.Wrap(d.open(t, dir))
			e := openDurable(t, b, clock, engine.Sync)
			l := limit(algo.FixedWindowName, algo.Params{Limit: 10, Window: time.Hour}, "x")
			e.Apply(context.Background(), l, "k", 1)
			addRule(t, f, faulty.Rule{Ops: []faulty.Op{faulty.OpWriteBatch}, Times: 1, Err: faulty.ErrInjected})
			if _, err := e.Apply(context.Background(), l, "k", 1); !errors.Is(err, engine.ErrStore) || !errors.Is(err, faulty.ErrInjected) {
				t.Fatalf("Apply with a failing commit = %v, want ErrStore wrapping the cause", err)
			}
			dec, err := e.Apply(context.Background(), l, "k", 1)
			if err != nil || !dec.Allowed {
				t.Fatalf("next Apply: %+v, %v", dec, err)
			}
			// The failed call's spending was kept (never refunded) and its
			// record reached the disk with the next commit.
			if dec.Remaining != 7 {
				t.Fatalf("remaining = %d, want 7", dec.Remaining)
			}
			if err := e.Close(); err != nil {
				t.Fatal(err)
			}
			e = openDurable(t, d.open(t, dir), clock, engine.Sync)
			defer e.Close()
			if d, _ := e.Peek(context.Background(), l, "k", 1); d.Remaining != 6 {
				t.Fatalf("remaining after restart = %d, want 6", d.Remaining)
			}
		})
	}
}

// TestGroupCommit: concurrent callers in Sync mode share commits.
func TestGroupCommit(t *testing.T) {
	e := openDurable(t, durables[0].open(t, t.TempDir()), engine.NewFakeClock(t0), engine.Sync)
	defer e.Close()
	l := limit(algo.TokenBucketName, algo.Params{Limit: 1000, Window: time.Second}, "x")
	const callers, each = 32, 8
	var wg sync.WaitGroup
	for g := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				if _, err := e.Apply(context.Background(), l, fmt.Sprintf("k-%d-%d", g, i), 1); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	if c := e.Stats().Commits; c >= callers*each {
		t.Fatalf("%d commits for %d decisions: no group commit", c, callers*each)
	}
}

func TestBackpressureBoundsTheDirtySet(t *testing.T) {
	dir := t.TempDir()
	e, err := engine.New(durables[0].open(t, dir), &engine.Options{
		Clock: engine.NewFakeClock(t0), FlushInterval: time.Hour, MaxDirty: 100,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	l := limit(algo.GCRAName, fivePerMinute, "x")
	for i := range 1000 {
		e.Apply(context.Background(), l, fmt.Sprintf("k-%d", i), 1)
		if d := e.Stats().Dirty; d > 101 {
			t.Fatalf("after %d keys %d records are dirty, over the bound of 100", i+1, d)
		}
	}
	if e.Stats().Flushes == 0 {
		t.Fatal("no flush happened")
	}
}

// TestExpiredKnownKeyIsNotReadFromDisk: a key whose cached record expired is
// decided afresh without a disk read, since the disk's copy is never newer
// than the cache's; a key the process has not seen since it started is
// still read from disk, so spending recorded before a restart counts.
func TestExpiredKnownKeyIsNotReadFromDisk(t *testing.T) {
	for _, d := range durables {
		for _, mode := range modes {
			t.Run(fmt.Sprintf("%s/%v", d.name, mode), func(t *testing.T) {
				dir := t.TempDir()
				clock := engine.NewFakeClock(t0)
				l := limit(algo.GCRAName, algo.Params{Limit: 2, Window: time.Second}, "g")
				b, f := faulty.Wrap(d.open(t, dir))
				e := openDurable(t, b, clock, mode)
				for range 2 {
					e.Apply(context.Background(), l, "k", 1)
				}
				loads := f.Calls(faulty.OpLoad)
				clock.Advance(time.Hour) // the record has long expired
				if d, err := e.Apply(context.Background(), l, "k", 1); err != nil || !d.Allowed || d.Remaining != 1 {
					t.Fatalf("after the record expired: %+v, %v", d, err)
				}
				if n := f.Calls(faulty.OpLoad) - loads; n != 0 {
					t.Fatalf("an expired known key read the disk %d times", n)
				}
				e.Apply(context.Background(), l, "k", 1)
				if err := e.Close(); err != nil {
					t.Fatal(err)
				}
				// A new process has seen nothing: it reads the disk.
				b2, f2 := faulty.Wrap(d.open(t, dir))
				e2 := openDurable(t, b2, clock, mode)
				defer e2.Close()
				if d, err := e2.Apply(context.Background(), l, "k", 1); err != nil || d.Allowed {
					t.Fatalf("after a restart the spent key answered %+v, %v; want denied", d, err)
				}
				if f2.Calls(faulty.OpLoad) == 0 {
					t.Fatal("after a restart the key was not read from disk")
				}
			})
		}
	}
}

// TestManyExpiredKnownKeysAreNotReadFromDisk: what
// TestExpiredKnownKeyIsNotReadFromDisk checks for one key holds for 20,000
// keys too, after a flush and a sweep of the expired records: a key this
// process loaded is not read from disk again when its record has expired,
// though 20,000 other keys were seen with it.
func TestManyExpiredKnownKeysAreNotReadFromDisk(t *testing.T) {
	const keys = 20_000
	clock := engine.NewFakeClock(t0)
	l := limit(algo.TokenBucketName, algo.Params{Limit: 2, Window: time.Second}, "m")
	b, f := faulty.Wrap(durables[0].open(t, t.TempDir()))
	e := openDurable(t, b, clock, engine.Interval)
	defer e.Close()
	for i := range keys {
		if d, err := e.Apply(context.Background(), l, fmt.Sprintf("k-%d", i), 1); err != nil || !d.Allowed {
			t.Fatalf("key %d: %+v, %v", i, d, err)
		}
	}
	if err := e.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	loads := f.Calls(faulty.OpLoad)
	clock.Advance(time.Hour) // every record has long expired
	// The cache forgets every expired entry, as its sweeper would in its
	// own time: what is left to tell that the disk's records expired too
	// is the tier's memory of the keys it has seen.
	swept := 0
	for {
		n, err := e.Sweep(1 << 20)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
		swept += n
	}
	if e.Len() != 0 {
		t.Fatalf("%d records are left after sweeping (%d swept)", e.Len(), swept)
	}
	for i := range keys {
		if d, err := e.Apply(context.Background(), l, fmt.Sprintf("k-%d", i), 1); err != nil || !d.Allowed || d.Remaining != 1 {
			t.Fatalf("key %d after its record expired: %+v, %v", i, d, err)
		}
	}
	if n := f.Calls(faulty.OpLoad) - loads; n != 0 {
		t.Fatalf("%d of %d expired known keys were read from disk again", n, keys)
	}
}
