package algo_test

import (
	"bytes"
	"fmt"
	"math/big"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/sluice-go/sluice/algo"
)

// A model of each algorithm's spending, at parameters where its arithmetic
// is exact (a window of one second, so that a bucket refills a whole number
// of nano-tokens every nanosecond and GCRA's interval is whole), kept in
// the scale the algorithm counts in: nano-tokens for the token and leaky
// buckets, nanoseconds of debt for GCRA, units for the windows, w-scaled
// units for the sliding counter, entries for the log.
type model interface {
	// advance moves the model to now (never backwards).
	advance(now int64)
	// fits reports whether a request of cost c fits now, and what would be
	// left after it (or is left, when it does not fit).
	fits(c int64) (bool, int64)
	// add spends c units at now, without any bound.
	add(now, c int64)
	// chargeable is how many of n units a charge adds (the debt bound).
	chargeable(n int64) int64
	// refundable is how many of n units spent at at a refund takes back.
	refundable(now, at, n int64) int64
	// remove takes back k units spent at at.
	remove(at, k int64)
	// remaining is the whole units left now (zero in debt).
	remaining() int64
	// spent is what the model holds as spent, in its scale, and the scale
	// of one unit.
	spent() (*big.Int, int64)
}

const sec = int64(time.Second)

type bucketModel struct {
	c, limit, s, u int64 // capacity, limit per second, nano-tokens spent as of u
	back           int64 // the nano-tokens the last refundable gives back
}

func (m *bucketModel) advance(now int64) {
	if now > m.u {
		m.s = max(0, m.s-refill(now-m.u, m.limit))
		m.u = now
	}
}
func (m *bucketModel) fits(c int64) (bool, int64) {
	if m.s+c*sec <= m.c*sec {
		return true, (m.c*sec - m.s - c*sec) / sec
	}
	return false, max(0, (m.c*sec-m.s)/sec)
}
func (m *bucketModel) add(_, c int64)           { m.s += c * sec }
func (m *bucketModel) chargeable(n int64) int64 { return min(n, max(0, (2*m.c*sec-m.s)/sec)) }
func (m *bucketModel) refundable(now, at, n int64) int64 {
	m.back = max(0, min(n*sec-refill(now-at, m.limit), m.s))
	return m.back / sec
}
func (m *bucketModel) remove(_, _ int64)        { m.s -= m.back }
func (m *bucketModel) remaining() int64         { return max(0, (m.c*sec-m.s)/sec) }
func (m *bucketModel) spent() (*big.Int, int64) { return big.NewInt(m.s), sec }

// refill is the nano-tokens a bucket of limit per second refills in dt,
// saturating.
func refill(dt, limit int64) int64 {
	if dt > (1<<62)/limit {
		return 1 << 62
	}
	return dt * limit
}

type gcraModel struct {
	c, i, d, u int64 // capacity, interval, debt in ns as of u
	back       int64 // the nanoseconds the last refundable gives back
}

func (m *gcraModel) advance(now int64) {
	if now > m.u {
		m.d = max(0, m.d-(now-m.u))
		m.u = now
	}
}
func (m *gcraModel) fits(c int64) (bool, int64) {
	tau := m.c * m.i
	if m.d+c*m.i <= tau {
		return true, (tau - m.d - c*m.i) / m.i
	}
	return false, max(0, (tau-m.d)/m.i)
}
func (m *gcraModel) add(_, c int64)           { m.d += c * m.i }
func (m *gcraModel) chargeable(n int64) int64 { return min(n, max(0, (2*m.c*m.i-m.d)/m.i)) }
func (m *gcraModel) refundable(now, at, n int64) int64 {
	m.back = max(0, min(n*m.i-(now-at), m.d))
	return m.back / m.i
}
func (m *gcraModel) remove(_, _ int64)        { m.d -= m.back }
func (m *gcraModel) remaining() int64         { return max(0, (m.c*m.i-m.d)/m.i) }
func (m *gcraModel) spent() (*big.Int, int64) { return big.NewInt(m.d), m.i }

type fixedModel struct{ c, start, count int64 }

func floorAlign(t, w int64) int64 {
	q := t / w
	if t%w < 0 {
		q--
	}
	return q * w
}

