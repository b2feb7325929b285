package engine

import (
	"context"
	"time"

	"github.com/sluice-go/sluice/algo"
	"github.com/sluice-go/sluice/backend"
)

// maxAdopted bounds the ApplyAll calls one leader decides with its own in
// one compare-and-swap, and maxGroupKeys the keys that swap covers.
const (
	maxAdopted   = 63
	maxGroupKeys = 256
)

// multiCall is an ApplyAll over keys of one group on its way to owning
// them: what a leader needs to decide it together with its own (adopt).
type multiCall struct {
	b     *swapBatch
	group string    // the SwapGroup of every key; ok says there is one
	ok    bool      // every key is of one group: the call may be adopted
	owned []*flight // owned[s]: b.slots[s]'s key, once the call owns it
	// Set by the leader that adopted the call, before waking it.
	all bool
	err error
}

// adoption is one call of a group commit (the leader's own, or one it
// adopted): its union slot per own slot.
type adoption struct {
	call *multiCall
	w    *waiter // an adopted call's place in the queue of the key it waited for
	at   []int   // at[s]: the union slot of call.b.slots[s]
}

// unionSlot is one key of a group commit.
type unionSlot struct {
	sh       *swapShard
	key      []byte
	expected []byte
	kept     int64
	state    []byte
	swap     backend.Swap
	taken    *flight // taken for an adopted call: the leader releases it
}

// adopt collects the ApplyAll calls queued for the keys lead owns whose
// every key lead can decide now: keys lead owns, keys the call owns itself
// (it is parked until woken), and free keys, which adopt takes without
// waiting. It takes each queue's calls from its head, in order, up to the
// first it cannot adopt (a single-key caller, a call over several groups,
// a call one of whose keys another caller holds), so that the calls
// queued for that key are still decided in the order they came. (On an
// adopted call's other keys it may go ahead of callers queued there,
// which came as concurrently; it never spends what a limit does not
// allow.) It returns the group, lead first and then the calls adopted,
// taken off their queues, and the union of their keys, lead's first.
func (p *swapPath) adopt(lead *multiCall) ([]adoption, []unionSlot) {
	b := lead.b
	group := []adoption{{call: lead, at: make([]int, len(b.slots))}}
	union := make([]unionSlot, len(b.slots))
	index := make(map[string]int, len(b.slots))
	for s := range b.slots {
		union[s] = unionSlot{sh: b.slots[s].sh, key: b.swaps[s].Key}
		index[string(b.swaps[s].Key)] = s
		group[0].at[s] = s
	}
	for s := range b.slots {
		sh, f := b.slots[s].sh, lead.owned[s]
		// The queue of a key lead owns only grows while lead owns it
		// (only its owner takes from it), so the candidates read here
		// are still queued once the shard's lock is let go.
		sh.mu.Lock()
		var candidates []*waiter
		for _, w := range f.queue {
			if !w.multi || w.call == nil || !w.call.ok || w.call.group != lead.group {
				break // the calls behind it keep their turn after it
			}
			candidates = append(candidates, w)
		}
		sh.mu.Unlock()
		for _, w := range candidates {
			if len(group) == 1+maxAdopted {
				break
			}
			c := w.call
			if len(union)+len(c.b.slots) > maxGroupKeys {
				break
			}
			a := adoption{call: c, w: w, at: make([]int, len(c.b.slots))}
			mark := len(union)
			ok := true
			for s2 := range c.b.slots {
				k := c.b.swaps[s2].Key
				if u, in := index[string(k)]; in {
					a.at[s2] = u
					continue
				}
				var taken *flight
				if c.owned[s2] == nil {
					if taken = p.tryOwn(c.b.slots[s2].sh, k); taken == nil {
						ok = false
						break
					}
				}
				a.at[s2] = len(union)
				index[string(k)] = len(union)
				union = append(union, unionSlot{sh: c.b.slots[s2].sh, key: k, taken: taken})
			}
			if !ok {
				for _, u := range union[mark:] {
					delete(index, string(u.key))
					if u.taken != nil {
						p.release(u.sh, u.key, u.taken)
					}
				}
				union = union[:mark]
				break // nor is any call behind it adopted, so the key's calls keep their order
			}
			sh.mu.Lock()
			for i, q := range f.queue {
				if q == w {
					f.queue = append(f.queue[:i:i], f.queue[i+1:]...)
					break
				}
			}
			sh.mu.Unlock()
			group = append(group, a)
		}
	}
	return group, union
}

// tryOwn makes the caller the owner of k's queue if no one is deciding on
// k, without waiting; nil if someone is.
func (p *swapPath) tryOwn(sh *swapShard, k []byte) *flight {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.flights[string(k)] != nil {
		return nil
	}
	f := flights.Get().(*flight)
	sh.flights[string(k)] = f
	return f
}

