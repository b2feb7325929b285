package engine

import (
	"github.com/sluice-go/sluice/algo"
	"github.com/sluice-go/sluice/backend/table"
)

// The in-process decision: Apply over a bare memory store, the path every
// decision of an embedded limiter takes, written so that nothing on it is
// an interface call, a copy of the key or a second lookup. The store's
// table.Table lends its shard lock and its entry (table.Ref): the record
// is stepped where it lies, and a record that keeps its size costs the
// table only the write of its expiry.
//
// Apply builds the namespaced key on its stack and decideMemory decides
// it; ApplyKeyInto calls decideMemory with a prepared key. decideMemory
// takes no more arguments than the registers carry (the algorithm, the
// key, its hash, the cost and the decision), and a prepared key's decision
// zeroes no buffer for a key it does not build.

// stepOther steps an algorithm of another package's making (algo.StepInto
// does): the one dispatch decideMemory does not make itself. It is a
// variable so that TestOneDispatch can see that none of package algo's
// algorithms (algo.Names) ever gets here. It returns the decision rather
// than taking d, which would then escape to the heap on every path.
var stepOther = func(a algo.Algorithm, state []byte, now, cost int64) ([]byte, algo.Decision) {
	var d algo.Decision
	next := algo.StepInto(a, state, now, cost, &d)
	return next, d
}

// decideMemory decides the namespaced key k, of hash h, by a over a bare
// memory store's table, spending, into *d (every field; zero on an error).
// A hash of zero is computed here, after the clock is read (a key whose
// hash is zero is then hashed again, to zero). A key's first record is
// built in the room the table lends for it, and copied by the table.
func (e *Engine) decideMemory(a algo.Algorithm, k []byte, h uint64, cost int64, d *algo.Decision) error {
	// A cost outside 1..capacity is refused with an error before anything
	// is read; the step denies such a cost too, so the capacity is looked up
	// only after a denial (see below), not on every call.
	if a == nil || cost <= 0 || e.closed.Load() {
		*d = algo.Decision{}
		return e.check(Limit{Algorithm: a}, cost)
	}
	var now int64
	if c := e.coarse; c != nil {
		now = c.now.Load()
	} else {
		now = e.now()
	}
	if h == 0 {
		h = hashKey(k)
	}
	m := e.store.table
	i := int(h & e.mask)
	if table.UnlockedReads && m.Denying(h) {
		// A decision whose caller is denied writes nothing, so where the
		// shard's last decisions were denials, the record is read without
		// the lock (table.ReadUnlocked): a denial then writes nothing at
		// all, not even the lock's line. A decision that turns out to
		// spend, or cannot be read so, is made under the lock, as every
		// decision is where the shard's decisions spend.
		var buf [table.MaxUnlocked]byte
		if state, x, ok := m.ReadUnlocked(h, k, buf[:], now); ok {
			next, fixed := stepFixed(a, state, now, cost, d)
			switch {
			case !fixed || d.CorruptState || cost > d.Limit:
				// A sliding log or an algorithm of another package (whose
				// step may keep the record, which is on this stack), a
				// corrupt record (removed under the lock) or a refused
				// cost (refused there).
			case next == nil && !d.Allowed:
				// A denial holds unless the record's expiry must be
				// lengthened (decideLocked says why).
				if x <= 0 || x >= addSat(now, d.Reset) {
					return nil
				}
			}
		}
	}
	m.Lock(i)
	return e.decideLocked(a, k, h, cost, now, i, d)
}

// stepFixed is step for package algo's algorithms of fixed-size records
// only, whose steps keep nothing of the record they are given (so that it
// may live on the caller's stack): fixed is false, and nothing is stepped,
// for any other.
func stepFixed(a algo.Algorithm, state []byte, now, cost int64, d *algo.Decision) (next []byte, own bool) {
	switch a := a.(type) {
	case *algo.GCRA:
		return a.StepInto(state, now, cost, d), true
	case *algo.TokenBucket:
		return a.StepInto(state, now, cost, d), true
	case *algo.FixedWindow:
		return a.StepInto(state, now, cost, d), true
	case *algo.SlidingCounter:
		return a.StepInto(state, now, cost, d), true
	case *algo.LeakyBucket:
		return a.StepInto(state, now, cost, d), true
	}
	return nil, false
}

// step steps state by a's own step function where a is one of package
// algo's (own reports it), or by algo.StepInto. It is algo.StepInto's
// dispatch, here so that the step is called directly: one call fewer on
// every decision. An algorithm of another package takes algo.StepInto
// (stepOther); TestOneDispatch fails for one of package algo's that is
// missing here.
func step(a algo.Algorithm, state []byte, now, cost int64, d *algo.Decision) (next []byte, own bool) {
	if next, fixed := stepFixed(a, state, now, cost, d); fixed {
		return next, true
	}
	if a, ok := a.(*algo.SlidingLog); ok {
		return a.StepInto(state, now, cost, d), true
	}
	next, *d = stepOther(a, state, now, cost)
	return next, false
}

// decideLocked is decideMemory's decision under the lock of shard i, which
// the caller holds and which it releases.
func (e *Engine) decideLocked(a algo.Algorithm, k []byte, h uint64, cost, now int64, i int, d *algo.Decision) error {
	m := e.store.table
	state, ref, err := m.LookupLocked(h, k, now)
	if err != nil {
		m.Unlock(i)
		*d = algo.Decision{}
		return e.storeError("read", err)
	}
	next, own := step(a, state, now, cost, d)
	if table.UnlockedReads {
		m.SetDenying(h, !d.Allowed)
	}
	if !d.Allowed && (own && cost > d.Limit || !own && cost > algo.Capacity(a)) {
		// Refused, not denied: nothing is written, not even the removal
		// of a corrupt record the step found.
		m.Unlock(i)
		*d = algo.Decision{}
		return e.check(Limit{Algorithm: a}, cost)
	}
	switch {
	case next != nil && d.TTL > 0:
		if !ref.SetExpiryLocked(next, now+int64(d.TTL)) {
			err = m.PutRefLocked(h, ref, k, next, now, now+int64(d.TTL))
		}
	case next != nil || d.CorruptState:
		// Equivalent to no record already, or a corrupt one to drop.
		err = m.DeleteLocked(h, k)
	case !d.Allowed:
		// A denial writes nothing, but its record is kept until its
		// caller is full again: written under a rule whose rate has since
		// been lowered, it would expire sooner (see backend.Striped.ExtendLocked).
		ref.ExtendExpiryLocked(now, addSat(now, d.Reset))
	}
	m.Unlock(i)
	if d.CorruptState {
		e.noteCorruptKey(k)
	}
	if err != nil {
		*d = algo.Decision{}
		return e.storeError("write", err)
	}
	return nil
}
