package engine

import (
	"bytes"
	"context"
	"math"
	"slices"
	"time"

	"github.com/sluice-go/sluice/algo"
	"github.com/sluice-go/sluice/backend"
)

// applyAll is ApplyAll over the swap path: every key is stepped on its
// last-seen record and committed by one compare-and-swap over them all; a
// denial anywhere makes it a compare-only swap, so nothing is spent.
//
// Over a store whose keys fall in several groups (backend.Swapper's
// SwapGroup: Redis Cluster slots), no one swap can cover them. The groups
// are then first confirmed by compare-only swaps, one per group after the
// first, so that a denial any of them holds is found before anything is
// spent (the first group is then confirmed too); then committed one group
// at a time, in the order of their first requests. A group whose record
// changed since its confirmation is stepped again; if it now denies, the
// call is a denial but the groups already committed stay spent. That
// charges limits for a refused request only when another process spent a
// later group's key to denial within that round trip; it never admits
// more than every limit allows. A store error of one group's call is a
// *RequestError naming the group's first request.
func (p *swapPath) applyAll(ctx context.Context, e *Engine, reqs []Request) ([]algo.Decision, bool, error) {
	if err := p.enter(ctx, e); err != nil {
		return nil, false, err
	}
	defer p.life.RUnlock()
	b := swapBatch{ctx: ctx, reqs: reqs, which: make([]int, len(reqs)), decisions: make([]algo.Decision, len(reqs))}
	var groups []swapGroup // in the order of their first requests
	var names []string     // each group's SwapGroup
	var byName map[string]int
	b.swaps, b.slots = make([]backend.Swap, 0, len(reqs)), make([]swapSlot, 0, len(reqs))
	idx := newKeyIndex(len(reqs))
	keys := make([]byte, 0, keysLen(reqs))
	slotGroup := make([]int, 0, len(reqs)) // slotGroup[s]: the group of slot s
	for j, r := range reqs {
		start := len(keys)
		keys = AppendKey(keys, r.Limit.Namespace, r.Key)
		k := keys[start:len(keys):len(keys)]
		h := backend.Hash(k)
		s, fresh := idx.slot(k, h)
		b.which[j] = s
		if fresh {
			b.swaps = append(b.swaps, backend.Swap{Key: k})
			b.slots = append(b.slots, swapSlot{sh: &p.shards[h&p.mask]})
			name := p.s.SwapGroup(k)
			// The groups by a scan of their names while they are few (one,
			// mostly), then by a map.
			g := -1
			if byName != nil {
				if i, ok := byName[name]; ok {
					g = i
				}
			} else {
				g = slices.Index(names, name)
			}
			if g < 0 {
				g = len(groups)
				names = append(names, name)
				groups = append(groups, swapGroup{first: j})
				if byName != nil {
					byName[name] = g
				} else if len(names) > scanKeys {
					byName = make(map[string]int, 2*len(names))
					for i, n := range names {
						byName[n] = i
					}
				}
			}
			groups[g].slots = append(groups[g].slots, s)
			slotGroup = append(slotGroup, g)
		}
	}
	if len(groups) > 1 {
		// Each group's requests, for commit (one group is commitGroup's).
		for j, s := range b.which {
			g := &groups[slotGroup[s]]
			g.reqs = append(g.reqs, j)
		}
	}
	// A denial the last-seen records show is answered before queueing for
	// the keys, and again once they are owned: the callers before may have
	// spent them.
	if denied, err := p.deniedAllLocally(e, &b); denied || err != nil {
		if err != nil {
			return nil, false, err
		}
		return b.decisions, false, nil
	}
	// Own every key, in the order of their bytes so that two calls on
	// overlapping keys cannot each wait for the other.
	byKey := make([]int, len(b.slots))
	for s := range byKey {
		byKey[s] = s
	}
	slices.SortFunc(byKey, func(x, y int) int { return bytes.Compare(b.swaps[x].Key, b.swaps[y].Key) })
	owned := make([]*flight, len(b.slots))
	call := &multiCall{b: &b, owned: owned, ok: len(groups) == 1}
	if call.ok {
		call.group = names[0]
	}
	defer func() {
		// In the reverse of the order owned: the caller woken on a key
		// finds the keys after it in byte order already free, so that
		// calls sharing the first key (a tenant's) are adopted together
		// rather than stopped at one whose other key is not let go yet.
		for i := len(byKey) - 1; i >= 0; i-- {
			if s := byKey[i]; owned[s] != nil {
				p.release(b.slots[s].sh, b.swaps[s].Key, owned[s])
			}
		}
	}()
	for _, s := range byKey {
		f := p.own(b.slots[s].sh, b.swaps[s].Key, call)
		if f == nil {
			// Decided by the owner of the key, with its own call.
			if call.err != nil {
				return nil, false, call.err
			}
			return b.decisions, call.all, nil
		}
		owned[s] = f
	}
	if denied, err := p.deniedAllLocally(e, &b); denied || err != nil {
		if err != nil {
			return nil, false, err
		}
		return b.decisions, false, nil
	}
	if call.ok {
		// One group: committed with the calls queued for these keys whose
		// every key can be had now, in one compare-and-swap.
		group, union := p.adopt(call)
		p.commitGroup(e, group, union)
		if call.err != nil {
			return nil, false, call.err
		}
		return b.decisions, call.all, nil
	}
	for s := range b.slots {
		seen := b.slots[s].sh.lastSeen(b.swaps[s].Key)
		b.slots[s].expected, b.slots[s].kept = seen.v, seen.kept
	}
	// confirm sends compare-only swaps over gs, one group at a time, for
	// their requests' decisions.
	confirm := func(gs []swapGroup) error {
		for _, g := range gs {
			if _, err := p.commit(e, &b, g, false); err != nil {
				return g.fail(err)
			}
		}
		return nil
	}
	for _, g := range groups[1:] {
		all, err := p.commit(e, &b, g, false)
		if err != nil {
			return nil, false, g.fail(err)
		}
		if !all {
			// Denied before anything is spent: the first group is
			// confirmed for its decisions.
			if err := confirm(groups[:1]); err != nil {
				return nil, false, err
			}
			return b.decisions, false, nil
		}
	}
	for i, g := range groups {
		all, err := p.commit(e, &b, g, true)
		if err != nil {
			return nil, false, g.fail(err)
		}
		if !all {
			// Denied after the groups before were committed: the
			// remaining groups are confirmed for their decisions.
			if err := confirm(groups[i+1:]); err != nil {
				return nil, false, err
			}
			return b.decisions, false, nil
		}
	}
	return b.decisions, true, nil
}

