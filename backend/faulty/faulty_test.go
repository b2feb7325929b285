package faulty_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-go/sluice/algo"
	"github.com/sluice-go/sluice/backend"
	"github.com/sluice-go/sluice/backend/backendtest"
	"github.com/sluice-go/sluice/backend/bolt"
	"github.com/sluice-go/sluice/backend/faulty"
	"github.com/sluice-go/sluice/backend/memory"
	"github.com/sluice-go/sluice/backend/pebble"
	"github.com/sluice-go/sluice/engine"
)

// plain is a plain backend, on no path but the engine's own locks: a map with expiry.
type plain struct {
	mu sync.Mutex // guards m
	m  map[string][]byte
}

func (p *plain) Get(k []byte, now int64) ([]byte, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return bytes.Clone(p.m[string(k)]), nil
}

func (p *plain) Put(k, v []byte, exp int64) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.m[string(k)] = bytes.Clone(v)
	return nil
}

func (p *plain) Delete(k []byte) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.m, string(k))
	return nil
}

func (p *plain) Close() error { return nil }

func TestConformance(t *testing.T) {
	t.Run("memory", func(t *testing.T) {
		backendtest.Run(t, func(t *testing.T) backend.Backend {
			b, _ := faulty.Wrap(memory.New(&memory.Options{SweepInterval: -1}))
			return b
		})
	})
	t.Run("pebble", func(t *testing.T) {
		if testing.Short() {
			t.Skip("pebble conformance under the wrapper is slow")
		}
		backendtest.Run(t, func(t *testing.T) backend.Backend {
			s, err := pebble.Open(t.TempDir(), nil)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := faulty.Wrap(s)
			return b
		})
	})
}

// capabilities lists which interfaces of package backend b implements.
func capabilities(b backend.Backend) [5]bool {
	_, s := b.(backend.Striped)
	_, d := b.(backend.Durable)
	_, w := b.(backend.Swapper)
	_, c := b.(backend.Stats)
	_, sw := b.(backend.Sweeper)
	return [5]bool{s, d, w, c, sw}
}

// counted, swept and kept are plain stores with backend.Stats, with
// backend.Sweeper and with both.
type counted struct{ plain }

func (c *counted) Len() int          { return len(c.m) }
func (c *counted) Evictions() uint64 { return 0 }

type swept struct{ plain }

func (s *swept) Sweep(int64, int) (int, error) { return 0, nil }

type kept struct{ counted }

func (k *kept) Sweep(int64, int) (int, error) { return 0, nil }

// bareSwapper is a swap store without its backend.Stats and
// backend.Sweeper, as Redis is.
type bareSwapper struct{ backend.Swapper }

func TestForwardsExactlyTheInnerInterfaces(t *testing.T) {
	ps, err := pebble.Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	bs, err := bolt.Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	mem := memory.New(nil)
	inner := map[string]backend.Backend{
		"memory": mem, "pebble": ps, "bolt": bs,
		"plain":              &plain{m: map[string][]byte{}},
		"plain+stats":        &counted{plain{m: map[string][]byte{}}},
		"plain+sweeper":      &swept{plain{m: map[string][]byte{}}},
		"plain+both":         &kept{counted{plain{m: map[string][]byte{}}}},
		"swap+stats+sweeper": backendtest.NewSwapStore(nil),
		"swap":               bareSwapper{backendtest.NewSwapStore(nil)},
		"swap+stats": struct {
			backend.Swapper
			backend.Stats
		}{backendtest.NewSwapStore(nil), backendtest.NewSwapStore(nil)},
		"swap+sweeper": struct {
			backend.Swapper
			backend.Sweeper
		}{backendtest.NewSwapStore(nil), backendtest.NewSwapStore(nil)},
	}
	for name, b := range inner {
		w, _ := faulty.Wrap(b)
		if got, want := capabilities(w), capabilities(b); got != want {
			t.Errorf("%s: wrapper implements [Striped Durable Swapper Stats Sweeper] = %v, inner %v", name, got, want)
		}
		ww, _ := faulty.Wrap(w)
		if got, want := capabilities(ww), capabilities(b); got != want {
			t.Errorf("%s wrapped twice: %v, want %v", name, got, want)
		}
		if err := w.Close(); err != nil {
			t.Errorf("%s: Close = %v", name, err)
		}
	}
}

