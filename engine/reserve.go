package engine

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/sluice-go/sluice/algo"
)

// Errors returned by Reservation.Settle.
var (
	// ErrSettled is returned by Settle on a reservation settled already:
	// a reservation settles once.
	ErrSettled = errors.New("sluice/engine: reservation settled already")
	// ErrNotReserved is returned by Settle on a reservation whose request
	// was denied: nothing was spent, so there is nothing to settle.
	ErrNotReserved = errors.New("sluice/engine: the request was denied, nothing was reserved")
)

// Reservation is a request decided on an estimate of its cost, whose
// actual cost is settled once it is known: the tokens a language model
// used, the rows a query scanned. Reserve makes it; Settle settles it.
//
// A reservation never settled keeps its estimate: a process that crashes
// mid-request costs its caller the estimate, not more. A Reservation is
// safe for concurrent use; it settles once.
type Reservation struct {
	// Limit and Key are what the request was decided under.
	Limit Limit
	Key   string
	// Estimate is the cost the request was decided on, and spent when it
	// was allowed.
	Estimate int64
	// At is the instant the estimate was spent at, in Unix nanoseconds by
	// the store's clock (the engine's, but over a backend.Swapper the
	// store's): the instant a refund names.
	At int64
	// Decision is the request's decision on its estimate.
	Decision algo.Decision

	e       *Engine
	settled atomic.Bool
}

// Settlement is what a Settle did.
type Settlement struct {
	// Charged is the units charged beyond the estimate: the actual cost
	// less the estimate, or less when that would take the caller's debt
	// past its bound (see package algo's Charge).
	Charged int64
	// Refunded is the units of the estimate taken back: the estimate less
	// the actual cost, or less where the algorithm cannot take them back
	// exactly (see package algo's Refund).
	Refunded int64
	// Decision is the key's state after the settle: its Remaining (zero
	// in debt) and Reset. It is zero when the settle had nothing to do
	// (the actual cost was the estimate).
	Decision algo.Decision
}

// Reserve decides a request of cost estimate by key under l, as Apply
// does, spending the estimate when it is allowed, and returns the
// reservation to settle with the actual cost once it is known. A denied
// request's reservation has Decision.Allowed false and nothing to settle.
// The errors are Apply's; on an error the Reservation is nil.
//
// Over a backend.Striped store (the memory store) Reserve takes the
// striped path's general steps rather than Apply's devirtualised call.
// It allocates the Reservation; ReserveInto fills one of the caller's.
func (e *Engine) Reserve(ctx context.Context, l Limit, key string, estimate int64) (*Reservation, error) {
	r := new(Reservation)
	if err := e.ReserveInto(ctx, l, key, estimate, r); err != nil {
		return nil, err
	}
	return r, nil
}

// ReserveInto is Reserve filling *r, every field, rather than allocating
// a Reservation: the same decision and errors, and on an error *r is a
// reservation with nothing to settle. Reusing a Reservation for another
// request is the caller's to order: the one it held must be settled (or
// abandoned) first. r must not be nil.
func (e *Engine) ReserveInto(ctx context.Context, l Limit, key string, estimate int64, r *Reservation) error {
	r.Limit, r.Key, r.Estimate, r.At, r.Decision, r.e = l, key, estimate, 0, algo.Decision{}, e
	r.settled.Store(true) // nothing to settle until the estimate is spent
	if err := e.check(l, estimate); err != nil {
		return err
	}
	var err error
	var now int64
	if p := e.store.swap; p != nil {
		now, err = p.applyAt(ctx, e, l, key, estimate, true, &r.Decision)
	} else {
		now, err = e.applyStriped(ctx, l, key, estimate, true, &r.Decision)
	}
	if err != nil {
		return err
	}
	if r.Decision.Allowed {
		r.At = algo.SpentAt(l.Algorithm, now, &r.Decision)
		r.settled.Store(false)
	}
	return nil
}

