package engine

import "github.com/sluice-go/sluice/backend/table"

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

// DeniedWithoutLock reports whether a denial of key under l would now be
// decided from a read without its shard's lock: the engine is over a bare
// memory store, the build reads so (table.UnlockedReads), the shard's hint
// expects a denial, and the record can be read without the lock.
func DeniedWithoutLock(e *Engine, l Limit, key string, now int64) bool {
	m := e.store.table
	if m == nil || !table.UnlockedReads {
		return false
	}
	k := AppendKey(nil, l.Namespace, key)
	h := hashKey(k)
	var buf [table.MaxUnlocked]byte
	_, _, ok := m.ReadUnlocked(h, k, buf[:], now)
	return m.Denying(h) && ok
}