// commitGroup decides group's calls, in order, on their keys' records, and
// commits them with one compare-and-swap over union, their keys: each call
// spends only if every one of its requests is allowed, stepped on the
// records as the calls before it left them, as if the calls had come one
// after another. On a mismatch every call is stepped again on the store's
// records, at most p.retries times. It then releases the keys taken for
// the adopted calls and wakes them (group[1:]), each with its own answer.
func (p *swapPath) commitGroup(e *Engine, group []adoption, union []unionSlot) {
	for u := range union {
		seen := union[u].sh.lastSeen(union[u].key)
		union[u].expected, union[u].kept = seen.v, seen.kept
	}
	all, err := p.stepGroup(e, group, union)
	for i, a := range group {
		a.call.all, a.call.err = all[i], err
	}
	for _, u := range union {
		if u.taken != nil {
			p.release(u.sh, u.key, u.taken)
		}
	}
	for _, a := range group[1:] {
		a.w.wake <- false
	}
}

// stepGroup is commitGroup's compare-and-swap loop; it reports each call's
// outcome.
func (p *swapPath) stepGroup(e *Engine, group []adoption, union []unionSlot) ([]bool, error) {
	all := make([]bool, len(group))
	swaps := make([]backend.Swap, len(union))
	type saved struct {
		state []byte
		swap  backend.Swap
	}
	var save []saved
	var touched []bool
	type keep struct {
		u     int
		reset time.Duration
	}
	var keeps []keep
	ctx := group[0].call.b.ctx
	if len(group) > 1 {
		var cancel context.CancelFunc
		ctx, cancel = sharedCtx(func(yield func(context.Context) bool) {
			for _, a := range group {
				if !yield(a.call.b.ctx) {
					return
				}
			}
		})
		defer cancel()
	}
	for attempt := 0; ; attempt++ {
		now, err := p.now(ctx, e)
		if err != nil {
			return all, e.swapError(ctx, err)
		}
		for u := range union {
			sl := &union[u]
			cur := p.current(seenRecord{sl.expected, sl.kept}, now)
			sl.expected, sl.kept = cur.v, cur.kept
			sl.state = nil
			if sl.expected != nil {
				sl.state = append([]byte(nil), sl.expected...)
			}
			sl.swap = backend.Swap{Key: sl.key, Expected: sl.expected, Keep: true}
		}
		corrupt := false
		for i, a := range group {
			b, at := a.call.b, a.at
			save = append(save[:0], make([]saved, len(b.slots))...)
			touched = append(touched[:0], make([]bool, len(b.slots))...)
			keeps = keeps[:0]
			for s := range b.slots {
				sl := &union[at[s]]
				save[s] = saved{nil, sl.swap}
				if sl.state != nil {
					save[s].state = append([]byte(nil), sl.state...)
				}
			}
			ok := true
			for j, r := range b.reqs {
				s := b.which[j]
				u := at[s]
				sl, d := &union[u], &b.decisions[j]
				next := algo.StepInto(r.Limit.Algorithm, sl.state, now, r.Cost, d)
				ok = ok && d.Allowed
				corrupt = corrupt || d.CorruptState
				switch {
				case next != nil || d.CorruptState:
					sl.state = next
					sl.swap.Keep, sl.swap.Value, sl.swap.TTL = false, next, d.TTL
					touched[s] = true
				case !d.Allowed && !touched[s] && (sl.swap.Keep || sl.swap.Value != nil):
					// Denied on the record as the store will hold it
					// (no request of this call stepped it before): kept
					// until its caller is full again, should this call
					// write nothing (see seenRecord).
					keeps = append(keeps, keep{u, d.Reset})
				}
			}
			all[i] = ok
			if ok {
				continue
			}
			// Denied: nothing of this call is spent.
			for s := range b.slots {
				sl := &union[at[s]]
				sl.state, sl.swap = save[s].state, save[s].swap
				if !sl.swap.Keep {
					sl.swap.Value = sl.state // the write's bytes, as they were
				}
			}
			for _, k := range keeps {
				union[k.u].swap.TTL = max(union[k.u].swap.TTL, k.reset)
			}
		}
		for u := range union {
			swaps[u] = union[u].swap
		}
		ok, cur, err := p.cas(ctx, e, swaps)
		if err != nil {
			for _, sl := range union {
				p.remember(sl.sh, sl.key, nil, 0)
			}
			return all, e.swapError(ctx, err)
		}
		if ok {
			for _, sl := range union {
				v, kept := p.committed(sl.swap, sl.expected, sl.kept, now)
				p.remember(sl.sh, sl.key, v, kept)
			}
			if corrupt {
				e.noteCorrupt("", "")
			}
			return all, nil
		}
		for u := range union {
			union[u].expected, union[u].kept = cur[u], 0
			p.remember(union[u].sh, union[u].key, cur[u], 0)
		}
		if attempt == p.retries {
			return all, e.storeError("swap", ErrContention)
		}
		backoff(attempt)
	}
}
