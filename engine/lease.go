package engine

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/sluice-go/sluice/algo"
)

// ErrNotConcurrency is returned by Acquire for a limit that is not a
// concurrency limit (algo.ConcurrencyName): only such a limit's record
// holds leases.
var ErrNotConcurrency = errors.New("sluice/engine: not a concurrency limit")

// Lease is one slot of a concurrency limit (algo.ConcurrencyName), held by
// one request from Acquire until Release, or until the limit's maximum
// hold has passed, when the slot comes back by itself: a process that
// crashes or hangs holding it leaks nothing for longer than that.
//
// A Lease is safe for concurrent use; it releases once.
type Lease struct {
	// Limit and Key are what the slot was taken under.
	Limit Limit
	Key   string
	// ID is the lease's id in the key's record: unique for the key, and
	// what Engine.Release names.
	ID int64
	// Decision is the acquisition's decision: Allowed when a slot was
	// taken (Remaining then is the slots left), and for a denial a
	// RetryAfter that is the time until enough leases expire, an upper
	// bound of the wait, since a release frees a slot sooner.
	Decision algo.Decision

	e        *Engine
	released atomic.Bool
}

// Acquire takes a slot of the concurrency limit l for key, when fewer than
// its limit are held (leases neither released nor expired), and returns
// its lease; a denied request's lease has Decision.Allowed false and
// holds nothing. The errors are Apply's, and ErrNotConcurrency for a limit
// of another algorithm; on an error the Lease is nil.
//
// It is exact on every store: under the key's stripe lock over the memory
// store and the durable tier (whose Durability applies to it as to a
// decision), and over a backend.Swapper (Redis) by the key's
// compare-and-swap, so a fleet of processes sharing the store holds at
// most the limit between them. It allocates the Lease; AcquireInto fills
// one of the caller's.
//
// Apply and ApplyAll on a concurrency limit take slots too, but
// return no lease id to release them by: those slots come back only at
// the maximum hold.
func (e *Engine) Acquire(ctx context.Context, l Limit, key string) (*Lease, error) {
	ls := new(Lease)
	if err := e.AcquireInto(ctx, l, key, ls); err != nil {
		return nil, err
	}
	return ls, nil
}

// AcquireInto is Acquire filling *ls, every field, rather than allocating
// a Lease: the same decision and errors, and on an error *ls holds
// nothing. The lease *ls held before must be released (or abandoned)
// first. ls must not be nil.
func (e *Engine) AcquireInto(ctx context.Context, l Limit, key string, ls *Lease) error {
	ls.Limit, ls.Key, ls.ID, ls.Decision, ls.e = l, key, 0, algo.Decision{}, e
	ls.released.Store(true) // nothing to release until a slot is taken
	if _, ok := l.Algorithm.(*algo.Concurrency); !ok {
		if l.Algorithm == nil {
			return ErrNoAlgorithm
		}
		return fmt.Errorf("%w: %s", ErrNotConcurrency, l.Algorithm.Name())
	}
	if err := e.check(l, 1); err != nil {
		return err
	}
	var err error
	var id int64
	if p := e.store.swap; p != nil {
		id, err = p.applyAt(ctx, e, l, key, 1, true, &ls.Decision)
	} else {
		id, err = e.applyStriped(ctx, l, key, 1, true, &ls.Decision)
	}
	if err != nil {
		return err
	}
	if ls.Decision.Allowed {
		ls.ID = id
		ls.released.Store(false)
	}
	return nil
}

// Release gives the slot back. It reports whether it freed one: false
// when the lease had expired (its maximum hold passed, and the slot came
// back by itself; Stats.LeasesExpired counts it), was released already,
// or was never taken (a denial). A second Release does nothing and
// returns false, nil. The errors are Apply's: after ErrStore or ctx's
// error the release may be retried (a release is idempotent on the store:
// it names its lease, which a second release no longer finds).
//
// Over a backend.Swapper (Redis) the release is one more request in the
// key's queue, committed with whatever is queued with it, and announces
// itself to the other processes sharing the store, which stop answering
// the key's denials from their last-seen records.
func (ls *Lease) Release(ctx context.Context) (bool, error) {
	if !ls.released.CompareAndSwap(false, true) {
		return false, nil
	}
	freed, err := ls.e.Release(ctx, ls.Limit, ls.Key, ls.ID)
	if err != nil {
		ls.released.Store(false)
		return false, err
	}
	if !freed {
		ls.e.leasesExpired.Add(1)
	}
	return freed, nil
}

// Release releases the lease id of the concurrency limit l under key,
// when the key's record holds it live, and reports whether it did. It is
// idempotent: a lease released already, expired, or never issued frees
// nothing. Lease.Release calls it; a program that keeps a lease's id
// rather than its Lease (across a hand-off) calls it directly.
func (e *Engine) Release(ctx context.Context, l Limit, key string, id int64) (bool, error) {
	if _, ok := l.Algorithm.(*algo.Concurrency); !ok {
		if l.Algorithm == nil {
			return false, ErrNoAlgorithm
		}
		return false, fmt.Errorf("%w: %s", ErrNotConcurrency, l.Algorithm.Name())
	}
	if e.closed.Load() {
		return false, ErrClosed
	}
	op := settleOp{kind: settleRefund, n: 1, at: id}
	var s Settlement
	var err error
	if p := e.store.swap; p != nil {
		err = p.settle(ctx, e, l, key, op, &s)
	} else {
		err = e.settleStriped(ctx, l, key, op, &s)
	}
	if err != nil {
		return false, err
	}
	return s.Refunded > 0, nil
}

// spentAt returns the instant a later refund of a request stepped at now
// names: the id of the lease a concurrency limit's step added, or now.
func spentAt(a algo.Algorithm, now int64, spend bool, next []byte) int64 {
	if spend && next != nil {
		if _, ok := a.(*algo.Concurrency); ok {
			if id, _, ok := algo.LeaseOf(next); ok {
				return id
			}
		}
	}
	return now
}
