package main

import (
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
)

// call is one request of the traffic: an organisation and a user of it.
type call struct{ org, user int }

// traffic returns n calls over orgs organisations of users users each,
// skewed as a paying customer base is: organisation o is chosen with
// weight 1/(o+1) and, within it, user u with weight 1/(u+1)^1.2, so that
// the first organisations exhaust their pool, and the first users of the
// others their own budget while their organisation still has some. The
// same seed gives the same calls, in the same order, to every system.
func traffic(n, orgs, users int, seed uint64) []call {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	orgW := cumulative(orgs, 1)
	userW := cumulative(users, 1.2)
	calls := make([]call, n)
	for i := range calls {
		calls[i] = call{org: pick(r, orgW), user: pick(r, userW)}
	}
	return calls
}

// cumulative returns the running sums of the weights 1/(i+1)^s.
func cumulative(n int, s float64) []float64 {
	w := make([]float64, n)
	sum := 0.0
	for i := range w {
		sum += 1 / math.Pow(float64(i+1), s)
		w[i] = sum
	}
	return w
}

func pick(r *rand.Rand, cum []float64) int {
	x := r.Float64() * cum[len(cum)-1]
	for i, c := range cum {
		if x < c {
			return i
		}
	}
	return len(cum) - 1
}

// outcome is how a system answered one call.
type outcome int

const (
	admitted    outcome = iota // 200, or OK
	denied                     // 429, or OVER_LIMIT
	unavailable                // 503, or UNAVAILABLE and other gRPC errors
	failed                     // no answer: the gateway was down, a transport error
	nOutcomes
)

// tally counts the outcomes per organisation and user.
type tally struct {
	orgs, users int
	n           [][][nOutcomes]int64 // [org][user][outcome]
}

func newTally(orgs, users int) *tally {
	t := &tally{orgs: orgs, users: users, n: make([][][nOutcomes]int64, orgs)}
	for o := range t.n {
		t.n[o] = make([][nOutcomes]int64, users)
	}
	return t
}

func (t *tally) org(o int, oc outcome) int64 {
	var s int64
	for u := range t.n[o] {
		s += t.n[o][u][oc]
	}
	return s
}

func (t *tally) total(oc outcome) int64 {
	var s int64
	for o := range t.n {
		s += t.org(o, oc)
	}
	return s
}

// drive sends calls from callers concurrent callers, each taking the next
// call as soon as its last one is answered, through do (given the caller
// and the call's index), and returns the outcomes and how long it took.
// at, when not nil, is called once from its own goroutine when the call
// of index atIndex begins (a fault's start).
func drive(calls []call, callers, orgs, users int, do func(caller, i int, c call) outcome, atIndex int, at func()) (*tally, time.Duration) {
	per := make([]*tally, callers)
	var next atomic.Int64
	var wg sync.WaitGroup
	var faultWG sync.WaitGroup
	start := time.Now()
	for g := range callers {
		per[g] = newTally(orgs, users)
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= len(calls) {
					return
				}
				if at != nil && i == atIndex {
					faultWG.Go(at)
				}
				c := calls[i]
				per[g].n[c.org][c.user][do(g, i, c)]++
			}
		})
	}
	wg.Wait()
	took := time.Since(start)
	faultWG.Wait()
	all := newTally(orgs, users)
	for _, p := range per {
		for o := range p.n {
			for u := range p.n[o] {
				for k := range p.n[o][u] {
					all.n[o][u][k] += p.n[o][u][k]
				}
			}
		}
	}
	return all, took
}
