package backendtest_test

import (
	"context"
	"sync"
	"testing"

	"github.com/sluice-go/sluice/backend"
	"github.com/sluice-go/sluice/backend/backendtest"
)

// mapBackend is the simplest correct backend: a locked map. Running the
// suite against it checks the suite itself.
type mapBackend struct {
	mu     sync.Mutex // guards recs and closed
	recs   map[string]mapRecord
	closed bool
}

type mapRecord struct {
	value     []byte
	expiresAt int64
}

func (b *mapBackend) Get(key []byte, now int64) ([]byte, error) {
	if len(key) == 0 {
		return nil, backend.ErrEmptyKey
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, backend.ErrClosed
	}
	r, ok := b.recs[string(key)]
	if !ok || (r.expiresAt > 0 && r.expiresAt <= now) {
		return nil, nil
	}
	return append([]byte{}, r.value...), nil
}

func (b *mapBackend) Put(key, value []byte, expiresAt int64) error {
	if len(key) == 0 {
		return backend.ErrEmptyKey
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return backend.ErrClosed
	}
	b.recs[string(key)] = mapRecord{append([]byte{}, value...), expiresAt}
	return nil
}

func (b *mapBackend) Delete(key []byte) error {
	if len(key) == 0 {
		return backend.ErrEmptyKey
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return backend.ErrClosed
	}
	delete(b.recs, string(key))
	return nil
}

func (b *mapBackend) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	b.recs = nil
	return nil
}

func (b *mapBackend) Len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.recs)
}

// Evictions is zero: the map never sweeps (expired records read as absent
// and stay until overwritten or deleted).
func (b *mapBackend) Evictions() uint64 { return 0 }

func TestMapBackend(t *testing.T) {
	backendtest.Run(t, func(t *testing.T) backend.Backend {
		return &mapBackend{recs: map[string]mapRecord{}}
	})
}

func TestSwapStore(t *testing.T) {
	open := func(t *testing.T) backend.Swapper { return backendtest.NewSwapStore(nil) }
	backendtest.Run(t, func(t *testing.T) backend.Backend { return open(t) })
	backendtest.RunSwapper(t, open)
	t.Run("no clock", func(t *testing.T) {
		backendtest.RunSwapper(t, func(t *testing.T) backend.Swapper {
			return backendtest.NewSwapStore(&backendtest.SwapOptions{NoClock: true})
		})
	})
}

// TestSwapStoreKeepLengthens checks the Keep of a swap with a TTL: a record
// that would expire sooner is kept until then, one that would not is left,
// and the value is never touched.
func TestSwapStoreKeepLengthens(t *testing.T) {
	now := int64(1_000)
	s := backendtest.NewSwapStore(&backendtest.SwapOptions{Now: func() int64 { return now }})
	defer s.Close()
	k := []byte("k")
	swap := func(w backend.Swap) {
		t.Helper()
		if ok, cur, _, err := s.CompareAndSwap(context.Background(), []backend.Swap{w}); !ok || err != nil {
			t.Fatalf("CompareAndSwap(%+v) = %v, %q, %v", w, ok, cur, err)
		}
	}
	swap(backend.Swap{Key: k, Value: []byte("v"), TTL: 10})                                    // until 1010
	swap(backend.Swap{Key: k, Expected: []byte("v"), Value: []byte("x"), TTL: 50, Keep: true}) // until 1050
	swap(backend.Swap{Key: k, Expected: []byte("v"), TTL: 20, Keep: true})                     // sooner: still 1050
	now = 1049
	swap(backend.Swap{Key: k, Expected: []byte("v"), Keep: true})
	now = 1050
	if ok, cur, _, _ := s.CompareAndSwap(context.Background(), []backend.Swap{{Key: k, Expected: []byte("v"), Keep: true}}); ok || cur[0] != nil {
		t.Fatalf("at 1050 the record is %q, want expired", cur)
	}
	// An expired record is absent: a Keep that lengthens revives nothing.
	swap(backend.Swap{Key: k, TTL: 100, Keep: true})
	if ok, cur, _, _ := s.CompareAndSwap(context.Background(), []backend.Swap{{Key: k, Expected: []byte("v"), Keep: true}}); ok || cur[0] != nil {
		t.Fatalf("after a Keep over the expired record it is %q, want still expired", cur)
	}
}
