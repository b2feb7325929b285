package engine

// Queued returns how many callers wait on key under l for the next
// compare-and-swap of its key over a backend.Swapper (a leader at work is
// not counted).
func Queued(e *Engine, l Limit, key string) int {
	p := e.store.swap
	k := AppendKey(nil, l.Namespace, key)
	sh := p.shard(k)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if f := sh.flights[string(k)]; f != nil {
		return len(f.queue)
	}
	return 0
}

// CountKeyProbes makes ApplyAll count the slots its key lookups examine
// while f runs, and returns the count. Not for parallel tests.
func CountKeyProbes(f func()) int64 {
	countProbes = true
	probes.Store(0)
	defer func() { countProbes = false }()
	f()
	return probes.Load()
}
