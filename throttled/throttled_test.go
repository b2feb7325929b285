package throttled

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/algo"
	"github.com/sluice-go/sluice/backend/memory"
	"github.com/sluice-go/sluice/engine"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// fakeNow is a settable clock.
type fakeNow struct{ ns int64 }

func (f *fakeNow) now() int64              { return f.ns }
func (f *fakeNow) advance(d time.Duration) { f.ns += int64(d) }
func newFakeNow() *fakeNow                 { return &fakeNow{ns: t0.UnixNano()} }

// denied is a denial of a limit of 10 with the given Retry-After.
func denied(retry time.Duration) algo.Decision {
	return algo.Decision{Limit: 10, RetryAfter: retry}
}

// rules returns compiled rules of the given names (and a shadow one,
// "trial").
func rules(t *testing.T, names ...string) map[string]*sluice.CompiledRule {
	t.Helper()
	var rs []sluice.Rule
	for _, n := range names {
		rs = append(rs, sluice.Rule{Name: n, PathPrefix: "/" + n, Scope: sluice.ScopeUser, Algorithm: algo.TokenBucketName, Limit: 10, Window: time.Minute, Shadow: n == "trial"})
	}
	set, err := sluice.NewRuleset(rs, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*sluice.CompiledRule{}
	for _, c := range set.Rules() {
		out[c.Name()] = c
	}
	return out
}

func newTracker(t *testing.T, perRule int, clock *fakeNow) *Tracker {
	t.Helper()
	tr, err := New(&Options{PerRule: perRule, Now: clock.now})
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

// A flood of one-off keys never grows a rule's table past its bound, and
// a caller denied all along stays in it; the table's index agrees with its
// entries.
func TestTrackerBounded(t *testing.T) {
	clock := newFakeNow()
	tr := newTracker(t, 16, clock)
	r := rules(t, "orders")["orders"]
	for i := range 10_000 {
		clock.advance(time.Millisecond)
		tr.Watch(r, fmt.Sprintf("ip:10.0.%d.%d", i/256, i%256), denied(0))
		tr.Watch(r, "user:mallory", denied(time.Second))
	}
	tb := tr.rules["orders"]
	if len(tb.ents) != 16 || len(tb.idx) != 16 {
		t.Fatalf("%d entries, %d indexed, want 16", len(tb.ents), len(tb.idx))
	}
	checkIndex(t, tb)
	p, err := tr.List("orders", 1, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Callers) != 1 || p.Callers[0].Key != "user:mallory" || !p.Callers[0].DeniedNow || p.Callers[0].Denied != 10_000 || p.Total != 16 {
		t.Errorf("first of the list: %+v (total %d), want user:mallory denied now, 10000 times", p.Callers, p.Total)
	}
}

// checkIndex fails unless tb's index maps each entry's key to it.
func checkIndex(t interface{ Fatalf(string, ...any) }, tb *table) {
	if len(tb.idx) != len(tb.ents) || len(tb.ents) > tb.max {
		t.Fatalf("%d indexed, %d entries, bound %d", len(tb.idx), len(tb.ents), tb.max)
	}
	for i, e := range tb.ents {
		if tb.idx[e.key] != i {
			t.Fatalf("entry %d (%q) indexed at %d", i, e.key, tb.idx[e.key])
		}
	}
}

// Under any sequence of decisions, keys and clock steps, every table stays
// within its bound and its index agrees with its entries; each caller's
// counts are those of its decisions while it held its entry.
func TestTrackerProperty(t *testing.T) {
	rs := rules(t, "a", "b")
	rapid.Check(t, func(rt *rapid.T) {
		clock := newFakeNow()
		per := rapid.IntRange(1, 6).Draw(rt, "perRule")
		tr, err := New(&Options{PerRule: per, Now: clock.now})
		if err != nil {
			rt.Fatal(err)
		}
		for range rapid.IntRange(1, 200).Draw(rt, "steps") {
			r := rs[rapid.SampledFrom([]string{"a", "b"}).Draw(rt, "rule")]
			key := fmt.Sprintf("user:%d", rapid.IntRange(0, 12).Draw(rt, "key"))
			clock.advance(time.Duration(rapid.IntRange(0, 3000).Draw(rt, "ms")) * time.Millisecond)
			d := denied(time.Duration(rapid.IntRange(0, 2000).Draw(rt, "retry")) * time.Millisecond)
			d.Allowed = rapid.Bool().Draw(rt, "allowed")
			tr.Watch(r, key, d)
			tb := tr.rules[r.Name()]
			checkIndex(rt, tb)
			e := tb.ents[tb.idx[key]]
			if e.last != clock.ns || (!d.Allowed && e.until != clock.ns+int64(d.RetryAfter)) {
				rt.Fatalf("%s %s: last %d until %d after a decision at %d", r.Name(), key, e.last, e.until, clock.ns)
			}
		}
		p, err := tr.List("", 1000, "")
		if err != nil {
			rt.Fatal(err)
		}
		if p.Total > 2*per || len(p.Callers) != p.Total {
			rt.Fatalf("%d callers listed of %d, bound %d per rule", len(p.Callers), p.Total, per)
		}
	})
}

// A key longer than MaxKeyLen is kept cut, and marked so.
func TestTrackerHostileKey(t *testing.T) {
	tr := newTracker(t, 4, newFakeNow())
	r := rules(t, "orders")["orders"]
	long := "user:" + strings.Repeat("x", 1<<20)
	tr.Watch(r, long, denied(time.Second))
	tr.Watch(r, long, denied(time.Second))
	p, _ := tr.List("orders", 10, "")
	if len(p.Callers) != 1 || len(p.Callers[0].Key) != MaxKeyLen || !p.Callers[0].Cut || p.Callers[0].Denied != 2 {
		t.Fatalf("%d callers, the first's key %d bytes, cut %v", len(p.Callers), len(p.Callers[0].Key), p.Callers[0].Cut)
	}
}

// Pages: every caller once, in the list's order, at most n a page, the
// cursor of the last page empty; a cursor not given is refused; a
// denial stops being "now" once its Retry-After has passed.
func TestTrackerList(t *testing.T) {
	clock := newFakeNow()
	tr := newTracker(t, 100, clock)
	rs := rules(t, "orders", "search", "trial")
	for i := range 25 {
		d := denied(time.Duration(i) * time.Second)
		for range i % 4 {
			tr.Watch(rs["orders"], fmt.Sprintf("user:%02d", i), d)
		}
		tr.Watch(rs["orders"], fmt.Sprintf("user:%02d", i), d)
	}
	near := algo.Decision{Allowed: true, Limit: 10, Remaining: 1}
	tr.Watch(rs["search"], "user:near", near)
	tr.Watch(rs["trial"], "user:shadow", denied(time.Minute))

	var seen []Caller
	cursor := ""
	for pages := 0; ; pages++ {
		p, err := tr.List("orders", 10, cursor)
		if err != nil {
			t.Fatal(err)
		}
		if len(p.Callers) > 10 || p.Total != 25 {
			t.Fatalf("page %d: %d callers of %d", pages, len(p.Callers), p.Total)
		}
		seen = append(seen, p.Callers...)
		if cursor = p.Next; cursor == "" {
			break
		}
	}
	if len(seen) != 25 {
		t.Fatalf("%d callers in all pages, want 25", len(seen))
	}
	// user:00 has a zero Retry-After: not denied now; the others are, the
	// most denials first.
	if last := seen[24]; last.Key != "user:00" || last.DeniedNow {
		t.Errorf("last: %+v, want user:00, not denied now", last)
	}
	for i := 1; i < 24; i++ {
		if seen[i].Denied > seen[i-1].Denied {
			t.Errorf("%s (%d denials) after %s (%d)", seen[i].Key, seen[i].Denied, seen[i-1].Key, seen[i-1].Denied)
		}
	}
	if _, err := tr.List("orders", 10, "x"); !errors.Is(err, ErrCursor) {
		t.Errorf("cursor x: %v, want ErrCursor", err)
	}
	if p, _ := tr.List("orders", 10, "1000"); len(p.Callers) != 0 || p.Next != "" {
		t.Errorf("past the end: %+v", p)
	}
	p, _ := tr.List("", 100, "")
	if p.Total != 27 {
		t.Errorf("every rule: %d callers, want 27", p.Total)
	}
	p, _ = tr.List("search", 10, "")
	if len(p.Callers) != 1 || p.Callers[0].Near != 1 || p.Callers[0].Denied != 0 || p.Callers[0].Remaining != 1 {
		t.Errorf("search: %+v, want user:near once near its limit", p.Callers)
	}
	p, _ = tr.List("trial", 10, "")
	if len(p.Callers) != 1 || !p.Callers[0].Shadow {
		t.Errorf("trial: %+v, want a shadow rule's caller", p.Callers)
	}
	clock.advance(time.Hour)
	if p, _ := tr.List("orders", 1, ""); p.Callers[0].DeniedNow {
		t.Errorf("an hour on, %s is still denied now", p.Callers[0].Key)
	}
	tr.Keep([]string{"orders"})
	if p, _ := tr.List("", 100, ""); p.Total != 25 {
		t.Errorf("after Keep(orders): %d callers, want orders' 25", p.Total)
	}
}

// Through a Door: a denial and an allow near the limit are told, an allow
// far from it is not; with nothing to tell, an allowed decision costs no
// allocation more with a Tracker than without.
func TestTrackerThroughDoor(t *testing.T) {
	clock := engine.NewFakeClock(t0)
	e, err := engine.New(memory.New(&memory.Options{SweepInterval: -1}), &engine.Options{Clock: clock, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	tr, err := New(&Options{Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	key := func(u string, _ *sluice.CompiledRule) (string, int64, error) { return "user:" + u, 0, nil }
	door, err := sluice.NewDoor(sluice.DoorConfig[string]{Engine: e, Key: key, Watch: tr})
	if err != nil {
		t.Fatal(err)
	}
	rs, err := sluice.NewRuleset([]sluice.Rule{{Name: "orders", PathPrefix: "/", Scope: sluice.ScopeUser, Algorithm: algo.FixedWindowName, Limit: 20, Window: time.Hour}}, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i := range 21 {
		door.Decide(ctx, rs, "GET", "/", "alice")
		p, _ := tr.List("orders", 10, "")
		want := 0
		if i >= 17 { // remaining 2 (a tenth of 20) after the 18th
			want = 1
		}
		if len(p.Callers) != want {
			t.Fatalf("request %d: %d callers listed, want %d", i+1, len(p.Callers), want)
		}
	}
	p, _ := tr.List("orders", 10, "")
	if c := p.Callers[0]; c.Key != "user:alice" || c.Denied != 1 || c.Near != 3 || !c.DeniedNow {
		t.Errorf("alice: %+v, want 3 near-limit allows and 1 denial, denied now", c)
	}
	plain, err := sluice.NewDoor(sluice.DoorConfig[string]{Engine: e, Key: key})
	if err != nil {
		t.Fatal(err)
	}
	big, err := sluice.NewRuleset([]sluice.Rule{{Name: "big", PathPrefix: "/", Scope: sluice.ScopeUser, Algorithm: algo.GCRAName, Limit: 1_000_000_000, Window: time.Hour}}, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	allocs := func(d *sluice.Door[string]) float64 {
		return testing.AllocsPerRun(200, func() { d.Decide(ctx, big, "GET", "/", "bob") })
	}
	without := allocs(plain)
	with := allocs(door)
	if with != without {
		t.Errorf("an allowed decision allocates %v times with a Tracker, %v without", with, without)
	}
}

// Watch and List from many goroutines at once (run under -race): every
// table stays within its bound and consistent.
func TestTrackerConcurrent(t *testing.T) {
	tr, err := New(&Options{PerRule: 32})
	if err != nil {
		t.Fatal(err)
	}
	rs := rules(t, "a", "b")
	done := make(chan struct{})
	for g := range 4 {
		go func() {
			defer func() { done <- struct{}{} }()
			for i := range 2000 {
				r := rs[[]string{"a", "b"}[i%2]]
				tr.Watch(r, fmt.Sprintf("user:%d-%d", g, i%100), denied(time.Second))
				if i%100 == 0 {
					if _, err := tr.List("", 10, ""); err != nil {
						t.Error(err)
					}
				}
			}
		}()
	}
	for range 4 {
		<-done
	}
	for _, tb := range tr.rules {
		checkIndex(t, tb)
	}
}
