package faulty

import (
	"context"
	"time"

	"github.com/sluice-go/sluice/backend"
)

// The wrappers, one per path of package backend: a plain store, a Striped,
// a Durable and a Swapper. Each implements its path whole, forwarding
// every method to the wrapped store through the rules; a plain or swap
// store's backend.Stats and backend.Sweeper are added beside it when the
// wrapped store has them (stats, sweeper), so that the wrapper implements
// exactly what the store does.

// wrap returns inner's wrapper, controlled by f.
func wrap(f *Faults, inner backend.Backend) backend.Backend {
	c := &core{f: f, inner: inner}
	switch b := inner.(type) {
	case backend.Striped:
		return &stripedStore{c, b}
	case backend.Durable:
		return &durableStore{c, b}
	}
	st, counts := inner.(backend.Stats)
	sw, sweeps := inner.(backend.Sweeper)
	s, sc := stats{st}, sweeper{f, sw}
	if b, ok := inner.(backend.Swapper); ok {
		w := swapStore{c, b}
		switch {
		case counts && sweeps:
			return &struct {
				swapStore
				stats
				sweeper
			}{w, s, sc}
		case counts:
			return &struct {
				swapStore
				stats
			}{w, s}
		case sweeps:
			return &struct {
				swapStore
				sweeper
			}{w, sc}
		}
		return &w
	}
	switch {
	case counts && sweeps:
		return &struct {
			*core
			stats
			sweeper
		}{c, s, sc}
	case counts:
		return &struct {
			*core
			stats
		}{c, s}
	case sweeps:
		return &struct {
			*core
			sweeper
		}{c, sc}
	}
	return c
}

var (
	_ backend.Backend = (*core)(nil)
	_ backend.Striped = (*stripedStore)(nil)
	_ backend.Durable = (*durableStore)(nil)
	_ backend.Swapper = (*swapStore)(nil)
)

// core is the plain store's wrapper, and every wrapper's backend.Backend.
type core struct {
	f     *Faults
	inner backend.Backend
}

func (c *core) Get(key []byte, now int64) ([]byte, error) {
	cs, err := c.f.enter(Call{Op: OpGet, Key: key})
	if err != nil {
		return nil, err
	}
	v, err := c.inner.Get(key, now)
	if err != nil || cs == nil {
		return v, err
	}
	return corrupted(cs, v), nil
}

func (c *core) Put(key, value []byte, expiresAt int64) error {
	if _, err := c.f.enter(Call{Op: OpPut, Key: key}); err != nil {
		return err
	}
	return c.inner.Put(key, value, expiresAt)
}

func (c *core) Delete(key []byte) error {
	if _, err := c.f.enter(Call{Op: OpDelete, Key: key}); err != nil {
		return err
	}
	return c.inner.Delete(key)
}

func (c *core) Close() error {
	if _, err := c.f.enter(Call{Op: OpClose}); err != nil {
		return err
	}
	return c.inner.Close()
}

// stats forwards backend.Stats; counting is never faulted.
type stats struct{ s backend.Stats }

func (s stats) Len() int          { return s.s.Len() }
func (s stats) Evictions() uint64 { return s.s.Evictions() }

// sweeper forwards backend.Sweeper.
type sweeper struct {
	f *Faults
	s backend.Sweeper
}

func (s sweeper) Sweep(now int64, budget int) (int, error) {
	if _, err := s.f.enter(Call{Op: OpSweep}); err != nil {
		return 0, err
	}
	return s.s.Sweep(now, budget)
}

// stripedStore wraps a backend.Striped.
type stripedStore struct {
	*core
	s backend.Striped
}

func (s *stripedStore) Stripes() int      { return s.s.Stripes() }
func (s *stripedStore) Lock(i int)        { s.s.Lock(i) }
func (s *stripedStore) Unlock(i int)      { s.s.Unlock(i) }
func (s *stripedStore) Len() int          { return s.s.Len() }
func (s *stripedStore) Evictions() uint64 { return s.s.Evictions() }

func (s *stripedStore) Sweep(now int64, budget int) (int, error) {
	return sweeper{s.f, s.s}.Sweep(now, budget)
}