func (m *fixedModel) advance(now int64) {
	if s := floorAlign(now, sec); s > m.start {
		m.start, m.count = s, 0
	}
}
func (m *fixedModel) fits(c int64) (bool, int64) {
	if m.count+c <= m.c {
		return true, m.c - m.count - c
	}
	return false, max(0, m.c-m.count)
}
func (m *fixedModel) add(_, c int64)           { m.count += c }
func (m *fixedModel) chargeable(n int64) int64 { return min(n, max(0, 2*m.c-m.count)) }
func (m *fixedModel) refundable(_, at, n int64) int64 {
	if floorAlign(at, sec) != m.start {
		return 0
	}
	return min(n, m.count)
}
func (m *fixedModel) remove(_, k int64)        { m.count -= k }
func (m *fixedModel) remaining() int64         { return max(0, m.c-m.count) }
func (m *fixedModel) spent() (*big.Int, int64) { return big.NewInt(m.count), 1 }

type counterModel struct{ c, start, count, prev, now int64 }

func (m *counterModel) advance(now int64) {
	m.now = now
	if s := floorAlign(now, sec); s > m.start {
		if s == m.start+sec {
			m.prev = m.count
		} else {
			m.prev = 0
		}
		m.start, m.count = s, 0
	}
}

// usedW is the estimate scaled by the window.
func (m *counterModel) usedW() *big.Int {
	u := big.NewInt(m.prev)
	u.Mul(u, big.NewInt(sec-(m.now-m.start)))
	return u.Add(u, new(big.Int).Mul(big.NewInt(m.count), big.NewInt(sec)))
}
func (m *counterModel) roomAfter(c int64) int64 {
	r := new(big.Int).Mul(big.NewInt(m.c-c), big.NewInt(sec))
	r.Sub(r, m.usedW())
	if r.Sign() < 0 {
		return -1
	}
	return r.Div(r, big.NewInt(sec)).Int64()
}
func (m *counterModel) fits(c int64) (bool, int64) {
	if r := m.roomAfter(c); r >= 0 {
		return true, r
	}
	return false, max(0, m.roomAfter(0))
}
func (m *counterModel) add(_, c int64)           { m.count += c }
func (m *counterModel) chargeable(n int64) int64 { return min(n, max(0, 2*m.c-m.count)) }
func (m *counterModel) refundable(_, at, n int64) int64 {
	if floorAlign(at, sec) != m.start {
		return 0
	}
	return min(n, m.count)
}
func (m *counterModel) remove(_, k int64)        { m.count -= k }
func (m *counterModel) remaining() int64         { return max(0, m.roomAfter(0)) }
func (m *counterModel) spent() (*big.Int, int64) { return m.usedW(), sec }

type logModel struct {
	c     int64
	times []int64
}

func (m *logModel) advance(now int64) {
	i := 0
	for i < len(m.times) && m.times[i] <= now-sec {
		i++
	}
	m.times = m.times[i:]
}
func (m *logModel) fits(c int64) (bool, int64) {
	n := int64(len(m.times))
	if n+c <= m.c {
		return true, m.c - n - c
	}
	return false, max(0, m.c-n)
}
func (m *logModel) add(now, c int64) {
	for range c {
		m.times = append(m.times, now)
	}
}
func (m *logModel) chargeable(n int64) int64 { return min(n, max(0, 2*m.c-int64(len(m.times)))) }
func (m *logModel) refundable(_, at, n int64) int64 {
	k := int64(0)
	for _, t := range m.times {
		if t == at {
			k++
		}
	}
	return min(n, k)
}
func (m *logModel) remove(at, k int64) {
	for i := len(m.times) - 1; i >= 0 && k > 0; i-- {
		if m.times[i] == at {
			m.times = append(m.times[:i], m.times[i+1:]...)
			k--
		}
	}
}
func (m *logModel) remaining() int64         { return max(0, m.c-int64(len(m.times))) }
func (m *logModel) spent() (*big.Int, int64) { return big.NewInt(int64(len(m.times))), 1 }

