package engine_test

import (
	"sync"
	"testing"
	"time"

	"github.com/sluice-go/sluice/algo"
	"github.com/sluice-go/sluice/backend"
	"github.com/sluice-go/sluice/backend/backendtest"
	"github.com/sluice-go/sluice/backend/faulty"
	"github.com/sluice-go/sluice/backend/memory"
	"github.com/sluice-go/sluice/engine"
)

// t0 is the start of every fixed timeline: a whole minute, far from zero.
var t0 = time.Unix(1_700_000_040, 0)

// mapBackend is a plain map with expiry: the simplest correct backend, used
// as the engine's non-striped path and as the model the others must match.
// With keepExpired it ignores expiry altogether and never forgets a record.
type mapBackend struct {
	mu          sync.Mutex // guards m, closed and evicted
	m           map[string]mapRecord
	closed      bool
	keepExpired bool
	evicted     uint64 // records Sweep removed
}

type mapRecord struct {
	value     []byte
	expiresAt int64
}

func newMapBackend() *mapBackend { return &mapBackend{m: map[string]mapRecord{}} }

func (b *mapBackend) Get(key []byte, now int64) ([]byte, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, backend.ErrClosed
	}
	r, ok := b.m[string(key)]
	if !ok || (!b.keepExpired && r.expiresAt > 0 && r.expiresAt <= now) {
		return nil, nil
	}
	return append([]byte(nil), r.value...), nil
}

func (b *mapBackend) Put(key, value []byte, expiresAt int64) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return backend.ErrClosed
	}
	b.m[string(key)] = mapRecord{append([]byte(nil), value...), expiresAt}
	return nil
}

func (b *mapBackend) Delete(key []byte) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return backend.ErrClosed
	}
	delete(b.m, string(key))
	return nil
}

// Sweep removes every record expired at now (none with keepExpired).
func (b *mapBackend) Sweep(now int64, _ int) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return 0, backend.ErrClosed
	}
	n := 0
	for k, r := range b.m {
		if !b.keepExpired && r.expiresAt > 0 && r.expiresAt <= now {
			delete(b.m, k)
			n++
		}
	}
	b.evicted += uint64(n)
	return n, nil
}

func (b *mapBackend) Len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.m)
}

func (b *mapBackend) Evictions() uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.evicted
}

func (b *mapBackend) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	return nil
}

// store is a kind of store an engine test runs over. open returns a new,
// empty one; a store with a clock of its own (the swap store) keeps time by
// clock, the engine's.
type store struct {
	name string
	open func(clock engine.Clock) backend.Backend
}

// backends are the stores every engine test runs over: the memory store (the
// striped path, devirtualised), the memory store behind faulty's wrapper (the
// same path through backend.Striped), a plain map under the engine's own
// locks, and the in-process backend.Swapper (the compare-and-swap path).
var backends = []store{
	{"memory", func(engine.Clock) backend.Backend { return memory.New(&memory.Options{SweepInterval: -1, Shards: 16}) }},
	{"faulty-memory", func(engine.Clock) backend.Backend {
		b, _ := faulty.Wrap(memory.New(&memory.Options{SweepInterval: -1, Shards: 16}))
		return b
	}},
	{"plain", func(engine.Clock) backend.Backend { return newMapBackend() }},
	{"swap", openSwapStore},
}

// openSwapStore returns an in-process Swapper keeping time by clock (the
// system clock when nil).
func openSwapStore(clock engine.Clock) backend.Backend {
	if clock == nil {
		clock = engine.SystemClock{}
	}
	return backendtest.NewSwapStore(&backendtest.SwapOptions{Now: clock.Now})
}

// openEngine returns an engine on clock over a new store of kind open.
func openEngine(t testing.TB, open func(engine.Clock) backend.Backend, clock engine.Clock) *engine.Engine {
	t.Helper()
	return newEngine(t, open(clock), clock)
}

func newEngine(t testing.TB, b backend.Backend, clock engine.Clock) *engine.Engine {
	t.Helper()
	e, err := engine.New(b, &engine.Options{Clock: clock, Stripes: 16})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

func limit(name algo.Name, p algo.Params, ns string) engine.Limit {
	return engine.Limit{Namespace: ns, Algorithm: algo.MustNew(name, p)}
}
