package memory

import "time"

// Sweep runs one bounded step of expiry sweeping at now: it visits each shard
// at most once, starting where the previous step stopped, and in each visit
// examines at most Options.SweepBatch keys from that shard's cursor under
// the shard's lock, removing those expired at now. It stops once it has
// examined budget keys in all. It returns the number of keys removed.
//
// The background sweeper calls Sweep(Now(), SweepBatch*Stripes()) every
// SweepInterval; tests call it directly with their own clock. Expired keys
// read as absent whether or not they have been swept; sweeping only frees
// their memory. Sweep takes shard locks itself, so it must not be called
// while holding one. After Close, Sweep returns 0.
func (s *Store) Sweep(now int64, budget int) (removed int) {
	s.sweepMu.Lock()
	defer s.sweepMu.Unlock()
	for v := 0; v < len(s.shards) && budget > 0; v++ {
		i := s.sweepNext
		s.sweepNext = (i + 1) & int(s.mask)
		sh := &s.shards[i]
		sh.mu.Lock()
		if sh.closed {
			sh.mu.Unlock()
			return removed
		}
		examined, r := sh.sweep(now, min(budget, s.batch))
		if r > 0 {
			s.tidy(sh)
		}
		sh.mu.Unlock()
		budget -= examined
		removed += r
		if r > 0 {
			s.keys.Add(-int64(r))
			s.evicted.Add(uint64(r))
		}
	}
	return removed
}

// sweeper runs Sweep every interval until Close.
func (s *Store) sweeper(interval time.Duration) {
	defer close(s.done)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			s.Sweep(s.now(), s.batch*len(s.shards))
		}
	}
}