func newModel(name algo.Name, p algo.Params) model {
	c := p.Capacity()
	switch name {
	case algo.TokenBucketName, algo.LeakyBucketName:
		return &bucketModel{c: c, limit: p.Limit}
	case algo.GCRAName:
		return &gcraModel{c: c, i: sec / p.Limit}
	case algo.FixedWindowName:
		return &fixedModel{c: c}
	case algo.SlidingCounterName:
		return &counterModel{c: c}
	}
	return &logModel{c: c}
}

// reservation is one admitted estimate awaiting its settle in the trace.
type reservation struct{ at, estimate, actual, spend int64 }

// TestSettleModel drives each algorithm through random traces of requests,
// reservations (a request of an estimate, settled later at its actual cost)
// and settles, with a clock that moves forwards, against its model: every
// decision's Allowed and Remaining, every charge's and refund's amount,
// agree with the model's. Beside it, a shadow model spends each settled
// reservation's actual cost at its instant, as if it had been known then:
// what the algorithm holds as spent is never less than the shadow's, less
// what the debt bound left uncharged. That is "settled spend = the sum of
// actual costs, less exactly the refunds the algorithm could not take
// back": a refund never takes back more than the actual costs allow. A
// denied request's RetryAfter is checked exact (one nanosecond earlier is
// denied, then allowed), debt included.
func TestSettleModel(t *testing.T) {
	for _, name := range algo.Names {
		t.Run(string(name), func(t *testing.T) {
			rapid.Check(t, func(t *rapid.T) { settleTrace(t, name) })
		})
	}
}

func settleTrace(t *rapid.T, name algo.Name) {
	limit := rapid.SampledFrom([]int64{1, 2, 4, 5, 8, 10}).Draw(t, "limit")
	p := algo.Params{Limit: limit, Window: time.Second}
	if name == algo.TokenBucketName || name == algo.LeakyBucketName || name == algo.GCRAName {
		if rapid.Bool().Draw(t, "burst") {
			p.Burst = limit * rapid.Int64Range(1, 3).Draw(t, "burst factor")
		}
	}
	a := algo.MustNew(name, p)
	c := p.Capacity()
	m := newModel(name, p)
	// What was spent, in order: each request's cost and each reservation's
	// estimate, or its actual cost once settled.
	type spend struct{ at, cost int64 }
	var spends []spend
	now := int64(1_700_000_000e9) + rapid.Int64Range(0, sec).Draw(t, "start")
	var state []byte
	var open []reservation
	var uncharged int64 // units the debt bound left out
	store := func(next []byte, d algo.Decision) {
		if next != nil {
			state = append([]byte(nil), next...)
		}
		if d.CorruptState {
			t.Fatalf("corrupt state %x", state)
		}
	}
	n := rapid.IntRange(1, 60).Draw(t, "ops")
	for i := range n {
		switch rapid.IntRange(0, 3).Draw(t, "clock") {
		case 0:
		case 1:
			now += rapid.Int64Range(1, 3).Draw(t, "tiny dt")
		default:
			now += rapid.Int64Range(0, 2*sec).Draw(t, "dt")
		}
		m.advance(now)
		var d algo.Decision
		switch op := rapid.IntRange(0, 2).Draw(t, "op"); {
		case op < 2 || len(open) == 0: // a request (op 1: a reservation)
			cost := rapid.Int64Range(1, c).Draw(t, "cost")
			ok, left := m.fits(cost)
			next := algo.StepInto(a, clone(state), now, cost, &d)
			if d.Allowed != ok || d.Remaining != left {
				t.Fatalf("op %d: step(%d) at %d = allowed %v remaining %d, model %v %d (record %x)", i, cost, now, d.Allowed, d.Remaining, ok, left, state)
			}
			if !ok {
				checkRetry(t, a, state, now, cost, d)
				continue
			}
			store(next, d)
			m.add(now, cost)
			if op == 1 {
				at := algo.SpentAt(a, now, &d)
				actual := rapid.Int64Range(0, 3*c).Draw(t, "actual")
				open = append(open, reservation{at, cost, actual, int64(len(spends))})
			}
			spends = append(spends, spend{now, cost})
		default: // a settle of one open reservation
			j := rapid.IntRange(0, len(open)-1).Draw(t, "which")
			r := open[j]
			open = append(open[:j], open[j+1:]...)
			spends[r.spend].cost = r.actual
			var next []byte
			var got, want int64
			what := "charge"
			if delta := r.actual - r.estimate; delta >= 0 {
				want = m.chargeable(delta)
				next, got = algo.Charge(a, clone(state), now, delta, &d)
				m.add(now, want)
				uncharged += delta - want
			} else {
				what = "refund"
				want = m.refundable(now, r.at, -delta)
				next, got = algo.Refund(a, clone(state), now, r.at, -delta, &d)
				m.remove(r.at, want)
			}
			if got != want || d.Remaining != m.remaining() || !d.Allowed {
				t.Fatalf("op %d: %s of %+v at %d = %d (remaining %d), model %d (remaining %d)", i, what, r, now, got, d.Remaining, want, m.remaining())
			}
			if got != 0 && next == nil {
				t.Fatalf("op %d: %s of %d returned record %x", i, what, got, next)
			}
			store(next, d)
		}
		// What is spent, with what the bound left out, covers the actual
		// costs.
		shadow := newModel(name, p)
		for _, sp := range spends {
			shadow.advance(sp.at)
			shadow.add(sp.at, sp.cost)
		}
		shadow.advance(now)
		s, scale := m.spent()
		sh, _ := shadow.spent()
		s.Add(s, new(big.Int).Mul(big.NewInt(uncharged), big.NewInt(scale)))
		if s.Cmp(sh) < 0 {
			t.Fatalf("op %d: spent %v (with %d uncharged) is under the actual costs' %v", i, s, uncharged, sh)
		}
	}
}

