package sluice_test

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/algo"
	"github.com/sluice-go/sluice/backend/faulty"
	"github.com/sluice-go/sluice/backend/memory"
	"github.com/sluice-go/sluice/engine"
)

func (o *observed) ObserveSlots(rule string, delta int64) { o.add("slots %s %+d", rule, delta) }

func (o *observed) ObserveLeaseExpired(rule string) { o.add("lease expired %s", rule) }

var _ sluice.SlotObserver = (*observed)(nil)

// slotRule is a concurrency rule of limit slots on prefix, held at most
// hold.
func slotRule(name, prefix string, limit int64, hold time.Duration) sluice.Rule {
	return sluice.Rule{Name: name, PathPrefix: prefix, Scope: sluice.ScopeUser, Algorithm: algo.ConcurrencyName, Limit: limit, MaxHold: hold}
}

// A concurrency rule, step by step on a frozen clock: each admitted
// request holds a slot until the door gives it back, the request past the
// limit is refused with the rule's RetryAfter and holds nothing, a release
// frees a slot at once, and a second release does nothing. The observer
// hears each decision and each slot taken and given back.
func TestDoorSlots(t *testing.T) {
	obs := &observed{}
	d := newTestDoor(t, newTestEngine(t), func(c *sluice.DoorConfig[call]) { c.Metrics = obs })
	r := slotRule("chat", "/chat", 2, time.Minute)
	r.RetryAfter = 3 * time.Second
	rs := mustRuleset(t, []sluice.Rule{r}, nil, "")
	var held []sluice.Outcome
	decide := func(step int, verdict sluice.Verdict, remaining int64, observed ...string) {
		t.Helper()
		out := d.Decide(context.Background(), rs, "POST", "/chat", call{user: "alice"})
		if out.Verdict != verdict || out.Decision.Remaining != remaining || out.Decision.Limit != 2 {
			t.Fatalf("step %d: %v remaining %d limit %d (%v), want %v remaining %d limit 2", step, out.Verdict, out.Decision.Remaining, out.Decision.Limit, out.Err, verdict, remaining)
		}
		if (out.Held != nil) != (verdict == sluice.Allowed) {
			t.Fatalf("step %d: %v, holding %v", step, out.Verdict, out.Held)
		}
		if verdict == sluice.Denied && out.Decision.RetryAfter != 3*time.Second {
			t.Errorf("step %d: RetryAfter %v, want the rule's 3s", step, out.Decision.RetryAfter)
		}
		if got := obs.take(); !slices.Equal(got, observed) {
			t.Errorf("step %d: observed %q, want %q", step, got, observed)
		}
		if out.Held != nil {
			held = append(held, out)
		}
	}
	decide(0, sluice.Allowed, 1, "slots chat +1", "decision chat allowed=true cost=1")
	decide(1, sluice.Allowed, 0, "slots chat +1", "decision chat allowed=true cost=1")
	decide(2, sluice.Denied, 0, "decision chat allowed=false cost=1")
	d.Release(context.Background(), held[0].Held)
	d.Release(context.Background(), held[0].Held) // once
	if got, want := obs.take(), []string{"slots chat -1"}; !slices.Equal(got, want) {
		t.Errorf("release: observed %q, want %q", got, want)
	}
	decide(3, sluice.Allowed, 0, "slots chat +1", "decision chat allowed=true cost=1")
	// Another caller has slots of their own.
	if out := d.Decide(context.Background(), rs, "POST", "/chat", call{user: "bob"}); out.Verdict != sluice.Allowed {
		t.Errorf("bob: %v, want allowed", out.Verdict)
	}
}

// free returns what key could spend under l now: Peek's Remaining is what
// is left after a request of one.
func free(e *engine.Engine, l engine.Limit, key string) (int64, error) {
	p, err := e.Peek(context.Background(), l, key, 1)
	if p.Allowed {
		p.Remaining++
	}
	return p.Remaining, err
}