// swapGroup is one group of an ApplyAll's keys (backend.Swapper.SwapGroup):
// its slots, its requests (their indices in the call, in order) and the
// index of its first request.
type swapGroup struct {
	slots []int
	reqs  []int
	first int
}

// fail returns err, the failure of g's compare-and-swap, as the error of
// the request it concerns first, so that a door counts it under that
// request's rule.
func (g swapGroup) fail(err error) error { return &RequestError{Request: g.first, Err: err} }

// deniedAllLocally steps b's requests in order on the last-seen records of
// their keys, spending nothing, and reports whether one of them is denied
// and every denial is one deniedLocally would answer alone, stepped on the
// record last seen rather than after an earlier request of the call spent
// from it: then the call is answered from those decisions, with no round
// trip (the others' say what they would
// have answered on the records last seen). Otherwise b.decisions are left
// zero.
func (p *swapPath) deniedAllLocally(e *Engine, b *swapBatch) (bool, error) {
	if p.confirm {
		return false, nil
	}
	now, err := p.now(b.ctx, e)
	if err != nil {
		return false, e.swapError(b.ctx, err)
	}
	if now < p.latest.Load() {
		return false, nil // see deniedLocally
	}
	seen := make([]seenRecord, len(b.slots))
	states := make([][]byte, len(b.slots))
	for s := range b.slots {
		seen[s] = p.current(b.slots[s].sh.lastSeen(b.swaps[s].Key), now)
		if seen[s].v != nil {
			states[s] = append([]byte(nil), seen[s].v...)
		}
	}
	local := false
	spent := make([]bool, len(b.slots)) // an earlier request of this call spent from the slot
	for j, r := range b.reqs {
		s, d := b.which[j], &b.decisions[j]
		next := algo.StepInto(r.Limit.Algorithm, states[s], now, r.Cost, d)
		if d.CorruptState {
			local = false
			break
		}
		if next != nil {
			states[s] = next
		}
		if d.Allowed {
			spent[s] = true
			continue
		}
		if spent[s] {
			// Denied only after an earlier request of this call spent from
			// the same record: on the store's record, more spent than the
			// one last seen, that earlier request may be the one denied
			// and this one allowed. The store decides which.
			local = false
			break
		}
		if seen[s].v == nil || addSat(now, d.Reset) > seen[s].kept {
			// This denial is the store's to keep (see seenRecord).
			local = false
			break
		}
		local = true
	}
	if !local {
		clear(b.decisions)
		return false, nil
	}
	p.localDenials.Add(1)
	return true, nil
}

