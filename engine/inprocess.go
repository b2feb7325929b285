package engine

import (
	"github.com/sluice-go/sluice/algo"
	"github.com/sluice-go/sluice/backend/table"
)

// The in-process decision: Apply over a bare memory store, the path every
// decision of an embedded limiter takes, written so that nothing on it is
// an interface call, a copy of the key or a second lookup. A key the table
// already holds is decided under its entry's own lock (table.Entry), taken
// without the shard's: the record is stepped where it lies and written
// back with its expiry, and the decision writes nothing else, so decisions
// on different keys share no line they write. A key's first record, a
// record that must move, and the algorithms whose records change size
// (the sliding log, any of another package) take the shard's lock and its
// entry (table.Ref) instead, as every decision did before.
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
	if now > 0 && fixedSize(a) {
		if ent, ok := e.store.table.LockEntry(h, k); ok {
			if done, err := e.decideEntry(a, &ent, k, now, cost, d); done {
				return err
			}
		}
	}
	return e.decideLocked(a, k, h, now, cost, d)
}

// fixedSize reports whether a is one of package algo's algorithms whose
// step writes a record in place only whole (codec's Append functions or
// its own format): one that does not fit the entry was built elsewhere,
// and the entry is untouched. The sliding log rewrites its record in
// parts, and an algorithm of another package promises nothing of the kind.
func fixedSize(a algo.Algorithm) bool {
	switch a.(type) {
	case *algo.GCRA, *algo.TokenBucket, *algo.FixedWindow, *algo.SlidingCounter, *algo.LeakyBucket:
		return true
	}
	return false
}

// decideEntry decides k under its entry's lock, held in ent, and lets go of
// it. It reports done false, having written nothing, when the decision must
// be made again under the shard's lock: the new record does not fit the
// entry (it was built elsewhere: the entry is as it was), or the record is
// corrupt and must be removed. now is positive, so an expiry of 1 means
// expired.
func (e *Engine) decideEntry(a algo.Algorithm, ent *table.Entry, k []byte, now, cost int64, d *algo.Decision) (done bool, err error) {
	state := ent.Record(now)
	var next []byte
	switch a := a.(type) {
	case *algo.GCRA:
		next = a.StepInto(state, now, cost, d)
	case *algo.TokenBucket:
		next = a.StepInto(state, now, cost, d)
	case *algo.FixedWindow:
		next = a.StepInto(state, now, cost, d)
	case *algo.SlidingCounter:
		next = a.StepInto(state, now, cost, d)
	case *algo.LeakyBucket:
		next = a.StepInto(state, now, cost, d)
	}
	if !d.Allowed && cost > d.Limit {
		// Refused, not denied: nothing is written.
		ent.Unlock()
		*d = algo.Decision{}
		return true, e.check(Limit{Algorithm: a}, cost)
	}
	switch {
	case next != nil:
		// A record equivalent to none already (only a saturated clock
		// gets there) is stored as expired, which reads as absent.
		exp := int64(1)
		if d.TTL > 0 {
			exp = now + int64(d.TTL)
		}
		if !ent.Commit(next, exp) {
			ent.Unlock()
			return false, nil
		}
	case d.CorruptState:
		ent.Unlock()
		return false, nil
	case !d.Allowed:
		// A denial writes nothing, but its record is kept until its
		// caller is full again (see decideLocked).
		ent.Extend(now, addSat(now, d.Reset))
		ent.Unlock()
	default:
		ent.Unlock()
	}
	if d.CorruptState {
		e.noteCorruptKey(k)
	}
	return true, nil
}

// decideLocked is decideMemory under the shard's lock, for a key the table
// does not hold yet and every record LockEntry does not take.
func (e *Engine) decideLocked(a algo.Algorithm, k []byte, h uint64, now, cost int64, d *algo.Decision) error {
	m := e.store.table
	i := int(h & e.mask)
	m.Lock(i)
	state, ref, err := m.LookupLocked(h, k, now)
	if err != nil {
		m.Unlock(i)
		*d = algo.Decision{}
		return e.storeError("read", err)
	}
	// algo.StepInto's dispatch, here so that the step is called directly:
	// one call fewer on every decision. An algorithm of another package
	// takes algo.StepInto (stepOther); TestOneDispatch fails for one of
	// package algo's that is missing here.
	var next []byte
	own := true // one of package algo's, whose decisions carry the capacity as Limit
	switch a := a.(type) {
	case *algo.GCRA:
		next = a.StepInto(state, now, cost, d)
	case *algo.TokenBucket:
		next = a.StepInto(state, now, cost, d)
	case *algo.FixedWindow:
		next = a.StepInto(state, now, cost, d)
	case *algo.SlidingCounter:
		next = a.StepInto(state, now, cost, d)
	case *algo.LeakyBucket:
		next = a.StepInto(state, now, cost, d)
	case *algo.SlidingLog:
		next = a.StepInto(state, now, cost, d)
	default:
		next, *d = stepOther(a, state, now, cost)
		own = false
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