// A slot not given back comes back by itself at the rule's MaxHold; its
// release then frees nothing and is told as an expired lease.
func TestDoorSlotExpires(t *testing.T) {
	obs := &observed{}
	clock := engine.NewFakeClock(t0)
	e, err := engine.New(memory.New(&memory.Options{SweepInterval: -1}), &engine.Options{Clock: clock, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	d := newTestDoor(t, e, func(c *sluice.DoorConfig[call]) { c.Metrics = obs })
	rs := mustRuleset(t, []sluice.Rule{slotRule("chat", "/chat", 1, 10*time.Second)}, nil, "")
	first := d.Decide(context.Background(), rs, "POST", "/chat", call{user: "alice"})
	if first.Verdict != sluice.Allowed {
		t.Fatalf("first: %v", first.Verdict)
	}
	clock.Advance(10*time.Second - 1)
	if out := d.Decide(context.Background(), rs, "POST", "/chat", call{user: "alice"}); out.Verdict != sluice.Denied {
		t.Fatalf("a nanosecond before the hold ends: %v, want denied", out.Verdict)
	}
	clock.Advance(1)
	second := d.Decide(context.Background(), rs, "POST", "/chat", call{user: "alice"})
	if second.Verdict != sluice.Allowed {
		t.Fatalf("at the hold's end: %v, want allowed", second.Verdict)
	}
	obs.take()
	d.Release(context.Background(), first.Held)
	if got, want := obs.take(), []string{"slots chat -1", "lease expired chat"}; !slices.Equal(got, want) {
		t.Errorf("late release: observed %q, want %q", got, want)
	}
	// The late release freed nothing: the second request's slot is held.
	if out := d.Decide(context.Background(), rs, "POST", "/chat", call{user: "alice"}); out.Verdict != sluice.Denied {
		t.Errorf("after the late release: %v, want denied (the second request holds the slot)", out.Verdict)
	}
}

// In all mode a concurrency rule and a rate rule decide a request
// together, all or nothing: the slot is taken first; a rate denial gives
// it back at once (the next request finds it free), and a slot refused
// leaves the rate rule undecided and unspent, its denial the one reported.
func TestDoorSlotsAllMode(t *testing.T) {
	obs := &observed{}
	e := newTestEngine(t)
	d := newTestDoor(t, e, func(c *sluice.DoorConfig[call]) { c.Metrics = obs })
	// The rate rule is listed first and is the more specific: the slot is
	// still taken first.
	rs := mustRuleset(t, []sluice.Rule{tokenRule("tpm", "/chat/x", 2), slotRule("chat", "/chat", 1, time.Minute)}, nil, sluice.MatchAll)
	a := d.Decide(context.Background(), rs, "POST", "/chat/x", call{user: "alice"})
	if a.Verdict != sluice.Allowed || a.Held == nil || len(a.Held.Leases) != 1 || a.Held.Rules[0].Name() != "chat" {
		t.Fatalf("first: %v holding %v, want allowed holding chat's slot", a.Verdict, a.Held)
	}
	if got, want := obs.take(), []string{"slots chat +1", "decision chat allowed=true cost=1", "decision tpm allowed=true cost=1"}; !slices.Equal(got, want) {
		t.Errorf("first: observed %q, want %q", got, want)
	}
	// The slot is held: refused under chat, tpm untouched.
	b := d.Decide(context.Background(), rs, "POST", "/chat/x", call{user: "alice"})
	if b.Verdict != sluice.Denied || b.Rule.Name() != "chat" || b.Held != nil || b.Decision.RetryAfter != sluice.DefaultRetryAfter {
		t.Fatalf("second: %v under %v retry %v holding %v, want denied under chat, retry %v, holding nothing", b.Verdict, b.Rule, b.Decision.RetryAfter, b.Held, sluice.DefaultRetryAfter)
	}
	if got, want := obs.take(), []string{"decision chat allowed=false cost=1"}; !slices.Equal(got, want) {
		t.Errorf("second: observed %q, want %q", got, want)
	}
	d.Release(context.Background(), a.Held)
	obs.take()
	// tpm has one left: spent now, then a third request is refused by
	// tpm and gives its slot back at once.
	c := d.Decide(context.Background(), rs, "POST", "/chat/x", call{user: "alice"})
	if c.Verdict != sluice.Allowed || c.Decision.Remaining != 0 {
		t.Fatalf("third: %v remaining %d, want allowed (tpm's last, the free slot)", c.Verdict, c.Decision.Remaining)
	}
	d.Release(context.Background(), c.Held)
	obs.take()
	den := d.Decide(context.Background(), rs, "POST", "/chat/x", call{user: "alice"})
	if den.Verdict != sluice.Denied || den.Rule.Name() != "tpm" || den.Held != nil {
		t.Fatalf("fourth: %v under %v, want denied under tpm, holding nothing", den.Verdict, den.Rule)
	}
	if got, want := obs.take(), []string{"decision tpm allowed=false cost=1"}; !slices.Equal(got, want) {
		t.Errorf("fourth: observed %q, want %q (the slot taken and given back is no decision)", got, want)
	}
	chat := rs.Rule("chat").Limit()
	if n, err := free(e, chat, "user:alice"); err != nil || n != 1 {
		t.Errorf("slots free after tpm's denial: %d (%v), want 1", n, err)
	}
}

// A store that fails takes no slot: under FailOpen the request passes
// holding nothing; under FailLocal the local engine holds the slot, and the
// door gives it back there.
func TestDoorSlotsStoreError(t *testing.T) {
	errDisk := errors.New("disk on fire")
	rs := mustRuleset(t, []sluice.Rule{slotRule("chat", "/chat", 4, time.Minute)}, nil, "")
	for _, tt := range []struct {
		policy  sluice.StoreErrorPolicy
		verdict sluice.Verdict
		held    bool
	}{
		{sluice.FailOpen, sluice.Passed, false},
		{sluice.FailClosed, sluice.Unavailable, false},
		{sluice.FailLocal, sluice.Allowed, true},
	} {
		t.Run(string(tt.policy), func(t *testing.T) {
			b, faults := faulty.Wrap(memory.New(&memory.Options{SweepInterval: -1}))
			if _, err := faults.Add(faulty.Rule{Ops: faulty.Writes, Err: errDisk}); err != nil {
				t.Fatal(err)
			}
			e, err := engine.New(b, &engine.Options{Clock: engine.NewFakeClock(t0), Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { e.Close() })
			le := newTestEngine(t)
			local, err := sluice.NewLocalFallback(le, 2)
			if err != nil {
				t.Fatal(err)
			}
			d := newTestDoor(t, e, func(c *sluice.DoorConfig[call]) { c.OnStoreError, c.Local = tt.policy, local })
			out := d.Decide(context.Background(), rs, "POST", "/chat", call{user: "alice"})
			if out.Verdict != tt.verdict || (out.Held != nil) != tt.held {
				t.Fatalf("%v holding %v, want %v holding: %v", out.Verdict, out.Held, tt.verdict, tt.held)
			}
			if !tt.held {
				return
			}
			if out.Decision.Limit != 2 {
				t.Errorf("local decision's limit %d, want the share, 2", out.Decision.Limit)
			}
			share := out.Held.Leases[0].Limit
			if n, err := free(le, share, "user:alice"); n != 1 {
				t.Errorf("local slots free while held: %d (%v), want 1", n, err)
			}
			d.Release(context.Background(), out.Held)
			if n, err := free(le, share, "user:alice"); n != 2 {
				t.Errorf("local slots free after the release: %d (%v), want 2", n, err)
			}
		})
	}
}

// A concurrency rule's configuration errors name the rule and the field.
func TestSlotRuleErrors(t *testing.T) {
	shadow := slotRule("chat", "/chat", 4, time.Minute)
	shadow.Shadow = true
	settle := slotRule("chat", "/chat", 4, time.Minute)
	settle.Settle = &sluice.Settle{ActualHeader: "X-Cost"}
	for _, tt := range []struct {
		rule  sluice.Rule
		field string
	}{{shadow, "shadow"}, {settle, "settle"}} {
		_, err := sluice.NewRuleset([]sluice.Rule{tt.rule}, nil, "")
		var re *sluice.RuleError
		if !errors.As(err, &re) || re.Rule != "chat" || re.Field != tt.field {
			t.Errorf("%s: %v, want a RuleError of rule chat, field %s", tt.field, err, tt.field)
		}
	}
}

// The invariant of slots and rates decided together (match: all), whatever
// the order of requests and releases: a key never holds more slots than
// the concurrency limit, a refused request holds no slot and spends
// nothing, and every request admitted spent its cost on the rate rule:
// the store's slots and budget are exactly the model's, the held requests
// and the admitted ones.
func TestSlotsAllOrNothing(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		slots := rapid.Int64Range(1, 5).Draw(t, "slots")
		budget := rapid.Int64Range(1, 20).Draw(t, "budget")
		e, err := engine.New(memory.New(&memory.Options{SweepInterval: -1}), &engine.Options{Clock: engine.NewFakeClock(t0), Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close()
		d, err := sluice.NewDoor(sluice.DoorConfig[call]{Engine: e, Key: callKey, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		rate := sluice.Rule{Name: "tpm", PathPrefix: "/chat", Scope: sluice.ScopeUser, Algorithm: algo.FixedWindowName, Limit: budget, Window: time.Hour}
		rules := []sluice.Rule{rate, slotRule("chat", "/chat", slots, time.Hour)}
		if rapid.Bool().Draw(t, "slot rule first") {
			rules[0], rules[1] = rules[1], rules[0]
		}
		rs, err := sluice.NewRuleset(rules, nil, sluice.MatchAll)
		if err != nil {
			t.Fatal(err)
		}
		var held []*sluice.Held
		spent := int64(0)
		for step := range rapid.IntRange(1, 60).Draw(t, "steps") {
			if len(held) > 0 && rapid.Bool().Draw(t, "release") {
				i := rapid.IntRange(0, len(held)-1).Draw(t, "which")
				d.Release(context.Background(), held[i])
				held = slices.Delete(held, i, i+1)
			} else {
				out := d.Decide(context.Background(), rs, "POST", "/chat", call{user: "alice"})
				switch out.Verdict {
				case sluice.Allowed:
					if out.Held == nil {
						t.Fatalf("step %d: allowed, holding nothing", step)
					}
					held = append(held, out.Held)
					spent++
				case sluice.Denied:
					if out.Held != nil {
						t.Fatalf("step %d: denied, holding a slot", step)
					}
					if wantSlot := int64(len(held)) == slots; (out.Rule.Name() == "chat") != wantSlot {
						t.Fatalf("step %d: denied under %s with %d of %d slots held", step, out.Rule.Name(), len(held), slots)
					}
				default:
					t.Fatalf("step %d: %v (%v)", step, out.Verdict, out.Err)
				}
			}
			if int64(len(held)) > slots {
				t.Fatalf("step %d: %d slots held, over the limit %d", step, len(held), slots)
			}
			if n, err := free(e, rs.Rule("chat").Limit(), "user:alice"); err != nil || n != slots-int64(len(held)) {
				t.Fatalf("step %d: slots free %d (%v), want %d", step, n, err, slots-int64(len(held)))
			}
			if n, err := free(e, rs.Rule("tpm").Limit(), "user:alice"); err != nil || n != budget-spent {
				t.Fatalf("step %d: budget left %d (%v), want %d", step, n, err, budget-spent)
			}
		}
	})
}

// A reload while a request holds a slot: the request gives its slot back
// under the rules it was admitted by (its lease names the old limit), into
// the record the new rules count, so the slot is free under them too.
func TestDoorSlotAcrossAReload(t *testing.T) {
	d := newTestDoor(t, newTestEngine(t), nil)
	before := mustRuleset(t, []sluice.Rule{slotRule("chat", "/chat", 1, time.Minute)}, nil, "")
	after := mustRuleset(t, []sluice.Rule{slotRule("chat", "/chat", 2, time.Minute)}, nil, "")
	old := d.Decide(context.Background(), before, "POST", "/chat", call{user: "alice"})
	if old.Verdict != sluice.Allowed || old.Held.Leases[0].Limit.Algorithm.Params().Limit != 1 {
		t.Fatalf("under the old rules: %v, want allowed holding a slot of the old limit", old.Verdict)
	}
	if out := d.Decide(context.Background(), after, "POST", "/chat", call{user: "alice"}); out.Verdict != sluice.Allowed || out.Decision.Remaining != 0 {
		t.Fatalf("under the new rules, beside the old request: %v remaining %d, want allowed, 0 left", out.Verdict, out.Decision.Remaining)
	}
	if out := d.Decide(context.Background(), after, "POST", "/chat", call{user: "alice"}); out.Verdict != sluice.Denied {
		t.Fatalf("a third: %v, want denied (the old request counts under the new limit)", out.Verdict)
	}
	d.Release(context.Background(), old.Held)
	if out := d.Decide(context.Background(), after, "POST", "/chat", call{user: "alice"}); out.Verdict != sluice.Allowed {
		t.Fatalf("once the old request has ended: %v, want allowed", out.Verdict)
	}
}
