package sluice_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/algo"
	"github.com/sluice-go/sluice/backend/backendtest"
	"github.com/sluice-go/sluice/backend/faulty"
	"github.com/sluice-go/sluice/backend/memory"
	"github.com/sluice-go/sluice/engine"
)

// call is the request of the tests' door: who calls, on what plan, to what
// host.
type call struct{ user, plan, host string }

// errNoUser is the tests' door's identity error.
var errNoUser = errors.New("no user")

// callKey is the tests' door's Key: "user:" and the caller, whatever the
// rule's scope; a caller named "panic" panics.
func callKey(c call, _ *sluice.CompiledRule) (string, int64, error) {
	switch c.user {
	case "":
		return "", 0, errNoUser
	case "panic":
		panic("key function fell over")
	}
	return "user:" + c.user, 0, nil
}

// newTestEngine returns an engine over the memory store on a fake clock
// standing at t0.
func newTestEngine(t testing.TB) *engine.Engine {
	t.Helper()
	e, err := engine.New(memory.New(&memory.Options{SweepInterval: -1}), &engine.Options{Clock: engine.NewFakeClock(t0), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// newTestDoor returns a Door of the tests' door over e, configured further
// by edit.
func newTestDoor(t *testing.T, e *engine.Engine, edit func(*sluice.DoorConfig[call])) *sluice.Door[call] {
	t.Helper()
	cfg := sluice.DoorConfig[call]{
		Name:   "testdoor",
		Engine: e,
		Key:    callKey,
		Plan:   func(c call) (string, error) { return c.plan, nil },
		Host:   func(c call) string { return c.host },
		Logger: slog.New(slog.DiscardHandler),
	}
	if edit != nil {
		edit(&cfg)
	}
	d, err := sluice.NewDoor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// observed records what a Door tells its Observer, one line per call.
type observed struct {
	mu    sync.Mutex // guards lines
	lines []string
}

func (o *observed) add(format string, args ...any) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.lines = append(o.lines, fmt.Sprintf(format, args...))
}

func (o *observed) take() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	l := o.lines
	o.lines = nil
	return l
}

func (o *observed) ObserveDecisionCost(rule string, allowed bool, cost int64, _ time.Duration) {
	o.add("decision %s allowed=%v cost=%d", rule, allowed, cost)
}

func (o *observed) ObserveStoreError(rule string, p sluice.StoreErrorPolicy) {
	o.add("store error %s %s", rule, p)
}

func (o *observed) ObserveLocalDecision(rule string, allowed bool) {
	o.add("local %s allowed=%v", rule, allowed)
}

func (o *observed) ObserveShadowDenial(rule string, cost int64, _ time.Duration) {
	o.add("shadow denial %s cost=%d", rule, cost)
}

var (
	_ sluice.LocalObserver  = (*observed)(nil)
	_ sluice.ShadowObserver = (*observed)(nil)
)

// tokenRule is a token bucket rule of limit per minute on prefix.
func tokenRule(name, prefix string, limit int64) sluice.Rule {
	return sluice.Rule{Name: name, PathPrefix: prefix, Scope: sluice.ScopeUser, Algorithm: algo.TokenBucketName, Limit: limit, Window: time.Minute}
}

// One rule, step by step on a frozen clock: the caller's budget is spent,
// then denied with the exact wait, another caller has one of their own, a
// request no rule covers is Unlimited, and the observer is told each
// decision.
func TestDoorDecides(t *testing.T) {
	obs := &observed{}
	d := newTestDoor(t, newTestEngine(t), func(c *sluice.DoorConfig[call]) { c.Metrics = obs })
	rs := mustRuleset(t, []sluice.Rule{tokenRule("orders", "/orders", 2)}, nil, "")
	for i, step := range []struct {
		user, path string
		verdict    sluice.Verdict
		remaining  int64
		retry      time.Duration
		observed   string
	}{
		{"alice", "/orders", sluice.Allowed, 1, 0, "decision orders allowed=true cost=1"},
		{"alice", "/orders/1", sluice.Allowed, 0, 0, "decision orders allowed=true cost=1"},
		{"alice", "/orders", sluice.Denied, 0, 30 * time.Second, "decision orders allowed=false cost=1"},
		{"bob", "/orders", sluice.Allowed, 1, 0, "decision orders allowed=true cost=1"},
		{"alice", "/other", sluice.Unlimited, 0, 0, ""},
	} {
		out := d.Decide(context.Background(), rs, "GET", step.path, call{user: step.user})
		if out.Verdict != step.verdict || out.Err != nil {
			t.Fatalf("step %d: Decide(%s %s) = %v (%v), want %v", i, step.user, step.path, out.Verdict, out.Err, step.verdict)
		}
		if step.verdict == sluice.Unlimited {
			if out.Rule != nil || out.Key != "" {
				t.Errorf("step %d: unlimited, yet rule %v key %q", i, out.Rule, out.Key)
			}
		} else if out.Rule.Name() != "orders" || out.Key != "user:"+step.user || out.Decision.Remaining != step.remaining || out.Decision.RetryAfter != step.retry {
			t.Errorf("step %d: rule %s key %q remaining %d retry %v, want orders user:%s %d %v",
				i, out.Rule.Name(), out.Key, out.Decision.Remaining, out.Decision.RetryAfter, step.user, step.remaining, step.retry)
		}
		if got := strings.Join(obs.take(), "; "); got != step.observed {
			t.Errorf("step %d: observed %q, want %q", i, got, step.observed)
		}
	}
}

// In all mode a request spends on every rule or on none: a denial reports
// the denying rule, spends nothing under the other and counts only the
// denial; an allowed request reports the rule with the least remaining and
// waits the longest delay. Tally hears every rule's part, as configured.
func TestDoorAllMode(t *testing.T) {
	obs := &observed{}
	var tally []string
	d := newTestDoor(t, newTestEngine(t), func(c *sluice.DoorConfig[call]) {
		c.Metrics = obs
		c.Tally = func(rule *sluice.CompiledRule, key string, cost int64, allowed bool) {
			tally = append(tally, fmt.Sprintf("%s %s %d %v", rule.Name(), key, cost, allowed))
		}
	})
	shaped := sluice.Rule{Name: "shaped", PathPrefix: "/", Scope: sluice.ScopeUser, Algorithm: algo.LeakyBucketName, Limit: 60, Window: time.Minute, Burst: 10}
	rs := mustRuleset(t, []sluice.Rule{tokenRule("orders", "/orders", 1), shaped}, nil, sluice.MatchAll)
	out := d.Decide(context.Background(), rs, "GET", "/orders", call{user: "alice"})
	if out.Verdict != sluice.Allowed || out.Rule.Name() != "orders" || out.Decision.Remaining != 0 || out.Delay != 0 {
		t.Fatalf("first: %v under %s, remaining %d, delay %v; want allowed under orders (least remaining), no delay", out.Verdict, out.Rule.Name(), out.Decision.Remaining, out.Delay)
	}
	obs.take()
	tally = nil
	out = d.Decide(context.Background(), rs, "GET", "/orders", call{user: "alice"})
	if out.Verdict != sluice.Denied || out.Rule.Name() != "orders" || out.Decision.Allowed {
		t.Fatalf("second: %v under %v, want denied under orders", out.Verdict, out.Rule.Name())
	}
	if got, want := obs.take(), []string{"decision orders allowed=false cost=1"}; !slices.Equal(got, want) {
		t.Errorf("observed %q, want %q", got, want)
	}
	if got, want := tally, []string{"orders user:alice 1 false", "shaped user:alice 1 true"}; !slices.Equal(got, want) {
		t.Errorf("tally %q, want %q", got, want)
	}
	// shaped spent nothing on the denial: its second request waits one
	// drip, not two.
	out = d.Decide(context.Background(), rs, "GET", "/x", call{user: "alice"})
	if out.Verdict != sluice.Allowed || out.Rule.Name() != "shaped" || out.Delay != time.Second {
		t.Errorf("shaped alone: %v under %s, delay %v; want allowed, delay 1s", out.Verdict, out.Rule.Name(), out.Delay)
	}
}

// A caller exempt under every enforced rule passes undecided, by the
// shadow rules too; exempt under one of two rules, it is decided by the
// other alone.
func TestDoorExempt(t *testing.T) {
	obs := &observed{}
	d := newTestDoor(t, newTestEngine(t), func(c *sluice.DoorConfig[call]) {
		c.Metrics = obs
		c.Exempt = func(key string) bool { return key == "user:ops" }
	})
	trial := tokenRule("trial", "/", 1)
	trial.Shadow = true
	rs := mustRuleset(t, []sluice.Rule{tokenRule("orders", "/orders", 1), trial}, nil, "")
	if out := d.Decide(context.Background(), rs, "GET", "/orders", call{user: "ops"}); out.Verdict != sluice.Passed || out.Rule != nil || out.Shadow != nil {
		t.Errorf("exempt caller: %v, rule %v, shadow %v; want passed, decided by nothing", out.Verdict, out.Rule, out.Shadow)
	}
	if got := obs.take(); len(got) != 0 {
		t.Errorf("observed %q for an exempt caller", got)
	}

	exemptOne := func(c *sluice.DoorConfig[call]) {
		c.Exempt = func(key string) bool { return key == "user:ops" }
		c.Key = func(c call, r *sluice.CompiledRule) (string, int64, error) {
			if r.Name() == "everyone" {
				return "global", 0, nil
			}
			return callKey(c, r)
		}
	}
	every := tokenRule("everyone", "/", 5)
	every.Scope = sluice.ScopeGlobal
	all := mustRuleset(t, []sluice.Rule{tokenRule("orders", "/orders", 1), every}, nil, sluice.MatchAll)
	d = newTestDoor(t, newTestEngine(t), exemptOne)
	if out := d.Decide(context.Background(), all, "GET", "/orders", call{user: "ops"}); out.Verdict != sluice.Allowed || out.Rule.Name() != "everyone" || out.Decision.Remaining != 4 {
		t.Errorf("exempt under one rule: %v under %v, want allowed under everyone with 4 left", out.Verdict, out.Rule)
	}
}

// Errors of the door's functions refuse the request, naming the rule (or
// none, for the plan), a panic contained as a *PanicError; under a shadow
// rule they keep the shadow rules from deciding, and the request goes on.
func TestDoorKeyErrors(t *testing.T) {
	trial := tokenRule("trial", "/", 1)
	trial.Shadow = true
	rs := mustRuleset(t, []sluice.Rule{tokenRule("orders", "/orders", 5), trial, planRule("gold", "*", "/gold", "gold")}, nil, "")
	d := newTestDoor(t, newTestEngine(t), func(c *sluice.DoorConfig[call]) {
		c.Plan = func(c call) (string, error) {
			if c.plan == "panic" {
				panic("plan function fell over")
			}
			if c.plan == "bad" {
				return "", errNoUser
			}
			return c.plan, nil
		}
	})
	for _, tt := range []struct {
		name     string
		c        call
		path     string
		rule     string // "" for the plan
		panicked bool
	}{
		{"no user", call{}, "/orders", "orders", false},
		{"panicking key", call{user: "panic"}, "/orders", "orders", true},
		{"bad plan", call{user: "alice", plan: "bad"}, "/orders", "", false},
		{"panicking plan", call{user: "alice", plan: "panic"}, "/orders", "", true},
	} {
		out := d.Decide(context.Background(), rs, "GET", tt.path, tt.c)
		var ke *sluice.KeyError
		if out.Verdict != sluice.Unidentified || !errors.As(out.Err, &ke) {
			t.Errorf("%s: %v, %v; want unidentified with a *KeyError", tt.name, out.Verdict, out.Err)
			continue
		}
		if got := ke.Rule; tt.rule == "" && got != nil || tt.rule != "" && (got == nil || got.Name() != tt.rule) {
			t.Errorf("%s: KeyError.Rule = %v, want %q", tt.name, got, tt.rule)
		}
		var pe *sluice.PanicError
		if errors.As(out.Err, &pe) != tt.panicked || !tt.panicked && !errors.Is(out.Err, errNoUser) {
			t.Errorf("%s: error %v, want panicked %v", tt.name, out.Err, tt.panicked)
		}
		if out.Shadow != nil || out.ShadowErr != nil {
			t.Errorf("%s: the shadow rules decided a refused request", tt.name)
		}
	}
	// No enforced rule covers /x: the shadow rule's key error is reported,
	// the request passes.
	out := d.Decide(context.Background(), rs, "GET", "/x", call{})
	if out.Verdict != sluice.Unlimited || out.ShadowErr == nil || out.ShadowErr.Rule.Name() != "trial" || !errors.Is(out.ShadowErr, errNoUser) || out.Shadow != nil {
		t.Errorf("shadow key error: %v, ShadowErr %v, shadow %v; want unlimited, the trial rule's error", out.Verdict, out.ShadowErr, out.Shadow)
	}
}

// Shadow rules decide a request that passes, never refuse it: a would-be
// denial is a ShadowDenial, the decision reported is made to allow; a
// request the enforced rules deny is not decided by them.
func TestDoorShadow(t *testing.T) {
	obs := &observed{}
	d := newTestDoor(t, newTestEngine(t), func(c *sluice.DoorConfig[call]) { c.Metrics = obs })
	trial := tokenRule("trial", "/", 1)
	trial.Shadow = true
	rs := mustRuleset(t, []sluice.Rule{tokenRule("orders", "/orders", 2), trial}, nil, "")
	for i, step := range []struct {
		path           string
		verdict        sluice.Verdict
		shadow, denied bool
		observed       []string
	}{
		{"/x", sluice.Unlimited, true, false, []string{"decision trial allowed=true cost=1"}},
		{"/orders", sluice.Allowed, true, true, []string{"decision orders allowed=true cost=1", "shadow denial trial cost=1"}},
		{"/orders", sluice.Allowed, true, true, []string{"decision orders allowed=true cost=1", "shadow denial trial cost=1"}},
		{"/orders", sluice.Denied, false, false, []string{"decision orders allowed=false cost=1"}},
	} {
		out := d.Decide(context.Background(), rs, "GET", step.path, call{user: "alice"})
		if out.Verdict != step.verdict || (out.Shadow != nil) != step.shadow || out.ShadowDenied != step.denied {
			t.Errorf("step %d: %v, shadow %v, denied %v; want %v, %v, %v", i, out.Verdict, out.Shadow, out.ShadowDenied, step.verdict, step.shadow, step.denied)
		}
		if sd := out.ShadowDecision; out.Shadow != nil && (!sd.Allowed || sd.RetryAfter != 0 || sd.Delay != 0) {
			t.Errorf("step %d: shadow decision %+v, want it made to allow", i, sd)
		}
		if got := obs.take(); !slices.Equal(got, step.observed) {
			t.Errorf("step %d: observed %q, want %q", i, got, step.observed)
		}
	}
}

// The host and the plan are asked for only when a rule names one, and the
// host is matched as RequestHost gives it.
func TestDoorHostAndPlan(t *testing.T) {
	var hosts, plans int
	d := newTestDoor(t, newTestEngine(t), func(c *sluice.DoorConfig[call]) {
		c.Host = func(c call) string { hosts++; return c.host }
		c.Plan = func(c call) (string, error) { plans++; return c.plan, nil }
	})
	plain := mustRuleset(t, []sluice.Rule{tokenRule("orders", "/orders", 5)}, nil, "")
	d.Decide(context.Background(), plain, "GET", "/orders", call{user: "alice", host: "api.example.com"})
	if hosts != 0 || plans != 0 {
		t.Errorf("asked for the host %d times and the plan %d times under rules naming neither", hosts, plans)
	}
	api := tokenRule("api", "/", 5)
	api.Host = "api.example.com"
	gold := tokenRule("gold", "/", 5)
	gold.Plan = "gold"
	rs := mustRuleset(t, []sluice.Rule{api, gold}, nil, "")
	for _, tt := range []struct {
		c    call
		want string
	}{
		{call{user: "alice", host: "API.example.com:8443"}, "api"},
		{call{user: "alice", host: "other.example.com", plan: "gold"}, "gold"},
		{call{user: "alice", host: "other.example.com"}, ""},
	} {
		out := d.Decide(context.Background(), rs, "GET", "/orders", tt.c)
		got := ""
		if out.Rule != nil {
			got = out.Rule.Name()
		}
		if got != tt.want {
			t.Errorf("%+v: decided under %q, want %q", tt.c, got, tt.want)
		}
	}
	if hosts != 3 || plans != 3 {
		t.Errorf("asked for the host %d times and the plan %d, want once a request each", hosts, plans)
	}
}

// A store error follows the policy: FailOpen passes the request undecided
// (the shadow rules still try), FailClosed refuses it, FailLocal decides it
// on the Local under the rule's share; each is counted under the policy
// that applied, and a shadow rule's under FailOpen but for FailLocal.
func TestDoorStoreErrorPolicies(t *testing.T) {
	errDisk := errors.New("disk on fire")
	trial := tokenRule("trial", "/", 10)
	trial.Shadow = true
	rs := mustRuleset(t, []sluice.Rule{tokenRule("orders", "/orders", 10), trial}, nil, "")
	for _, tt := range []struct {
		policy   sluice.StoreErrorPolicy
		verdict  sluice.Verdict
		limit    int64 // of the decision reported
		observed []string
	}{
		{sluice.FailOpen, sluice.Passed, 0, []string{"store error orders open", "store error trial open"}},
		{sluice.FailClosed, sluice.Unavailable, 0, []string{"store error orders closed"}},
		{sluice.FailLocal, sluice.Allowed, 5, []string{
			"store error orders local", "decision orders allowed=true cost=1", "local orders allowed=true",
			"store error trial local", "decision trial allowed=true cost=1", "local trial allowed=true",
		}},
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
			local, err := sluice.NewLocalFallback(newTestEngine(t), 2)
			if err != nil {
				t.Fatal(err)
			}
			obs := &observed{}
			d := newTestDoor(t, e, func(c *sluice.DoorConfig[call]) {
				c.Metrics, c.OnStoreError, c.Local = obs, tt.policy, local
			})
			out := d.Decide(context.Background(), rs, "GET", "/orders", call{user: "alice"})
			if out.Verdict != tt.verdict || out.Decision.Limit != tt.limit {
				t.Errorf("%v (limit %d, err %v), want %v (limit %d)", out.Verdict, out.Decision.Limit, out.Err, tt.verdict, tt.limit)
			}
			if tt.verdict == sluice.Unavailable && (!errors.Is(out.Err, errDisk) || out.Rule.Name() != "orders") {
				t.Errorf("unavailable: rule %v, err %v; want orders, the store's error", out.Rule, out.Err)
			}
			if got := obs.take(); !slices.Equal(got, tt.observed) {
				t.Errorf("observed %q, want %q", got, tt.observed)
			}
		})
	}
}