// swapBatch is one ApplyAll's keys and decisions over the swap path: one
// slot and one swap per distinct key.
type swapBatch struct {
	ctx       context.Context // the caller's
	reqs      []Request
	which     []int // reqs[j] is on slot which[j]
	slots     []swapSlot
	swaps     []backend.Swap
	decisions []algo.Decision
}

type swapSlot struct {
	sh       *swapShard
	expected []byte        // the record the swap expects
	kept     int64         // until when the store keeps expected (seenRecord.kept)
	state    []byte        // the record as the requests step it
	keep     time.Duration // the longest wait a denial on it told its caller
}

// commit steps the requests of g, one group of an ApplyAll over several
// (a call over one group is commitGroup's), on their slots' expected
// records and sends one compare-and-swap over them: writing the stepped
// records when write is set and every request is allowed, else comparing
// only. On a mismatch it steps again on the store's records, at most
// p.retries times. It reports whether every request was allowed; their
// decisions are in b.decisions.
func (p *swapPath) commit(e *Engine, b *swapBatch, g swapGroup, write bool) (bool, error) {
	slots := g.slots
	swaps := make([]backend.Swap, len(slots))
	for attempt := 0; ; attempt++ {
		now, err := p.now(b.ctx, e)
		if err != nil {
			return false, e.swapError(b.ctx, err)
		}
		for _, s := range slots {
			sl := &b.slots[s]
			cur := p.current(seenRecord{sl.expected, sl.kept}, now)
			sl.expected, sl.kept = cur.v, cur.kept
			sl.state, sl.keep = nil, 0
			if sl.expected != nil {
				sl.state = append([]byte(nil), sl.expected...)
			}
			b.swaps[s] = backend.Swap{Key: b.swaps[s].Key, Expected: sl.expected, Keep: true}
		}
		all, corrupt := true, false
		for _, j := range g.reqs {
			r, s := b.reqs[j], b.which[j]
			d := &b.decisions[j]
			next := algo.StepInto(r.Limit.Algorithm, b.slots[s].state, now, r.Cost, d)
			all = all && d.Allowed
			corrupt = corrupt || d.CorruptState
			if next != nil || d.CorruptState {
				b.slots[s].state = next
				b.swaps[s].Keep, b.swaps[s].Value, b.swaps[s].TTL = false, next, d.TTL
			} else if !d.Allowed && b.swaps[s].Keep {
				// Denied on the record the store holds (no request
				// before it in the call stepped it): kept until its
				// caller is full again, should nothing be written.
				b.slots[s].keep = max(b.slots[s].keep, d.Reset)
			}
		}
		for i, s := range slots {
			if !all || !write {
				// A comparison only: nothing spent, and the record kept
				// until a denied caller is full again (see seenRecord).
				b.swaps[s].Keep, b.swaps[s].TTL = true, b.slots[s].keep
			}
			swaps[i] = b.swaps[s]
		}
		ok, cur, err := p.cas(b.ctx, e, swaps)
		if err != nil {
			for _, s := range slots {
				p.remember(b.slots[s].sh, b.swaps[s].Key, nil, 0)
			}
			return false, e.swapError(b.ctx, err)
		}
		if ok {
			for _, s := range slots {
				sl := &b.slots[s]
				sl.expected, sl.kept = p.committed(b.swaps[s], sl.expected, sl.kept, now)
				p.remember(sl.sh, b.swaps[s].Key, sl.expected, sl.kept)
			}
			if corrupt {
				e.noteCorrupt("", "")
			}
			return all, nil
		}
		for i, s := range slots {
			b.slots[s].expected, b.slots[s].kept = cur[i], 0
			p.remember(b.slots[s].sh, b.swaps[s].Key, cur[i], 0)
		}
		if attempt == p.retries {
			return false, e.storeError("swap", ErrContention)
		}
		backoff(attempt)
	}
}

// committed returns the record the store holds once w, a swap that
// expected expected (kept by the store until kept), was committed at now,
// and until when the store keeps it: expected, kept longer by a Keep with
// a TTL; w's Value; or nothing, for a deletion. A TTL is kept as the store
// keeps it, rounded up to its unit.
func (p *swapPath) committed(w backend.Swap, expected []byte, kept, now int64) ([]byte, int64) {
	ttl := int64(w.TTL)
	if u := p.ttlUnit; u > 0 && ttl > 0 && ttl%u != 0 {
		ttl = min(ttl, math.MaxInt64-u) + u - ttl%u
	}
	switch {
	case w.Keep && ttl > 0:
		return expected, max(kept, addSat(now, time.Duration(ttl)))
	case w.Keep:
		return expected, kept
	case ttl > 0:
		return w.Value, addSat(now, time.Duration(ttl))
	default:
		return nil, 0
	}
}
