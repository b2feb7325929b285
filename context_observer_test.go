package sluice_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
)

// outcomes is a ContextObserver that records each Outcome with the value
// its context holds under ctxKey.
type outcomes struct {
	mu   sync.Mutex // guards seen
	seen []seenOutcome
}

type seenOutcome struct {
	ctxValue any
	out      sluice.Outcome
}

type ctxKey struct{}

func (*outcomes) ObserveDecisionCost(string, bool, int64, time.Duration) {}
func (*outcomes) ObserveStoreError(string, sluice.StoreErrorPolicy)      {}

func (o *outcomes) ObserveOutcome(ctx context.Context, out sluice.Outcome) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.seen = append(o.seen, seenOutcome{ctx.Value(ctxKey{}), out})
}

var _ sluice.ContextObserver = (*outcomes)(nil)

// A ContextObserver is told every request's Outcome, as Decide returns it,
// with the context Decide was given.
func TestDoorContextObserver(t *testing.T) {
	rs, err := sluice.NewRuleset([]sluice.Rule{tokenRule("orders", "/orders", 1)}, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	e := newTestEngine(t)
	obs := &outcomes{}
	d := newTestDoor(t, e, func(c *sluice.DoorConfig[call]) { c.Metrics = obs })
	var outs []sluice.Outcome
	for i, path := range []string{"/orders", "/orders", "/status"} {
		ctx := context.WithValue(t.Context(), ctxKey{}, i)
		outs = append(outs, d.Decide(ctx, rs, "", path, call{user: "alice"}))
	}
	if len(obs.seen) != len(outs) {
		t.Fatalf("observer told %d outcomes, want %d", len(obs.seen), len(outs))
	}
	for i, s := range obs.seen {
		if s.ctxValue != i {
			t.Errorf("outcome %d: told with the context of request %v", i, s.ctxValue)
		}
		if s.out != outs[i] {
			t.Errorf("outcome %d: told %+v, Decide returned %+v", i, s.out, outs[i])
		}
	}
	if v := []sluice.Verdict{obs.seen[0].out.Verdict, obs.seen[1].out.Verdict, obs.seen[2].out.Verdict}; v[0] != sluice.Allowed || v[1] != sluice.Denied || v[2] != sluice.Unlimited {
		t.Errorf("verdicts %v, want allowed, denied, unlimited", v)
	}
}
