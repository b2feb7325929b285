package algo

import (
	"math"
	"slices"
	"time"

	"github.com/sluice-go/sluice/codec"
)

// ConcurrencyName names the concurrency limit: at most Limit requests of a
// key in flight at once, each holding a slot for at most Window (its
// maximum hold). It is not one of Names, which are rate algorithms (and
// Known reports those only): New accepts it, and a door that cannot hold a
// slot until its request ends refuses it.
const ConcurrencyName Name = "concurrency"

// MaxConcurrencyLimit is the largest limit of a concurrency limit. Its
// record keeps one lease per slot in use, 16 bytes each after a 9-byte
// header, so a key's record is at most 17 + 16·1000 = 16,017 bytes.
const MaxConcurrencyLimit = 1000

// Concurrency is a concurrency limit: a key may hold at most capacity
// slots at once. A slot is a lease, with its own id and an expiry a
// maximum hold (the Window) after it was taken. A request takes one by a
// step (Step with cost 1; a cost of c takes c leases of consecutive ids)
// and gives it back by Release; a lease whose expiry has passed counts no
// more, so a holder that crashed or hung leaks nothing past its hold, and
// its release, when it comes, frees nothing.
//
// The record (codec's TagConcurrency) is the set of leases, bounded by
// MaxConcurrencyLimit, and the greatest id issued. An id is the instant
// the lease was taken (Unix nanoseconds), or, when that is not after the
// greatest id issued (several leases in one nanosecond, or a clock that
// stepped back), the next nanosecond after it: ids are unique in the
// record and rise, and the record is kept (its TTL) until its last lease
// expires and at least a hold after its greatest id, so an id is never
// issued twice for a key (unless the clock steps back behind a record the
// store has forgotten). A release ends its lease in place, so a key
// taking and giving back slots rewrites one record of one size. A release naming a
// lease no longer held (released, or expired) matches nothing: a release
// is idempotent.
//
// A denial's RetryAfter is the time until enough leases expire for the
// request to fit, an upper bound of the wait (a release comes sooner); a
// door that cannot tell when its holders release answers with a wait the
// operator sets instead. Remaining is the slots free; Reset the time until
// every lease held now has expired. Charge and Refund settle no cost: a
// Refund of one unit at an instant releases the lease of that id (see
// Release), and a Charge charges nothing.
type Concurrency struct{ rate }

// Name returns "concurrency".
func (*Concurrency) Name() Name { return ConcurrencyName }

// Step takes cost slots; see Algorithm.
func (a *Concurrency) Step(state []byte, now, cost int64) ([]byte, Decision) {
	var d Decision
	next := a.StepInto(state, now, cost, &d)
	return next, d
}

// read returns the record in state, or an empty one (reporting whether
// state was corrupt) when it holds none.
func (a *Concurrency) read(state []byte) (l codec.Leases, ok, corrupt bool) {
	if len(state) == 0 {
		return codec.Leases{}, false, false
	}
	l, err := codec.ReadLeases(state)
	if err != nil {
		return codec.Leases{}, false, isCorrupt(state)
	}
	return l, true, false
}

// live returns the number of leases live at t and the latest expiry
// among them (math.MinInt64 when none).
func live(l codec.Leases, ok bool, t int64) (n int64, latest int64) {
	latest = math.MinInt64
	if !ok {
		return 0, latest
	}
	for i := range l.Len() {
		if e := l.Expiry(i); e > t {
			n++
			latest = max(latest, e)
		}
	}
	return n, latest
}

// ttl is the record's TTL: until its last lease expires, and at least
// a hold after its greatest id, so that a key taking and giving back
// slots keeps its record (rewritten in place) rather than having it
// forgotten and made anew at every release. (Until the greatest id has
// passed, the record must be kept for ids to stay unique.)
func (a *Concurrency) ttl(now, latest, last int64) int64 {
	return until(max(latest, satAdd(last, a.window)), now)
}

