package backendtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-go/sluice/backend"
)

// SwapStore is an in-process backend.Swapper: a map with expiry on its own
// clock. It stands in for a store across a network (Redis) in the engine's
// tests, with hooks for what a network and other processes bring: a delay
// before every compare-and-swap, and writes slipped in between the engine's
// read of a record and its commit; and, as a Redis Cluster has, groups of
// keys that alone may be swapped together. It also implements
// backend.Stats and backend.Sweeper. It is safe for concurrent use.
type SwapStore struct {
	now     func() int64
	noClock bool
	delay   time.Duration
	before  func(s *SwapStore, swaps []backend.Swap)
	group   func(key []byte) string
	unit    time.Duration

	mu       sync.Mutex // guards recs, closed and watchers
	recs     map[string]swapRecord
	closed   bool
	watchers map[int]func(key []byte)
	watchSeq int

	calls, mismatches atomic.Int64
	announced         atomic.Uint64
	evicted           atomic.Uint64
}

// ErrCrossGroup is returned by a SwapStore's CompareAndSwap over keys of
// several groups (SwapOptions.Group), as a Redis Cluster refuses a script
// over keys of several slots.
var ErrCrossGroup = errors.New("sluice/backend/backendtest: compare-and-swap over keys of several groups")

type swapRecord struct {
	value     []byte
	expiresAt int64 // zero or less: never
}

// SwapOptions configure a SwapStore. The zero value (or nil) means a store on
// the system clock, with no delay and no hook.
type SwapOptions struct {
	// Now is the store's clock in Unix nanoseconds; nil means the system
	// clock.
	Now func() int64
	// NoClock makes CompareAndSwap return a zero time, as a store without
	// a clock of its own does; records still expire on Now.
	NoClock bool
	// Delay is slept at the start of every CompareAndSwap, as a round trip
	// would take.
	Delay time.Duration
	// Before, when set, runs at the start of every CompareAndSwap (after
	// Delay), before the store compares anything and without its lock: it
	// may write to the store with Put or Delete, as another process would
	// between the engine's read of a record and its commit.
	Before func(s *SwapStore, swaps []backend.Swap)
	// Group, when set, is the store's SwapGroup: CompareAndSwap then
	// refuses keys of several groups with ErrCrossGroup, writing nothing.
	// Nil puts every key in one group.
	Group func(key []byte) string
	// TTLUnit, when positive, makes the store keep every record for its
	// TTL rounded up to a whole TTLUnit, as Redis keeps one for whole
	// milliseconds, and say so (backend.Swapper.TTLUnit).
	TTLUnit time.Duration
}

var (
	_ backend.Swapper = (*SwapStore)(nil)
	_ backend.Stats   = (*SwapStore)(nil)
	_ backend.Sweeper = (*SwapStore)(nil)
)

// NewSwapStore returns an empty SwapStore.
func NewSwapStore(o *SwapOptions) *SwapStore {
	s := &SwapStore{recs: map[string]swapRecord{}, now: func() int64 { return time.Now().UnixNano() }}
	if o != nil {
		if o.Now != nil {
			s.now = o.Now
		}
		s.noClock, s.delay, s.before, s.group, s.unit = o.NoClock, o.Delay, o.Before, o.Group, o.TTLUnit
	}
	return s
}

// Calls returns the number of CompareAndSwap calls made so far, including
// those that found a mismatch and empty ones.
func (s *SwapStore) Calls() int { return int(s.calls.Load()) }

// Mismatches returns the number of CompareAndSwap calls that wrote nothing
// because a key held another record than expected.
func (s *SwapStore) Mismatches() int { return int(s.mismatches.Load()) }

// live returns k's record at now, or nil. The caller holds s.mu.
func (s *SwapStore) live(k string, now int64) []byte {
	r, ok := s.recs[k]
	if !ok || (r.expiresAt > 0 && r.expiresAt <= now) {
		return nil
	}
	return r.value
}

// Range implements backend.Swapper: every record whose key is >= start, in
// key order, expired ones included, with its expiry.
func (s *SwapStore) Range(start []byte, fn func(r backend.Record) bool) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return backend.ErrClosed
	}
	var recs []backend.Record
	for k, r := range s.recs {
		if k >= string(start) {
			recs = append(recs, backend.Record{Key: []byte(k), Value: bytes.Clone(r.value), ExpiresAt: r.expiresAt})
		}
	}
	s.mu.Unlock()
	slices.SortFunc(recs, func(a, b backend.Record) int { return bytes.Compare(a.Key, b.Key) })
	for _, r := range recs {
		if !fn(r) {
			return nil
		}
	}
	return nil
}

// Get returns the record under key live at now.
func (s *SwapStore) Get(key []byte, now int64) ([]byte, error) {
	if len(key) == 0 {
		return nil, backend.ErrEmptyKey
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, backend.ErrClosed
	}
	return bytes.Clone(s.live(string(key), now)), nil
}

// Put stores value under key until expiresAt.
func (s *SwapStore) Put(key, value []byte, expiresAt int64) error {
	if len(key) == 0 {
		return backend.ErrEmptyKey
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return backend.ErrClosed
	}
	s.recs[string(key)] = swapRecord{append([]byte{}, value...), expiresAt}
	return nil
}

