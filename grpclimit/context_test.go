package grpclimit

import (
	"context"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/metadata"

	"github.com/sluice-go/sluice"
)

// callContexts is a sluice.ContextObserver that records, for each
// Outcome, the x-probe metadata of the context it was told with.
type callContexts struct {
	mu     sync.Mutex // guards probes
	probes []string
}

func (*callContexts) ObserveDecisionCost(string, bool, int64, time.Duration) {}
func (*callContexts) ObserveStoreError(string, sluice.StoreErrorPolicy)      {}

func (c *callContexts) ObserveOutcome(ctx context.Context, out sluice.Outcome) {
	md, _ := metadata.FromIncomingContext(ctx)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.probes = append(c.probes, out.Verdict.String()+" "+firstOf(md.Get("x-probe")))
}

func firstOf(vs []string) string {
	if len(vs) == 0 {
		return ""
	}
	return vs[0]
}

// The Limiter hands a sluice.ContextObserver the server call's own context,
// where a tracer finds the call's span.
func TestContextObserverGetsTheCallContext(t *testing.T) {
	obs := &callContexts{}
	rule := checkRule
	rule.Limit = 1
	s := newServer(t, []sluice.Rule{rule}, serverOpts{config: func(c *Config) { c.Metrics = obs }})
	s.check(t, "x-user-id", "alice", "x-probe", "one")
	s.check(t, "x-user-id", "alice", "x-probe", "two")
	obs.mu.Lock()
	defer obs.mu.Unlock()
	if want := []string{"allowed one", "denied two"}; len(obs.probes) != 2 || obs.probes[0] != want[0] || obs.probes[1] != want[1] {
		t.Errorf("observer told %q, want %q", obs.probes, want)
	}
}
