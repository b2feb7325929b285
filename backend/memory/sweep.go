package memory

import "time"

// Sweep runs one bounded step of expiry sweeping at now: it visits each shard
// at most once, starting where the previous step stopped, and in each visit
// examines at most Options.SweepBatch keys from that shard's cursor under
// the shard's lock, removing those expired at now. It stops once it has
// examined budget keys in all. It returns the number of keys removed.
//
// The background sweeper calls it every SweepInterval, as many times as it
// takes to examine every key held (see Options.SweepInterval); tests call
// it directly with their own clock. Expired keys
// read as absent whether or not they have been swept; sweeping only frees
// their memory. Sweep takes shard locks itself, so it must not be called
// while holding one. After Close, Sweep returns 0.
func (s *Store) Sweep(now int64, budget int) (removed int) {
	_, removed = s.sweep(now, budget)
	return removed
}

// sweep is Sweep, also returning how many keys it examined.
func (s *Store) sweep(now int64, budget int) (examined, removed int) {
	s.sweepMu.Lock()
	defer s.sweepMu.Unlock()
	for v := 0; v < len(s.shards) && budget > 0; v++ {
		i := s.sweepNext
		s.sweepNext = (i + 1) & int(s.mask)
		sh := &s.shards[i]
		sh.mu.Lock()
		if sh.closed {
			sh.mu.Unlock()
			return examined, removed
		}
		e, r := sh.sweep(now, min(budget, s.batch))
		if r > 0 {
			s.tidy(sh)
		}
		sh.mu.Unlock()
		budget -= e
		examined += e
		removed += r
		if r > 0 {
			s.keys.Add(-int64(r))
			s.evicted.Add(uint64(r))
		}
	}
	return examined, removed
}

// sweeper runs a tick every interval until Close.
func (s *Store) sweeper(interval time.Duration) {
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

// tick is one background sweep: Sweep steps until it has examined as many
// keys as the store held when it began (one step when it held fewer than a
// step examines).
// Each step holds one shard lock at a time, for at most SweepBatch keys, so
// decisions interleave with it; and since a tick examines every key held,
// a key is freed within about two intervals of its expiry however fast new
// keys arrive. A tick with a fixed budget could be outrun by a flood of new
// keys, and memory would then grow past what the TTL bounds.
func (s *Store) tick() {
	now := s.now()
	step := s.batch * len(s.shards)
	target := max(1, int(s.keys.Load()))
	for done := 0; done < target; {
		examined, _ := s.sweep(now, step)
		if examined == 0 {
			return // nothing left to examine
		}
		done += examined
		select {
		case <-s.stop:
			return
		default:
		}
	}
}
