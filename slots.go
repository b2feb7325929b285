package sluice

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/sluice-go/sluice/algo"
	"github.com/sluice-go/sluice/backend"
	"github.com/sluice-go/sluice/engine"
)

// In-flight limits: a rule of algorithm concurrency (algo.ConcurrencyName)
// admits at most its Limit requests of a key in flight at once. A request
// it admits takes a slot, a lease of the engine (engine.Lease), and the
// door gives it back when the response has ended or the client has gone
// (Door.Release); a slot never given back (the process crashed or hung)
// comes back by itself when its lease ends, MaxHold after it was taken.
//
// A concurrency rule is matched as any rule. Under match: all, a request's
// slots are taken first, then its rate rules decided as one batch; when a
// slot is refused the rate rules are not decided, and when a rate rule
// denies (or the store fails) the slots taken are given back at once: a
// refused request holds nothing and spends nothing. A refusal tells the
// rule's RetryAfter (no exact wait exists), and its rate-limit fields say,
// of the slots: the limit, how many are free (Remaining: none on a
// refusal; after an admission, those left once this request took its
// own), and when every slot held now will have come back at the latest
// (the reset, at most MaxHold).

// ReleaseTimeout bounds the release of a slot over a store that may make
// it wait (a backend.Swapper: Redis). A release outlives its request's
// context (the client that went away must still free its slot), so it is
// given a deadline of its own; one that misses it leaves the lease to end
// at its MaxHold. Over the other stores a release never waits.
const ReleaseTimeout = 5 * time.Second

// SlotObserver is an Observer that is also told of the slots of
// concurrency rules: each slot the process takes and gives back (a gauge of
// the slots it holds per rule), and each release that freed nothing
// because the lease had ended first. Package metrics' *Metrics and package
// sluiceotel's *Observer are ones; an Observer that is not sees the
// decisions of concurrency rules as any others, and no slot.
type SlotObserver interface {
	Observer
	// ObserveSlots records that the process took (delta 1) or gave back
	// (delta -1) a slot under the named rule.
	ObserveSlots(rule string, delta int64)
	// ObserveLeaseExpired records that a release under the named rule
	// freed nothing: the lease had ended (its maximum hold had passed)
	// before the request did, and the slot had come back by itself.
	ObserveLeaseExpired(rule string)
}

// Held is what a Door holds for an Allowed request decided under
// concurrency rules (Outcome.Held): one slot per rule, to give back once
// the response has ended (Door.Release).
type Held struct {
	// Rules are the concurrency rules the slots were taken under, as
	// decided.
	Rules []*CompiledRule
	// Leases are the slots, one per rule.
	Leases []engine.Lease

	done atomic.Bool // Door.Release has been called
	// The scratch of a request's one slot, the common case: Held is then
	// one allocation.
	oneRule  [1]*CompiledRule
	oneLease [1]engine.Lease
}

// newHeld returns a Held with scratch for n slots' Leases.
func newHeld(n int) *Held {
	h := new(Held)
	if n == 1 {
		h.Leases = h.oneLease[:]
	} else {
		h.Leases = make([]engine.Lease, n)
	}
	return h
}

// hold fills h's Rules with rules, the rules its slots were taken under.
func (h *Held) hold(rules []*CompiledRule) {
	h.Rules = append(h.oneRule[:0], rules...)
}

// Release gives back the slots of h, an Allowed Outcome's Held, once: a
// second call does nothing, nor does a nil h. ctx is the request's: the
// release outlives it (context.WithoutCancel), bounded by ReleaseTimeout,
// so that a client that went away frees its slots at once. A release that
// fails is logged and counted as a store error; its lease ends by itself
// at its MaxHold.
func (d *Door[R]) Release(ctx context.Context, h *Held) {
	if h == nil || !h.done.CompareAndSwap(false, true) {
		return
	}
	for i := range h.Leases {
		d.core.Release(ctx, h.Rules[i].Name(), &h.Leases[i])
	}
}

// Acquire takes a slot of the concurrency limit l for key into ls
// (engine.Engine.AcquireInto) for a door that holds one limit's slots
// outside any rule (package httplimit's and grpclimit's InFlight): a
// store error is counted and logged under name as Decide's are, and a
// slot taken is told to a SlotObserver. Give the slot back by Release.
func (c *Decider) Acquire(ctx context.Context, name string, l engine.Limit, key string, ls *engine.Lease) error {
	err := c.eng.AcquireInto(ctx, l, key, ls)
	switch {
	case err == nil:
		if ls.Decision.Allowed && c.slotObs != nil {
			c.slotObs.ObserveSlots(name, 1)
		}
	case ended(ctx, err):
	case engine.IsStoreError(err):
		c.storeError(name, c.policy, err)
	default:
		c.log.Error(c.name+": cannot take a slot", "rule", name, "err", err)
	}
	return err
}

