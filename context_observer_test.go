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

// ctxCall is a request that carries its context, as *http.Request does.
type ctxCall struct {
	ctx  context.Context
	user string
}

func (c ctxCall) Context() context.Context { return c.ctx }

// A ContextObserver is told every request's Outcome, as Decide returns it,
// with the request's context when the request type has a Context method,
// and context.Background() when it has none.
func TestDoorContextObserver(t *testing.T) {
	rs, err := sluice.NewRuleset([]sluice.Rule{tokenRule("orders", "/orders", 1)}, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	e := newTestEngine(t)
	obs := &outcomes{}
	d, err := sluice.NewDoor(sluice.DoorConfig[ctxCall]{
		Engine:  e,
		Key:     func(c ctxCall, _ *sluice.CompiledRule) (string, int64, error) { return "user:" + c.user, 0, nil },
		Metrics: obs,
	})
	if err != nil {
		t.Fatal(err)
	}
	var outs []sluice.Outcome
	for i, path := range []string{"/orders", "/orders", "/status"} {
		ctx := context.WithValue(t.Context(), ctxKey{}, i)
		outs = append(outs, d.Decide(rs, "", path, ctxCall{ctx, "alice"}))
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

	// A request type without a Context method: the observer gets
	// context.Background().
	obs2 := &outcomes{}
	d2 := newTestDoor(t, e, func(c *sluice.DoorConfig[call]) { c.Metrics = obs2 })
	d2.Decide(rs, "", "/orders", call{user: "bob"})
	if len(obs2.seen) != 1 || obs2.seen[0].ctxValue != nil || obs2.seen[0].out.Verdict != sluice.Allowed {
		t.Errorf("without a Context method: told %+v, want one allowed outcome with an empty context", obs2.seen)
	}
}