// checkRetry checks that a denial's RetryAfter is exact: the same request a
// nanosecond earlier is denied, and at it allowed.
func checkRetry(t *rapid.T, a algo.Algorithm, state []byte, now, cost int64, d algo.Decision) {
	r := int64(d.RetryAfter)
	var e algo.Decision
	if r > 1 {
		algo.StepInto(a, clone(state), now+r-1, cost, &e)
		if e.Allowed {
			t.Fatalf("step(%d) at %d denied with RetryAfter %v, allowed a nanosecond earlier", cost, now, d.RetryAfter)
		}
	}
	algo.StepInto(a, clone(state), now+r, cost, &e)
	if !e.Allowed {
		t.Fatalf("step(%d) at %d denied with RetryAfter %v, denied again then (record %x)", cost, now, d.RetryAfter, state)
	}
}

func clone(b []byte) []byte {
	if b == nil {
		return nil
	}
	return append([]byte(nil), b...)
}

// TestSettleDebt walks a token bucket and a fixed window through a charge
// past the limit on a fixed timeline.
func TestSettleDebt(t *testing.T) {
	t0 := int64(1_700_000_000e9) // a whole second
	tb := algo.MustNew(algo.TokenBucketName, algo.Params{Limit: 10, Window: time.Second})
	var d algo.Decision
	state := algo.StepInto(tb, nil, t0, 4, &d) // reserve 4
	state = clone(state)
	next, charged := algo.Charge(tb, state, t0, 100, &d) // actual 104: debt bound is 20 spent
	if charged != 16 || d.Remaining != 0 {
		t.Fatalf("Charge(100) = %d, remaining %d; want 16, 0", charged, d.Remaining)
	}
	state = clone(next)
	algo.StepInto(tb, clone(state), t0, 1, &d)
	if d.Allowed || d.RetryAfter != 1100*time.Millisecond {
		t.Fatalf("step(1) in debt = %+v, want denied for 1.1s (10 tokens of debt and 1 to spend)", d)
	}
	if algo.StepInto(tb, clone(state), t0+int64(1100*time.Millisecond), 1, &d); !d.Allowed {
		t.Fatalf("step(1) after the debt refilled = %+v, want allowed", d)
	}

	fw := algo.MustNew(algo.FixedWindowName, algo.Params{Limit: 10, Window: time.Second})
	state = clone(algo.StepInto(fw, nil, t0, 10, &d))
	next, charged = algo.Charge(fw, state, t0+1, 5, &d)
	if charged != 5 {
		t.Fatalf("fixed window Charge(5) = %d", charged)
	}
	state = clone(next)
	algo.StepInto(fw, clone(state), t0+1, 1, &d)
	if d.Allowed || d.RetryAfter != time.Second-1 {
		t.Fatalf("fixed window step in debt = %+v, want denied to the window's end", d)
	}
	// A refund into a window that has passed takes nothing back.
	if next, refunded := algo.Refund(fw, clone(state), t0+sec, t0, 10, &d); refunded != 0 || next != nil || d.Remaining != 10 {
		t.Fatalf("refund into a passed window = %d, %x, remaining %d", refunded, next, d.Remaining)
	}
	// In the window, the refund is the units, at most the count.
	if _, refunded := algo.Refund(fw, clone(state), t0+2, t0, 20, &d); refunded != 15 || d.Remaining != 10 {
		t.Fatalf("refund of 20 of a count of 15 = %d, remaining %d", refunded, d.Remaining)
	}
}