func (s *stripedStore) GetLocked(hash uint64, key []byte, now int64) ([]byte, error) {
	cs, err := s.f.enter(Call{Op: OpGetLocked, Key: key})
	if err != nil {
		return nil, err
	}
	v, err := s.s.GetLocked(hash, key, now)
	if err != nil || cs == nil {
		return v, err
	}
	return corrupted(cs, v), nil
}

func (s *stripedStore) PutLocked(hash uint64, key, value []byte, expiresAt int64) error {
	if _, err := s.f.enter(Call{Op: OpPutLocked, Key: key}); err != nil {
		return err
	}
	return s.s.PutLocked(hash, key, value, expiresAt)
}

func (s *stripedStore) DeleteLocked(hash uint64, key []byte) error {
	if _, err := s.f.enter(Call{Op: OpDeleteLocked, Key: key}); err != nil {
		return err
	}
	return s.s.DeleteLocked(hash, key)
}

func (s *stripedStore) ExtendLocked(hash uint64, key []byte, now, expiresAt int64) (bool, error) {
	if _, err := s.f.enter(Call{Op: OpExtendLocked, Key: key}); err != nil {
		return false, err
	}
	return s.s.ExtendLocked(hash, key, now, expiresAt)
}

// durableStore wraps a backend.Durable.
type durableStore struct {
	*core
	d backend.Durable
}

func (d *durableStore) Sweep(now int64, budget int) (int, error) {
	return sweeper{d.f, d.d}.Sweep(now, budget)
}

func (d *durableStore) WriteBatch(writes []backend.Write, sync bool) error {
	if _, err := d.f.enter(Call{Op: OpWriteBatch, Batch: writes}); err != nil {
		return err
	}
	return d.d.WriteBatch(writes, sync)
}

func (d *durableStore) Load(key []byte, now int64) ([]byte, int64, error) {
	cs, err := d.f.enter(Call{Op: OpLoad, Key: key})
	if err != nil {
		return nil, 0, err
	}
	v, exp, err := d.d.Load(key, now)
	if err != nil || cs == nil {
		return v, exp, err
	}
	// A record conjured where none was keeps expiry 0: it never expires.
	return corrupted(cs, v), exp, nil
}

func (d *durableStore) Range(start []byte, fn func(backend.Record) bool) error {
	return ranged(d.f, d.d.Range, start, fn)
}

func ranged(f *Faults, r func([]byte, func(backend.Record) bool) error, start []byte, fn func(backend.Record) bool) error {
	if _, err := f.enter(Call{Op: OpRange, Key: start}); err != nil {
		return err
	}
	return r(start, fn)
}

// swapStore wraps a backend.Swapper.
type swapStore struct {
	*core
	s backend.Swapper
}

// CompareAndSwap is faulted before it reaches the store, so a faulted call
// writes nothing (a real store's failure may leave the outcome unknown; a
// Delay or Hold rule with no Err lets the call through late). A Corrupt
// rule replaces each current record a mismatch returns.
func (s *swapStore) CompareAndSwap(ctx context.Context, swaps []backend.Swap) (bool, [][]byte, int64, error) {
	cs, err := s.f.enter(Call{Op: OpCompareAndSwap, Swaps: swaps})
	if err != nil {
		return false, nil, 0, err
	}
	ok, cur, now, err := s.s.CompareAndSwap(ctx, swaps)
	if err == nil && cs != nil {
		for i := range cur {
			cur[i] = corrupted(cs, cur[i])
		}
	}
	return ok, cur, now, err
}

func (s *swapStore) SwapGroup(key []byte) string { return s.s.SwapGroup(key) }

// TTLUnit is the store's.
func (s *swapStore) TTLUnit() time.Duration { return s.s.TTLUnit() }

// WatchDeletes is faulted when the watch starts: a rule's error is the
// watch's, and the store is not asked. The deletions it then hears of are
// passed on as they come.
func (s *swapStore) WatchDeletes(fn func(key []byte)) (func(), error) {
	if _, err := s.f.enter(Call{Op: OpWatchDeletes}); err != nil {
		return nil, err
	}
	return s.s.WatchDeletes(fn)
}

func (s *swapStore) Range(start []byte, fn func(backend.Record) bool) error {
	return ranged(s.f, s.s.Range, start, fn)
}
