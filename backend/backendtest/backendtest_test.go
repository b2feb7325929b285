package backendtest_test

import (
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