func mustAdd(t *testing.T, f *faulty.Faults, r faulty.Rule) faulty.ID {
	t.Helper()
	id, err := f.Add(r)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func TestRuleSkipTimesMatch(t *testing.T) {
	b, f := faulty.Wrap(&plain{m: map[string][]byte{}})
	errA := errors.New("a")
	mustAdd(t, f, faulty.Rule{Ops: []faulty.Op{faulty.OpPut}, Skip: 1, Times: 2, Err: errA})
	var got []bool
	for range 5 {
		got = append(got, b.Put([]byte("k"), []byte("v"), 0) != nil)
	}
	if want := []bool{false, true, true, false, false}; !slices.Equal(got, want) {
		t.Fatalf("Put failures %v, want %v (skip 1, fail 2)", got, want)
	}
	if err := b.Delete([]byte("k")); err != nil {
		t.Fatalf("Delete faulted by a Put rule: %v", err)
	}
	mustAdd(t, f, faulty.Rule{Ops: faulty.Reads, Match: func(c faulty.Call) bool { return string(c.Key) == "bad" }, Err: errA})
	if _, err := b.Get([]byte("good"), 0); err != nil {
		t.Fatalf("Get(good) = %v", err)
	}
	for range 3 {
		if _, err := b.Get([]byte("bad"), 0); !errors.Is(err, errA) {
			t.Fatalf("Get(bad) = %v, want the rule's error (no Times: until cleared)", err)
		}
	}
	if got, want := f.Calls(faulty.OpPut), 5; got != want {
		t.Errorf("Calls(Put) = %d, want %d", got, want)
	}
	if got, want := f.Calls(faulty.OpGet), 4; got != want {
		t.Errorf("Calls(Get) = %d, want %d", got, want)
	}
	if got, want := f.Faulted(), 5; got != want {
		t.Errorf("Faulted = %d, want %d", got, want)
	}
	f.Clear()
	if _, err := b.Get([]byte("bad"), 0); err != nil {
		t.Fatalf("after Clear: %v", err)
	}
}

func TestRuleByCallNumberAndRemove(t *testing.T) {
	b, f := faulty.Wrap(&plain{m: map[string][]byte{}})
	id := mustAdd(t, f, faulty.Rule{Ops: []faulty.Op{faulty.OpDelete}, Match: func(c faulty.Call) bool { return c.N%2 == 0 }, Err: faulty.ErrInjected})
	for n := 1; n <= 4; n++ {
		err := b.Delete([]byte("k"))
		if want := n%2 == 0; (err != nil) != want || (err != nil && !errors.Is(err, faulty.ErrInjected)) {
			t.Fatalf("Delete #%d = %v, want failure %v", n, err, want)
		}
	}
	f.Remove(id)
	if err := b.Delete([]byte("k")); err != nil {
		t.Fatal(err)
	}
	if err := b.Delete([]byte("k")); err != nil {
		t.Fatalf("after Remove, call #6: %v", err)
	}
}

func TestCorruptDelayHold(t *testing.T) {
	b, f := faulty.Wrap(memory.New(nil))
	defer b.Close()
	if err := b.Put([]byte("k"), []byte("good"), 0); err != nil {
		t.Fatal(err)
	}
	mustAdd(t, f, faulty.Rule{Ops: faulty.Reads, Times: 1, Corrupt: faulty.Garbage([]byte{0xff, 0})})
	if v, err := b.Get([]byte("k"), 0); err != nil || !bytes.Equal(v, []byte{0xff, 0}) {
		t.Fatalf("corrupted Get = %x, %v", v, err)
	}
	if v, _ := b.Get([]byte("k"), 0); string(v) != "good" {
		t.Fatalf("the stored record changed: %q", v)
	}

	mustAdd(t, f, faulty.Rule{Ops: []faulty.Op{faulty.OpPut}, Times: 1, Delay: 30 * time.Millisecond})
	start := time.Now()
	if err := b.Put([]byte("k"), []byte("slow"), 0); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 30*time.Millisecond {
		t.Fatalf("delayed Put took %v", d)
	}

	hold := make(chan struct{})
	mustAdd(t, f, faulty.Rule{Ops: []faulty.Op{faulty.OpDelete}, Times: 1, Hold: hold})
	done := make(chan error)
	go func() { done <- b.Delete([]byte("k")) }()
	select {
	case err := <-done:
		t.Fatalf("held Delete returned %v before release", err)
	case <-time.After(20 * time.Millisecond):
	}
	close(hold)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if v, _ := b.Get([]byte("k"), 0); v != nil {
		t.Fatalf("released Delete did not delete: %q", v)
	}
}

func TestAddRefusesBadRules(t *testing.T) {
	_, f := faulty.Wrap(&plain{m: map[string][]byte{}})
	for name, r := range map[string]faulty.Rule{
		"no effect":   {Ops: []faulty.Op{faulty.OpGet}},
		"unknown op":  {Ops: []faulty.Op{faulty.Op(200)}, Err: faulty.ErrInjected},
		"zero op":     {Ops: []faulty.Op{0}, Err: faulty.ErrInjected},
		"negative":    {Times: -1, Err: faulty.ErrInjected},
		"negative sk": {Skip: -2, Err: faulty.ErrInjected},
	} {
		if _, err := f.Add(r); err == nil {
			t.Errorf("%s: Add accepted %+v", name, r)
		}
	}
}

// TestEngineKeepsItsPath: over a wrapped store the engine takes the path it
// takes over the bare store: the durable tier over Pebble (reads through
// Load, writes through WriteBatch), the store's stripes over memory (reads
// through GetLocked, never the plain Get).
func TestEngineKeepsItsPath(t *testing.T) {
	l := engine.Limit{Namespace: "x", Algorithm: algo.MustNew(algo.TokenBucketName, algo.Params{Limit: 5, Window: time.Minute})}

	ps, err := pebble.Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	pb, pf := faulty.Wrap(ps)
	e, err := engine.New(pb, &engine.Options{FlushInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Apply(context.Background(), l, "k", 1); err != nil {
		t.Fatal(err)
	}
	if err := e.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if pf.Calls(faulty.OpLoad) != 1 || pf.Calls(faulty.OpWriteBatch) != 1 || pf.Calls(faulty.OpGet)+pf.Calls(faulty.OpPut) != 0 {
		t.Errorf("pebble: Load %d, WriteBatch %d, Get %d, Put %d; want the durable tier's 1, 1, 0, 0",
			pf.Calls(faulty.OpLoad), pf.Calls(faulty.OpWriteBatch), pf.Calls(faulty.OpGet), pf.Calls(faulty.OpPut))
	}
	if s := e.Stats(); s.Flushes != 1 {
		t.Errorf("pebble: %d flushes, want 1", s.Flushes)
	}
	e.Close()

	mb, mf := faulty.Wrap(memory.New(nil))
	e, err = engine.New(mb, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if _, err := e.Apply(context.Background(), l, "k", 1); err != nil {
		t.Fatal(err)
	}
	if mf.Calls(faulty.OpGetLocked) != 1 || mf.Calls(faulty.OpPutLocked) != 1 || mf.Calls(faulty.OpGet) != 0 {
		t.Errorf("memory: GetLocked %d, PutLocked %d, Get %d; want 1, 1, 0",
			mf.Calls(faulty.OpGetLocked), mf.Calls(faulty.OpPutLocked), mf.Calls(faulty.OpGet))
	}
	if s := e.Stats(); s.Keys != 1 {
		t.Errorf("memory: Keys = %d, want 1 (Stats forwarded)", s.Keys)
	}

	wb, wf := faulty.Wrap(&plain{m: map[string][]byte{}})
	e, err = engine.New(wb, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if _, err := e.Apply(context.Background(), l, "k", 1); err != nil {
		t.Fatal(err)
	}
	if wf.Calls(faulty.OpGet) != 1 || wf.Calls(faulty.OpPut) != 1 || wf.Calls(faulty.OpGetLocked) != 0 {
		t.Errorf("plain: Get %d, Put %d, GetLocked %d; want 1, 1, 0 (the engine's own locks)",
			wf.Calls(faulty.OpGet), wf.Calls(faulty.OpPut), wf.Calls(faulty.OpGetLocked))
	}
	if s := e.Stats(); s.Keys != -1 {
		t.Errorf("plain: Keys = %d, want -1 (the store does not count)", s.Keys)
	}
}

// TestEngineKeepsTheSwapPath: over a wrapped backend.Swapper the engine
// takes the path it takes over the bare store, call for call: the same
// decisions, compare-and-swaps, conflicts and local denials; an ApplyAll
// over keys of two groups committed group by group (the store refuses a
// compare-and-swap over several, ErrCrossGroup); and a Reset through
// another engine heard through the store's watch of deletions, so that the
// denial this engine held is forgotten.
func TestEngineKeepsTheSwapPath(t *testing.T) {
	x := engine.Limit{Namespace: "x", Algorithm: algo.MustNew(algo.TokenBucketName, algo.Params{Limit: 1, Window: time.Hour})}
	y := engine.Limit{Namespace: "y", Algorithm: algo.MustNew(algo.FixedWindowName, algo.Params{Limit: 10, Window: time.Hour})}
	// group puts keys in groups by the caller key's first byte, as a
	// Cluster does by hash tag.
	group := func(k []byte) string {
		_, key, _ := engine.SplitKey(k)
		return key[:1]
	}
	run := func(t *testing.T, wrap bool) ([]string, engine.Stats) {
		clock := engine.NewFakeClock(time.Unix(1_700_000_000, 0))
		store := backendtest.NewSwapStore(&backendtest.SwapOptions{Now: clock.Now, Group: group})
		var b backend.Backend = store
		var f *faulty.Faults
		if wrap {
			b, f = faulty.Wrap(store)
		}
		e, err := engine.New(b, &engine.Options{Clock: clock})
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close()
		other, err := engine.New(store, &engine.Options{Clock: clock}) // another process on the same store
		if err != nil {
			t.Fatal(err)
		}
		defer other.Close()
		var log []string
		note := func(what string, v ...any) { log = append(log, what+": "+fmt.Sprint(v...)) }
		for i := range 3 {
			d, err := e.Apply(context.Background(), x, "a1", 1)
			note(fmt.Sprint("apply ", i), d, err)
		}
		if err := other.Reset(context.Background(), x, "a1"); err != nil {
			t.Fatal(err)
		}
		d, err := e.Apply(context.Background(), x, "a1", 1)
		if err != nil || !d.Allowed {
			t.Fatalf("wrapped %v: after another engine's Reset: %+v, %v; want allowed (the watch forgot the denial)", wrap, d, err)
		}
		note("after reset", d, err)
		reqs := []engine.Request{{Limit: x, Key: "b1", Cost: 1}, {Limit: y, Key: "c1", Cost: 1}}
		ds, all, err := e.ApplyAll(context.Background(), reqs)
		if err != nil || !all {
			t.Fatalf("wrapped %v: ApplyAll over two groups = %+v, %v, %v; want all allowed", wrap, ds, all, err)
		}
		note("apply all", ds, all, err)
		ds, all, err = e.ApplyAll(context.Background(), reqs)
		note("apply all again", ds, all, err)
		d, err = e.Peek(context.Background(), y, "c1", 1)
		note("peek", d, err)
		st := e.Stats()
		if wrap {
			if got := f.Calls(faulty.OpCompareAndSwap); uint64(got) != st.Swaps {
				t.Errorf("%d compare-and-swaps through the wrapper, the engine counts %d", got, st.Swaps)
			}
			if got := f.Calls(faulty.OpWatchDeletes); got != 1 {
				t.Errorf("%d watches through the wrapper, want 1", got)
			}
			if got := f.Calls(faulty.OpGet) + f.Calls(faulty.OpPut) + f.Calls(faulty.OpDelete); got != 0 {
				t.Errorf("%d calls of Get, Put and Delete through the wrapper, want none", got)
			}
		}
		return log, st
	}
	bare, bareStats := run(t, false)
	wrapped, wrappedStats := run(t, true)
	if !slices.Equal(bare, wrapped) {
		t.Errorf("over the bare store:\n%s\nover the wrapped one:\n%s", strings.Join(bare, "\n"), strings.Join(wrapped, "\n"))
	}
	if bareStats != wrappedStats {
		t.Errorf("Stats over the bare store %+v, over the wrapped one %+v", bareStats, wrappedStats)
	}
	if bareStats.LocalDenials == 0 {
		t.Errorf("Stats = %+v: no local denial, so the watch was not put to the test", bareStats)
	}
}

// TestDurableOps: the operations only a durable store has are faulted like
// the others, and a failed Close leaves the store open for a retry.
func TestDurableOps(t *testing.T) {
	s, err := pebble.Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, f := faulty.Wrap(s)
	batch, load, ranger := b.(backend.Durable), b.(backend.Durable), b.(backend.Durable)
	mustAdd(t, f, faulty.Rule{Ops: []faulty.Op{faulty.OpWriteBatch, faulty.OpRange, faulty.OpClose}, Times: 3, Err: faulty.ErrInjected})
	writes := []backend.Write{{Key: []byte("a"), Value: []byte("1")}}
	if err := batch.WriteBatch(writes, true); !errors.Is(err, faulty.ErrInjected) {
		t.Fatalf("WriteBatch = %v", err)
	}
	if v, _, _ := load.Load([]byte("a"), 0); v != nil {
		t.Fatalf("a failed WriteBatch wrote %q", v)
	}
	if err := ranger.Range(nil, func(backend.Record) bool { return true }); !errors.Is(err, faulty.ErrInjected) {
		t.Fatalf("Range = %v", err)
	}
	if err := b.Close(); !errors.Is(err, faulty.ErrInjected) {
		t.Fatalf("Close = %v", err)
	}
	if err := batch.WriteBatch(writes, true); err != nil {
		t.Fatalf("WriteBatch after the rule ran out: %v", err)
	}
	mustAdd(t, f, faulty.Rule{Ops: []faulty.Op{faulty.OpLoad}, Times: 1, Corrupt: func(r []byte) []byte { return append(bytes.Clone(r), '!') }})
	if v, exp, err := load.Load([]byte("a"), 0); err != nil || string(v) != "1!" || exp != 0 {
		t.Fatalf("corrupted Load = %q, %d, %v", v, exp, err)
	}
	var keys []string
	if err := ranger.Range(nil, func(r backend.Record) bool { keys = append(keys, string(r.Key)); return true }); err != nil || len(keys) != 1 {
		t.Fatalf("Range = %v, keys %q", err, keys)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if got := f.Calls(faulty.OpClose); got != 2 {
		t.Fatalf("Calls(Close) = %d, want 2", got)
	}
}