// StepInto is Step writing the decision to *d.
func (a *Concurrency) StepInto(state []byte, now, cost int64, d *Decision) []byte {
	l, ok, corrupt := a.read(state)
	t := at(l, ok, now)
	n, latest := live(l, ok, t)
	if !a.validCost(cost) || n+cost > a.capacity {
		retry := a.window
		if a.validCost(cost) {
			retry = until(a.freed(l, t, n+cost-a.capacity), now)
		}
		a.denyInto(d, corrupt, a.capacity-n, retry, until(latest, now))
		return nil
	}
	last := int64(math.MinInt64)
	if ok {
		last = l.Last()
		l = l.Keep(func(_, e int64) bool { return e > t })
		l.SetAt(t)
	} else {
		l = codec.NewLeases(state[:0], 0, t)
	}
	exp := satAdd(t, a.window)
	for range cost {
		id := t
		if id <= last {
			id = satAdd(last, 1)
		}
		l = l.Add(id, exp)
		last = id
	}
	latest = max(latest, exp)
	a.allowInto(d, corrupt, a.capacity-n-cost, until(latest, now), 0)
	d.TTL = time.Duration(a.ttl(now, latest, last))
	return l.Bytes()
}

// at returns the time a step at now is made at: now, or the record's
// latest write when the clock has stepped back behind it, which is
// treated as not having moved.
func at(l codec.Leases, ok bool, now int64) int64 {
	if ok {
		return max(now, l.At())
	}
	return now
}

// freed returns the expiry of the k-th live lease to expire: the instant
// by which k slots have come back with no release.
func (a *Concurrency) freed(l codec.Leases, now, k int64) int64 {
	if k == 1 {
		first := int64(math.MaxInt64)
		for i := range l.Len() {
			if e := l.Expiry(i); e > now {
				first = min(first, e)
			}
		}
		return first
	}
	var exps []int64
	for i := range l.Len() {
		if e := l.Expiry(i); e > now {
			exps = append(exps, e)
		}
	}
	slices.Sort(exps)
	return exps[k-1]
}

// ChargeInto charges nothing: a concurrency limit has no cost to settle.
// It writes the key's state to *d.
func (a *Concurrency) ChargeInto(state []byte, now, _ int64, d *Decision) ([]byte, int64) {
	l, ok, corrupt := a.read(state)
	a.stateInto(d, l, ok, corrupt, now)
	return nil, 0
}

// RefundInto releases the lease whose id is at, when n is positive and
// the lease is live at now: see Release.
func (a *Concurrency) RefundInto(state []byte, now, at, n int64, d *Decision) ([]byte, int64) {
	if n <= 0 {
		l, ok, corrupt := a.read(state)
		a.stateInto(d, l, ok, corrupt, now)
		return nil, 0
	}
	return a.Release(state, now, at, d)
}

// Release gives back the lease whose id is id, when the record holds it
// live at now: it returns the record with the lease ended (its expiry
// set to now, in place; the next acquisition prunes it) and 1. A lease released already, or expired, or never
// issued, frees nothing: it returns nil and 0. It writes the key's state
// after the release to *d, as Charge does: Allowed true, Remaining the
// slots free.
func (a *Concurrency) Release(state []byte, now, id int64, d *Decision) ([]byte, int64) {
	l, ok, corrupt := a.read(state)
	t := at(l, ok, now)
	for j := range l.Len() {
		if l.ID(j) != id {
			continue
		}
		if l.Expiry(j) <= t {
			break
		}
		// The lease ends now: in place, so that the record keeps its
		// size; the next acquisition prunes it.
		l.SetExpiry(j, t)
		l.SetAt(t)
		a.stateInto(d, l, true, corrupt, now)
		return l.Bytes(), 1
	}
	a.stateInto(d, l, ok, corrupt, now)
	return nil, 0
}

// stateInto writes the key's state at now to *d, as a settle does.
func (a *Concurrency) stateInto(d *Decision, l codec.Leases, ok, corrupt bool, now int64) {
	n, latest := live(l, ok, at(l, ok, now))
	last := int64(math.MinInt64)
	if ok {
		last = l.Last()
	}
	a.settledInto(d, corrupt, a.capacity-n, until(latest, now))
	d.TTL = time.Duration(a.ttl(now, latest, last))
}

// LeaseOf returns the id and expiry of the lease a step of a concurrency
// limit added last to the record next (the lease its request took), and
// whether next holds one.
func LeaseOf(next []byte) (id, expiry int64, ok bool) {
	l, err := codec.ReadLeases(next)
	if err != nil || l.Len() == 0 {
		return 0, 0, false
	}
	i := l.Len() - 1
	return l.ID(i), l.Expiry(i), true
}