// Settle settles the reservation with the request's actual cost (zero or
// more): above the estimate it charges the difference, even past the
// limit (the caller is then in debt, denied until the debt has refilled,
// and a denial's RetryAfter says when; the debt is bounded per algorithm:
// see package algo); below it, it refunds the difference where the
// algorithm can take it back exactly (never lifting the caller above its
// capacity, never into a window that has passed). Equal to it, it does
// nothing and reaches no store.
//
// A reservation settles once: a second Settle returns ErrSettled, and
// Settle on a denied request's reservation ErrNotReserved, each changing
// nothing. A negative actual cost returns an error wrapping
// ErrInvalidCost. Otherwise the errors are Apply's: ErrClosed, ErrStore
// (a settle that failed with it may have been written, as any write, and
// the reservation may be settled again: a retry may then settle twice),
// or ctx's (nothing was written; the reservation may be settled again).
//
// Over a backend.Swapper (Redis) a settle is one more compare-and-swap on
// the key, through the key's queue: queued behind a swap in flight, it is
// committed with the decisions queued with it, in one round trip; on an
// idle key it costs a round trip of its own. A refund announces itself to
// the other processes sharing the store (backend.Swap.Announce), which
// stop answering denials of the key from their last-seen records (see the
// package doc).
func (r *Reservation) Settle(ctx context.Context, actual int64) (Settlement, error) {
	if actual < 0 {
		return Settlement{}, fmt.Errorf("%w: actual cost %d", ErrInvalidCost, actual)
	}
	if !r.settled.CompareAndSwap(false, true) {
		if !r.Decision.Allowed {
			return Settlement{}, ErrNotReserved
		}
		return Settlement{}, ErrSettled
	}
	delta := actual - r.Estimate
	if delta == 0 {
		return Settlement{}, nil
	}
	e := r.e
	op := settleOp{kind: settleCharge, n: delta, at: r.At}
	if delta < 0 {
		op.kind, op.n = settleRefund, -delta
	}
	var s Settlement
	var err error
	if e.closed.Load() {
		err = ErrClosed
	} else if p := e.store.swap; p != nil {
		err = p.settle(ctx, e, r.Limit, r.Key, op, &s)
	} else {
		err = e.settleStriped(ctx, r.Limit, r.Key, op, &s)
	}
	if err != nil {
		r.settled.Store(false)
		return Settlement{}, err
	}
	return s, nil
}

// settleKind says what a settle does.
type settleKind uint8

const (
	settleNone   settleKind = iota // not a settle: a request
	settleCharge                   // charge n more units
	settleRefund                   // refund n units spent at at
)

// settleOp is one settle: a charge of n, or a refund of n spent at at.
type settleOp struct {
	kind settleKind
	n    int64
	at   int64
}

// step applies op, a settle, to state at now, returning the next state
// and the units charged or refunded.
func (op settleOp) step(a algo.Algorithm, state []byte, now int64, d *algo.Decision) ([]byte, int64) {
	if op.kind == settleCharge {
		return algo.Charge(a, state, now, op.n, d)
	}
	return algo.Refund(a, state, now, op.at, op.n, d)
}

// settleStriped is a settle on the striped path: under the key's stripe,
// read, settle and write, as a decision is made.
func (e *Engine) settleStriped(ctx context.Context, l Limit, key string, op settleOp, s *Settlement) error {
	_, k, err := e.stepStriped(ctx, l, key, op, true, &s.Decision)
	if op.kind == settleCharge {
		s.Charged = k
	} else {
		s.Refunded = k
	}
	return err
}

// settle is a settle on the swap path: one more request in the key's
// queue, committed with whatever is queued with it.
func (p *swapPath) settle(ctx context.Context, e *Engine, l Limit, key string, op settleOp, s *Settlement) error {
	if err := p.enter(ctx, e); err != nil {
		return err
	}
	defer p.life.RUnlock()
	k := AppendKey(nil, l.Namespace, key)
	sh := p.shard(k)
	w := &waiter{ctx: ctx, limit: l.Algorithm, ns: l.Namespace, key: key, cost: op.n, spend: true, settle: op.kind, at: op.at}
	err := p.queue(ctx, e, sh, k, w, &s.Decision)
	if err != nil {
		return err
	}
	if op.kind == settleCharge {
		s.Charged = w.settled
	} else {
		s.Refunded = w.settled
	}
	return nil
}

// ReserveAll is ApplyAll deciding on estimates: it decides reqs as one,
// every one allowed and spent or none, the requests' costs being their
// estimates, and fills rs (one per request, len(rs) >= len(reqs)) with
// each request's reservation to settle once its actual cost is known. It
// reports whether all were allowed; when one is denied, no reservation
// has anything to settle. The errors are ApplyAll's; on an error no
// reservation has anything to settle.
//
// A batch of one is ReserveInto. In a batch of several, each
// reservation's instant (At) is the engine's clock (over a
// backend.Swapper, the store's as estimated) read before the decision,
// not the instant each record was stepped at: a settle charges exactly as
// ReserveInto's would, and a refund takes back what it would at that
// earlier instant, which is never more (a bucket counts more refill since
// it, a window may have turned since it, a sliding log finds no entry at
// it and refunds nothing).
func (e *Engine) ReserveAll(ctx context.Context, reqs []Request, rs []Reservation) (bool, error) {
	if len(reqs) == 1 {
		err := e.ReserveInto(ctx, reqs[0].Limit, reqs[0].Key, reqs[0].Cost, &rs[0])
		return err == nil && rs[0].Decision.Allowed, err
	}
	at := e.now()
	if p := e.store.swap; p != nil {
		at += p.offset.Load()
	}
	for i, q := range reqs {
		r := &rs[i]
		r.Limit, r.Key, r.Estimate, r.At, r.Decision, r.e = q.Limit, q.Key, q.Cost, at, algo.Decision{}, e
		r.settled.Store(true)
	}
	ds, all, err := e.ApplyAll(ctx, reqs)
	if err != nil {
		return false, err
	}
	for i := range reqs {
		rs[i].Decision = ds[i]
		rs[i].settled.Store(!all)
	}
	return all, nil
}