// Release gives back ls, a slot taken under the named rule (by Decide or
// Acquire), and tells a SlotObserver; call it once per slot taken. ctx is
// the request's: the release outlives it, bounded by ReleaseTimeout. It
// reports whether the release freed the slot: false when the lease had
// ended first (its MaxHold passed: told as ObserveLeaseExpired) or on an
// error, which is counted and logged as a store error (at most a line a
// second); the lease then ends by itself at its MaxHold.
func (c *Decider) Release(ctx context.Context, name string, ls *engine.Lease) bool {
	freed, err := c.release(ctx, name, ls)
	if c.slotObs != nil {
		c.slotObs.ObserveSlots(name, -1)
		if err == nil && !freed {
			c.slotObs.ObserveLeaseExpired(name)
		}
	}
	return freed
}

// release gives back ls with a context of its own (see Release), logging
// and counting an error.
func (c *Decider) release(ctx context.Context, name string, ls *engine.Lease) (bool, error) {
	switch c.releaseCtx {
	case releaseBounded:
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), ReleaseTimeout)
		defer cancel()
	case releaseUncancelled:
		ctx = context.WithoutCancel(ctx)
	}
	freed, err := ls.Release(ctx)
	switch {
	case err == nil:
	case engine.IsStoreError(err), errors.Is(err, context.DeadlineExceeded):
		c.storeError(name, c.policy, err)
	default:
		c.log.Error(c.name+": cannot give a slot back", "rule", name, "err", err)
	}
	return freed, err
}

// giveBack gives back at once the slots a batch took before it was
// refused, or failed: the request holds nothing. They were never told to
// a SlotObserver.
func (c *Decider) giveBack(ctx context.Context, b Batch, leases []engine.Lease) {
	for i := range leases {
		c.release(ctx, b.name(i), &leases[i])
	}
}

// spendSlots decides b, whose first len(b.Leases) requests are of
// concurrency limits: their slots first, one by one, each into its Lease
// (engine.Engine.AcquireInto), then the other requests as a batch of their
// own (spend). It is all or nothing: when a slot is refused, the requests
// after it are not decided (Decided.Tried), and when the others do not all
// allow, or an error stops the batch, the slots taken are given back at
// once.
func (c *Decider) spendSlots(ctx context.Context, e *engine.Engine, b Batch, reqs []engine.Request, scratch *Scratch) (out Decided, err error) {
	n := len(b.Leases)
	out.Decisions = make([]algo.Decision, len(reqs))
	for i := range n {
		q := reqs[i]
		if err := e.AcquireInto(ctx, q.Limit, q.Key, &b.Leases[i]); err != nil {
			c.giveBack(ctx, b, b.Leases[:i])
			return out, &engine.RequestError{Request: i, Err: err}
		}
		out.Decisions[i] = b.Leases[i].Decision
		if !out.Decisions[i].Allowed {
			c.giveBack(ctx, b, b.Leases[:i])
			out.Over, out.tried = true, i+1
			return out, nil
		}
	}
	if n == len(reqs) {
		out.All = true
		return out, nil
	}
	rest := Batch{Reserve: b.Reserve}
	if b.Reserve != nil {
		rest.Reserve = b.Reserve[n:]
	}
	sub, err := c.spend(ctx, e, rest, reqs[n:], scratch)
	copy(out.Decisions[n:], sub.Decisions)
	out.All, out.Over = sub.All, sub.Over
	if err != nil {
		var re *engine.RequestError
		if errors.As(err, &re) {
			err = &engine.RequestError{Request: n + re.Request, Err: re.Err}
		} else {
			err = &engine.RequestError{Request: n, Err: err}
		}
	}
	if err != nil || !sub.All {
		c.giveBack(ctx, b, b.Leases)
	}
	return out, err
}

// How a release's context is made from its request's, by the engine's
// store (see package engine's Context): a release must reach the store
// whether the request's context has ended or not, and must not wait on the
// store without a bound.
const (
	// releaseAsIs: the memory store never reads the context, nor waits.
	releaseAsIs = iota
	// releaseUncancelled: a durable store (Pebble, bbolt) refuses a call
	// whose context has ended, but never waits on one.
	releaseUncancelled
	// releaseBounded: a backend.Swapper (Redis) waits on the store, for
	// at most ReleaseTimeout.
	releaseBounded
)

// releaseCtxOf returns how a release's context is made over b.
func releaseCtxOf(b backend.Backend) int {
	switch b.(type) {
	case backend.Striped:
		return releaseAsIs
	case backend.Swapper:
		return releaseBounded
	}
	return releaseUncancelled
}

// isSlots reports whether l is a concurrency limit, whose requests take
// slots.
func isSlots(l engine.Limit) bool {
	_, ok := l.Algorithm.(*algo.Concurrency)
	return ok
}