// A request whose context ended before the engine decided it, over a store
// that reads the context (a compare-and-swap store here), is Unavailable
// under every policy, its Err wrapping the context's error: nothing was
// spent, no store error is counted, nothing is decided locally, and the
// shadow rules do not decide it either. Over the memory store the context
// is never read: the request is decided.
func TestDoorContextEnded(t *testing.T) {
	trial := tokenRule("trial", "/", 10)
	trial.Shadow = true
	rs := mustRuleset(t, []sluice.Rule{tokenRule("orders", "/orders", 10), trial}, nil, "")
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	for _, policy := range sluice.StoreErrorPolicies {
		t.Run(string(policy), func(t *testing.T) {
			clock := engine.NewFakeClock(t0)
			e, err := engine.New(backendtest.NewSwapStore(&backendtest.SwapOptions{Now: clock.Now}),
				&engine.Options{Clock: clock, Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { e.Close() })
			local, err := sluice.NewLocalFallback(newTestEngine(t), 2)
			if err != nil {
				t.Fatal(err)
			}
			obs := &observed{}
			d := newTestDoor(t, e, func(c *sluice.DoorConfig[call]) {
				c.Metrics, c.OnStoreError, c.Local = obs, policy, local
			})
			out := d.Decide(ctx, rs, "GET", "/orders", call{user: "alice"})
			if out.Verdict != sluice.Unavailable || !errors.Is(out.Err, context.Canceled) || out.Rule.Name() != "orders" {
				t.Errorf("%v under %v: %v; want unavailable under orders, context canceled", out.Verdict, out.Rule, out.Err)
			}
			if out.Shadow != nil {
				t.Errorf("shadow rule %v decided a request whose context ended", out.Shadow)
			}
			if got := obs.take(); len(got) != 0 {
				t.Errorf("observed %q, want nothing", got)
			}
			for _, l := range []engine.Limit{rs.Rule("orders").Limit(), rs.Rule("trial").Limit()} {
				if dd, err := e.Peek(t.Context(), l, "user:alice", 1); err != nil || dd.Remaining != 9 {
					t.Errorf("%s after: Peek = %+v, %v; want nothing spent", l.Namespace, dd, err)
				}
			}
		})
	}
	d := newTestDoor(t, newTestEngine(t), nil)
	if out := d.Decide(ctx, rs, "GET", "/orders", call{user: "alice"}); out.Verdict != sluice.Allowed {
		t.Errorf("over the memory store: %v (%v), want allowed: it never reads the context", out.Verdict, out.Err)
	}
}

// An engine error of another kind (a cost above the rule's capacity) is
// Failed, naming the rule.
func TestDoorEngineError(t *testing.T) {
	d := newTestDoor(t, newTestEngine(t), func(c *sluice.DoorConfig[call]) {
		c.Key = func(c call, _ *sluice.CompiledRule) (string, int64, error) { return "user:" + c.user, 99, nil }
	})
	rs := mustRuleset(t, []sluice.Rule{tokenRule("orders", "/orders", 10)}, nil, "")
	if out := d.Decide(context.Background(), rs, "GET", "/orders", call{user: "alice"}); out.Verdict != sluice.Failed || !errors.Is(out.Err, algo.ErrCostExceedsCapacity) || out.Rule.Name() != "orders" {
		t.Errorf("%v under %v: %v; want failed under orders, cost exceeds capacity", out.Verdict, out.Rule, out.Err)
	}
}

func TestNewDoorErrors(t *testing.T) {
	e := newTestEngine(t)
	for _, tt := range []struct {
		cfg  sluice.DoorConfig[call]
		want string
	}{
		{sluice.DoorConfig[call]{Name: "d", Key: callKey}, "d: Config.Engine is required"},
		{sluice.DoorConfig[call]{Name: "d", Engine: e}, "d: DoorConfig.Key is required"},
		{sluice.DoorConfig[call]{Name: "d", Engine: e, Key: callKey, OnStoreError: "maybe"}, `d: Config.OnStoreError must be "open", "closed" or "local", got "maybe"`},
		{sluice.DoorConfig[call]{Name: "d", Engine: e, Key: callKey, OnStoreError: sluice.FailLocal}, `d: Config.Local is required with OnStoreError "local"`},
	} {
		if _, err := sluice.NewDoor(tt.cfg); err == nil || err.Error() != tt.want {
			t.Errorf("NewDoor(%+v) = %v, want %s", tt.cfg, err, tt.want)
		}
	}
}

// In all mode the answer reports, among denials, the rule with the longest
// RetryAfter, wherever it stands in the match order; among allowed
// decisions, the rule with the least Remaining.
func TestDoorAllModePick(t *testing.T) {
	d := newTestDoor(t, newTestEngine(t), nil)
	hourly := sluice.Rule{Name: "hourly", PathPrefix: "/", Scope: sluice.ScopeUser, Algorithm: algo.TokenBucketName, Limit: 2, Window: time.Hour}
	rs := mustRuleset(t, []sluice.Rule{tokenRule("orders", "/orders", 10), hourly}, nil, sluice.MatchAll)
	steps := []struct {
		verdict    sluice.Verdict
		rule       string
		remaining  int64
		retryAfter time.Duration
	}{
		{sluice.Allowed, "hourly", 1, 0},               // orders has 9 left, hourly 1
		{sluice.Allowed, "hourly", 0, 0},               // orders 8, hourly 0
		{sluice.Denied, "hourly", 0, 30 * time.Minute}, // only hourly denies
	}
	for i, step := range steps {
		out := d.Decide(context.Background(), rs, "GET", "/orders", call{user: "alice"})
		if out.Verdict != step.verdict || out.Rule.Name() != step.rule || out.Decision.Remaining != step.remaining || out.Decision.RetryAfter != step.retryAfter {
			t.Errorf("step %d: %v under %s, remaining %d, retry after %v; want %v under %s, remaining %d, retry after %v",
				i, out.Verdict, out.Rule.Name(), out.Decision.Remaining, out.Decision.RetryAfter, step.verdict, step.rule, step.remaining, step.retryAfter)
		}
	}
	// Both deny: orders (1 a minute) waits a minute, hourly half an hour.
	rs = mustRuleset(t, []sluice.Rule{tokenRule("orders", "/orders", 1), hourly}, nil, sluice.MatchAll)
	d = newTestDoor(t, newTestEngine(t), nil)
	d.Decide(context.Background(), rs, "GET", "/orders", call{user: "bob"})
	d.Decide(context.Background(), rs, "GET", "/x", call{user: "bob"}) // hourly alone: spent
	out := d.Decide(context.Background(), rs, "GET", "/orders", call{user: "bob"})
	if out.Verdict != sluice.Denied || out.Rule.Name() != "hourly" || out.Decision.RetryAfter != 30*time.Minute {
		t.Errorf("both deny: %v under %s, retry after %v; want denied under hourly, retry after 30m", out.Verdict, out.Rule.Name(), out.Decision.RetryAfter)
	}
}