// TestSettleCorrupt feeds random bytes to Charge and Refund: no panic, a
// record that is not the algorithm's is reported corrupt or treated as
// absent, and a refund then takes nothing back.
func TestSettleCorrupt(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		name := rapid.SampledFrom(algo.Names).Draw(t, "name")
		a := algo.MustNew(name, algo.Params{Limit: 5, Window: time.Second})
		rec := rapid.SliceOfN(rapid.Byte(), 0, 40).Draw(t, "record")
		now := rapid.Int64().Draw(t, "now")
		at := rapid.Int64().Draw(t, "at")
		n := rapid.Int64().Draw(t, "n")
		var d algo.Decision
		_, charged := algo.Charge(a, clone(rec), now, n, &d)
		if charged < 0 || charged > max(n, 0) || d.Remaining < 0 || d.Remaining > 5 {
			t.Fatalf("Charge(%x, %d) = %d, %+v", rec, n, charged, d)
		}
		_, refunded := algo.Refund(a, clone(rec), now, at, n, &d)
		if refunded < 0 || refunded > max(n, 0) || d.Remaining < 0 || d.Remaining > 5 {
			t.Fatalf("Refund(%x, %d) = %d, %+v", rec, n, refunded, d)
		}
	})
}

// TestSettleAllocs checks that settling allocates nothing on the
// fixed-size records, stepping in the record's own array.
func TestSettleAllocs(t *testing.T) {
	for _, name := range algo.Names {
		if name == algo.SlidingLogName {
			continue
		}
		t.Run(string(name), func(t *testing.T) {
			a := algo.MustNew(name, algo.Params{Limit: 10, Window: time.Second})
			now := int64(1_700_000_000e9)
			var d algo.Decision
			state := clone(algo.StepInto(a, nil, now, 5, &d))
			buf := clone(state)
			allocs := testing.AllocsPerRun(100, func() {
				copy(buf, state)
				next, _ := algo.Charge(a, buf, now, 3, &d)
				if !bytes.Equal(next[:1], state[:1]) {
					panic(fmt.Sprintf("%x", next))
				}
				algo.Refund(a, next, now, now, 3, &d)
			})
			if allocs != 0 {
				t.Fatalf("Charge and Refund allocate %v times", allocs)
			}
		})
	}
}

// ExampleCharge settles two reservations on a token bucket of 10 tokens:
// one whose request cost more than its estimate, one that cost less.
func ExampleCharge() {
	a := algo.MustNew(algo.TokenBucketName, algo.Params{Limit: 10, Window: time.Minute})
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	var d algo.Decision

	state := algo.StepInto(a, nil, now, 4, &d) // reserve an estimate of 4
	state, charged := algo.Charge(a, state, now, 3, &d)
	fmt.Println("cost 7: charged", charged, "remaining", d.Remaining)

	state = algo.StepInto(a, state, now, 3, &d) // reserve 3 more
	at := algo.SpentAt(a, now, &d)
	_, refunded := algo.Refund(a, state, now, at, 2, &d)
	fmt.Println("cost 1: refunded", refunded, "remaining", d.Remaining)
	// Output:
	// cost 7: charged 3 remaining 3
	// cost 1: refunded 2 remaining 2
}