// Delete removes the record under key.
func (s *SwapStore) Delete(key []byte) error {
	if len(key) == 0 {
		return backend.ErrEmptyKey
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return backend.ErrClosed
	}
	delete(s.recs, string(key))
	for _, fn := range s.watchers {
		fn(bytes.Clone(key))
	}
	return nil
}

// SwapGroup implements backend.Swapper: SwapOptions.Group's answer, or ""
// for every key.
func (s *SwapStore) SwapGroup(key []byte) string {
	if s.group == nil {
		return ""
	}
	return s.group(key)
}

// WatchDeletes implements backend.Swapper: fn is called, under the store's
// lock, before Delete returns, and before a swap with Swap.Announce returns
// (the announcing engine's own watcher included: it remembers the record it
// wrote after that).
func (s *SwapStore) WatchDeletes(fn func(key []byte)) (func(), error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, backend.ErrClosed
	}
	if s.watchers == nil {
		s.watchers = map[int]func([]byte){}
	}
	s.watchSeq++
	id := s.watchSeq
	s.watchers[id] = fn
	return func() {
		s.mu.Lock()
		delete(s.watchers, id)
		s.mu.Unlock()
	}, nil
}

// Len returns the number of records held, expired ones included. It
// implements backend.Stats.
func (s *SwapStore) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.recs)
}

// Sweep removes up to budget records expired at now (every expired record
// when budget is zero or less).
func (s *SwapStore) Sweep(now int64, budget int) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return 0, backend.ErrClosed
	}
	n := 0
	for k, r := range s.recs {
		if budget > 0 && n == budget {
			break
		}
		if r.expiresAt > 0 && r.expiresAt <= now {
			delete(s.recs, k)
			n++
		}
	}
	s.evicted.Add(uint64(n))
	return n, nil
}

// Evictions returns the number of expired records Sweep has removed. It
// implements backend.Stats.
func (s *SwapStore) Evictions() uint64 { return s.evicted.Load() }

// TTLUnit implements backend.Swapper: SwapOptions.TTLUnit.
func (s *SwapStore) TTLUnit() time.Duration { return s.unit }

// CompareAndSwap implements backend.Swapper on the store's clock. A ctx
// done before the call, or while it waits out SwapOptions.Delay, returns
// an error wrapping ctx.Err(), and nothing is written.
func (s *SwapStore) CompareAndSwap(ctx context.Context, swaps []backend.Swap) (bool, [][]byte, int64, error) {
	s.calls.Add(1)
	if err := ctx.Err(); err != nil {
		return false, nil, 0, fmt.Errorf("sluice/backend/backendtest: %w", err)
	}
	if s.delay > 0 {
		t := time.NewTimer(s.delay)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return false, nil, 0, fmt.Errorf("sluice/backend/backendtest: %w", ctx.Err())
		}
	}
	if s.before != nil {
		s.before(s, swaps)
	}
	for _, w := range swaps {
		if len(w.Key) == 0 {
			return false, nil, 0, backend.ErrEmptyKey
		}
		if s.group != nil && s.group(w.Key) != s.group(swaps[0].Key) {
			return false, nil, 0, ErrCrossGroup
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false, nil, 0, backend.ErrClosed
	}
	now := s.now()
	reply := now
	if s.noClock {
		reply = 0
	}
	match := true
	for _, w := range swaps {
		cur := s.live(string(w.Key), now)
		if (cur == nil) != (w.Expected == nil) || !bytes.Equal(cur, w.Expected) {
			match = false
			break
		}
	}
	if !match {
		s.mismatches.Add(1)
		current := make([][]byte, len(swaps))
		for i, w := range swaps {
			current[i] = bytes.Clone(s.live(string(w.Key), now))
		}
		return false, current, reply, nil
	}
	for _, w := range swaps {
		if u := s.unit; u > 0 && w.TTL > 0 && w.TTL%u != 0 {
			w.TTL += u - w.TTL%u
		}
		switch {
		case w.Keep:
			if r, ok := s.recs[string(w.Key)]; ok && w.TTL > 0 && r.expiresAt > now && r.expiresAt < now+int64(w.TTL) {
				r.expiresAt = now + int64(w.TTL)
				s.recs[string(w.Key)] = r
			}
		case w.Value == nil || w.TTL <= 0:
			delete(s.recs, string(w.Key))
		default:
			s.recs[string(w.Key)] = swapRecord{append([]byte{}, w.Value...), now + int64(w.TTL)}
		}
		if w.Announce && !w.Keep {
			s.announced.Add(1)
			for _, fn := range s.watchers {
				fn(bytes.Clone(w.Key))
			}
		}
	}
	return true, nil, reply, nil
}

// Announced returns how many swaps with Swap.Announce the store has
// written.
func (s *SwapStore) Announced() uint64 { return s.announced.Load() }

// Close empties the store; later calls return backend.ErrClosed.
func (s *SwapStore) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed, s.recs = true, nil
	return nil
}
