package table

import (
	"time"

	"github.com/sluice-go/sluice/backend"
)

// Sweep runs one bounded step of expiry sweeping at now: it visits each shard
// at most once, starting where the previous step stopped, and in each visit
// examines at most Options.SweepBatch keys from that shard's cursor under
// the shard's lock, removing those expired at now. It stops once it has
// examined budget keys in all (Options.SweepBatch when budget is zero or
// less). It returns the number of keys removed. It implements
// backend.Sweeper.
//
// The background sweeper does not call it: each SweepInterval it walks
// every key of every shard in steps of the same size (see
// Options.SweepInterval). Tests and programs with their own clock call
// Sweep directly. Expired keys
// read as absent whether or not they have been swept; sweeping only frees
// their memory. Sweep takes shard locks itself, so it must not be called
// while holding one. After Close, Sweep returns backend.ErrClosed.
func (s *Table) Sweep(now int64, budget int) (removed int, err error) {
	if s.closed.Load() {
		return 0, backend.ErrClosed
	}
	if budget <= 0 {
		budget = s.batch
	}
	_, removed = s.sweep(now, budget)
	return removed, nil
}

// sweep is Sweep, also returning how many keys it examined.
func (s *Table) sweep(now int64, budget int) (examined, removed int) {
	s.sweepMu.Lock()
	defer s.sweepMu.Unlock()
	for v := 0; v < len(s.shards) && budget > 0; v++ {
		i := s.sweepNext
		s.sweepNext = (i + 1) & int(s.mask)
		sh := &s.shards[i]
		sh.lock()
		if sh.closed {
			sh.unlock()
			return examined, removed
		}
		e, r := sh.sweep(now, min(budget, s.batch))
		if r > 0 {
			s.tidy(sh)
		}
		sh.unlock()
		budget -= e
		examined += e
		removed += r
		if r > 0 {
			s.release(r)
			s.evicted.Add(uint64(r))
		}
	}
	return examined, removed
}

// sweeper runs a tick every interval until Close.
func (s *Table) sweeper(interval time.Duration) {
	defer close(s.done)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			s.tick()
		}
	}
}

// tick is one background sweep: it examines every key of every shard, one
// shard at a time, in steps that hold the shard's lock for at most
// SweepBatch keys, so decisions interleave with it. Since a tick covers
// every key held, however many arrived since the last, an expired key is
// freed within about two intervals: a sweep with a fixed budget per tick
// could be outrun by a flood of new keys, and memory would then grow past
// what the TTL bounds.
func (s *Table) tick() {
	now := s.now()
	s.sweepMu.Lock()
	defer s.sweepMu.Unlock()
	for i := range s.shards {
		sh := &s.shards[i]
		// Cover the keys the shard held when its visit began. A step
		// advances the cursor over at most 8 slots per key allowed, so a
		// pass over a sparse index may take steps that examine nothing;
		// calls bounds them by a full pass's worth.
		target, calls := -1, 0
		for done := 0; target < 0 || (done < target && calls > 0); calls-- {
			select {
			case <-s.stop:
				return
			default:
			}
			sh.lock()
			if sh.closed {
				sh.unlock()
				return
			}
			if target < 0 {
				target = sh.count
				calls = len(sh.slots)/(8*s.batch) + target/s.batch + 2
			}
			examined, removed := sh.sweep(now, s.batch)
			if removed > 0 {
				s.tidy(sh)
			}
			sh.unlock()
			done += examined
			if removed > 0 {
				s.release(removed)
				s.evicted.Add(uint64(removed))
			}
		}
	}
	s.sweptAt.Store(now)
}
