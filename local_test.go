package sluice_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/algo"
	"github.com/sluice-go/sluice/backend/memory"
	"github.com/sluice-go/sluice/engine"
)

func TestRuleShare(t *testing.T) {
	base := sluice.Rule{Name: "r", PathPrefix: "/", Scope: sluice.ScopeUser, Algorithm: algo.TokenBucketName, Window: time.Minute}
	for _, c := range []struct {
		n                            int
		limit, burst, cost           int64
		wantLimit, wantBurst, wantCo int64
	}{
		{1, 10, 0, 0, 10, 0, 0},
		{0, 10, 0, 0, 10, 0, 0},
		{3, 10, 0, 0, 4, 0, 0},   // ceiling
		{2, 10, 0, 0, 5, 0, 0},   // exact
		{5, 3, 0, 0, 1, 0, 0},    // at least 1
		{3, 60, 10, 0, 20, 4, 0}, // rate and capacity both divided
		{4, 10, 0, 5, 3, 0, 3},   // a cost above the share's capacity is lowered to it
		{4, 60, 8, 2, 15, 2, 2},  // a cost that fits stays
		{4, 60, 8, 5, 15, 2, 2},  // the capacity is the burst
	} {
		r := base
		r.Limit, r.Burst, r.Cost = c.limit, c.burst, c.cost
		s := r.Share(c.n)
		if s.Limit != c.wantLimit || s.Burst != c.wantBurst || s.Cost != c.wantCo || s.Window != r.Window || s.Name != r.Name {
			t.Errorf("%+v.Share(%d) = limit %d burst %d cost %d window %v name %q; want %d %d %d, the same window and name",
				r, c.n, s.Limit, s.Burst, s.Cost, s.Window, s.Name, c.wantLimit, c.wantBurst, c.wantCo)
		}
		if err := s.Validate(); err != nil {
			t.Errorf("%+v.Share(%d) does not validate: %v", r, c.n, err)
		}
	}
}

func newLocal(t *testing.T, fleet int) (*sluice.LocalFallback, *engine.FakeClock) {
	t.Helper()
	clock := engine.NewFakeClock(time.Unix(1_700_000_000, 0))
	e, err := engine.New(memory.New(nil), &engine.Options{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	l, err := sluice.NewLocalFallback(e, fleet)
	if err != nil {
		t.Fatal(err)
	}
	return l, clock
}

// Each algorithm's share, applied on the local engine, allows exactly the
// divided capacity at one instant.
func TestLocalDecidesTheShare(t *testing.T) {
	l, _ := newLocal(t, 3)
	if sluice.FleetSize(l) != 3 {
		t.Fatalf("FleetSize() = %d, want 3", sluice.FleetSize(l))
	}
	for _, name := range algo.Names {
		rs, err := sluice.NewRuleset([]sluice.Rule{{Name: string(name), PathPrefix: "/", Scope: sluice.ScopeUser, Algorithm: name, Limit: 10, Window: time.Hour}}, nil, "")
		if err != nil {
			t.Fatal(err)
		}
		c := rs.Rules()[0]
		s := sluice.LocalShare(l, c)
		if s.Name() != c.Name() || s.Rule().Limit != 4 || s.Limit().Namespace != c.Limit().Namespace {
			t.Errorf("%s: share %+v, want limit 4 under the same name and namespace", name, s.Rule())
		}
		if sluice.LocalShare(l, c) != s {
			t.Errorf("%s: the share is compiled again on a second call", name)
		}
		allowed := 0
		for range 10 {
			req := sluice.LocalRequest(l, c, "u-1", 1)
			d, err := sluice.LocalEngine(l).Apply(context.Background(), req.Limit, req.Key, req.Cost)
			if err != nil {
				t.Fatal(err)
			}
			if d.Allowed {
				allowed++
			}
			if d.Limit != 4 {
				t.Errorf("%s: decision limit %d, want the share's 4", name, d.Limit)
			}
		}
		if allowed != 4 {
			t.Errorf("%s: %d of 10 allowed locally, want ceil(10/3) = 4", name, allowed)
		}
	}
}

// A cost above the share's capacity is lowered to it; fleet size 1 keeps
// the rule itself.
func TestLocalRequest(t *testing.T) {
	rs, err := sluice.NewRuleset([]sluice.Rule{{Name: "search", PathPrefix: "/", Scope: sluice.ScopeUser, Algorithm: algo.SlidingCounterName, Limit: 10, Window: time.Minute, Cost: 5}}, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	c := rs.Rules()[0]
	l, _ := newLocal(t, 4)
	if req := sluice.LocalRequest(l, c, "k", 9); req.Cost != 3 || req.Key != "k" || req.Limit.Algorithm.Params().Limit != 3 {
		t.Errorf("Request(cost 9) under a share of 3 = %+v, want cost 3", req)
	}
	if req := sluice.LocalRequest(l, c, "k", 2); req.Cost != 2 {
		t.Errorf("Request(cost 2) = cost %d, want 2", req.Cost)
	}
	one, _ := newLocal(t, 1)
	if sluice.LocalShare(one, c) != c {
		t.Error("a fleet of one: Rule returned another rule than the rule itself")
	}
	if _, err := sluice.NewLocalFallback(nil, 1); err == nil {
		t.Error("NewLocalFallback(nil engine) = nil error")
	}
	if _, err := sluice.NewLocalFallback(sluice.LocalEngine(l), -1); err == nil {
		t.Error("NewLocalFallback(fleet -1) = nil error")
	}
}

// The cache of shares stays bounded across many reloads.
func TestLocalSharesBounded(t *testing.T) {
	l, _ := newLocal(t, 2)
	r := sluice.Rule{Name: "r", PathPrefix: "/", Scope: sluice.ScopeIP, Algorithm: algo.GCRAName, Limit: 10, Window: time.Second}
	for range 3000 {
		rs, err := sluice.NewRuleset([]sluice.Rule{r}, nil, "")
		if err != nil {
			t.Fatal(err)
		}
		if s := sluice.LocalShare(l, rs.Rules()[0]); s.Rule().Limit != 5 {
			t.Fatalf("share limit %d, want 5", s.Rule().Limit)
		}
	}
}
