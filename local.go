package sluice

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/sluice-go/sluice/engine"
)

// Share returns r as one of n processes enforces it alone, when each must
// keep to its part of a budget the n share: Limit and Burst divided by n,
// rounded up and at least 1, so that the n shares together allow at least
// what r allows (for a bucket algorithm the rate is divided as well as the
// capacity, since the rate is Limit per Window). A Cost above the share's
// capacity is lowered to it: such a request can pass only when the share
// is whole, and then spends all of it. n of 1 or less returns r unchanged.
func (r Rule) Share(n int) Rule {
	if n <= 1 {
		return r
	}
	r.Limit = ceilShare(r.Limit, int64(n))
	if r.Burst > 0 {
		r.Burst = ceilShare(r.Burst, int64(n))
	}
	capacity := r.Limit
	if r.Burst > 0 {
		capacity = r.Burst
	}
	if r.Cost > capacity {
		r.Cost = capacity
	}
	return r
}

// ceilShare returns v/n rounded up, at least 1 (v and n positive).
func ceilShare(v, n int64) int64 {
	if v <= 0 {
		return v // invalid: left for validation to report
	}
	return max(1, (v-1)/n+1)
}

// maxLocalRules bounds the shares a LocalFallback keeps compiled; past it the
// cache starts again (each reload compiles new rules, so the old ones would
// otherwise stay).
const maxLocalRules = 1024

// LocalFallback is the in-process fallback of the FailLocal policy. When the
// store a fleet of gateways shares fails, a door decides the request on its
// engine (an in-process one, over the memory store) under its rule's Share of
// the fleet: with a fleet of 3, a rule of 10 an hour allows at most 4 an hour
// per gateway for as long as the store stays down, 12 across the fleet. What
// callers spend locally stays local: it is not carried to the store when it is
// back, and the store's records are not read while it is down. Each request
// tries the store first, so the fleet returns to the shared budget by itself as
// soon as the store answers again.
//
// Keep one LocalFallback for the life of the program, across reloads, so that
// what callers spent locally carries over. A LocalFallback is safe for
// concurrent use.
type LocalFallback struct {
	eng   *engine.Engine
	fleet int

	mu     sync.Mutex                                      // serialises additions to shares
	shares atomic.Pointer[map[*CompiledRule]*CompiledRule] // read with one atomic load; replaced whole under mu
}

// NewLocalFallback returns a LocalFallback deciding on e, normally an engine
// over package backend/memory's store, with the rules divided by fleetSize, the
// number of gateways sharing the store (0 means 1: each gateway keeps the whole
// limit). e stays the caller's to close.
func NewLocalFallback(e *engine.Engine, fleetSize int) (*LocalFallback, error) {
	if e == nil {
		return nil, errors.New("sluice: NewLocalFallback: nil engine")
	}
	if fleetSize < 0 {
		return nil, fmt.Errorf("sluice: NewLocalFallback: fleet size must be positive, got %d", fleetSize)
	}
	l := &LocalFallback{eng: e, fleet: max(1, fleetSize)}
	l.shares.Store(&map[*CompiledRule]*CompiledRule{})
	return l, nil
}

// shareOf returns c's share, compiled: c.Rule().Share of the fleet size, under the
// same name (so it counts in the same namespace of the local engine, and
// is reported under c's name). Shares are compiled once per rule and kept.
// Should a share not compile (no valid rule is known to lead there), c
// itself is returned.
func (l *LocalFallback) shareOf(c *CompiledRule) *CompiledRule {
	if l.fleet == 1 {
		return c
	}
	if s, ok := (*l.shares.Load())[c]; ok {
		return s
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	old := *l.shares.Load()
	if s, ok := old[c]; ok {
		return s
	}
	s, err := c.rule.Share(l.fleet).compile()
	if err != nil {
		s = c
	} else {
		s.origin = c.configured()
	}
	next := make(map[*CompiledRule]*CompiledRule, len(old)+1)
	if len(old) < maxLocalRules {
		for k, v := range old {
			next[k] = v
		}
	}
	next[c] = s
	l.shares.Store(&next)
	return s
}

// requests returns, for a decision of reqs under rules that the fleet's
// store could not make, each rule's share and the local engine's request
// for it (shareOf and request of each), in new slices: rules and reqs, which
// may be the caller's stack arrays, are not written to.
func (l *LocalFallback) requests(rules []*CompiledRule, reqs []engine.Request) ([]*CompiledRule, []engine.Request) {
	shares := make([]*CompiledRule, len(rules))
	local := make([]engine.Request, len(reqs))
	for i, c := range rules {
		shares[i] = l.shareOf(c)
		local[i] = l.request(c, reqs[i].Key, reqs[i].Cost)
	}
	return shares, local
}

// request returns the local engine's request for key under c's share,
// spending cost, lowered to the share's capacity when above it (see
// Share).
func (l *LocalFallback) request(c *CompiledRule, key string, cost int64) engine.Request {
	s := l.shareOf(c)
	if capacity := s.limit.Algorithm.Params().Capacity(); cost > capacity {
		cost = capacity
	}
	return engine.Request{Limit: s.limit, Key: key, Cost: cost}
}
