package grpclimit

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/identity"
)

// planRules are a plan-less Check rule of 2 a minute per user and the
// premium plan's of 4.
func planRules() []sluice.Rule {
	free := checkRule
	free.Limit = 2
	premium := checkRule
	premium.Name, premium.Plan, premium.Limit = "check-premium", "premium", 4
	return []sluice.Rule{free, premium}
}

// loopbackProxy trusts the test client, which calls from 127.0.0.1, as a
// proxy, and names the plan header.
var loopbackProxy = identity.Config{
	TrustedProxies: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")},
	PlanHeader:     "X-Sluice-Plan",
}

// allowed makes Check calls as the metadata kv says until one is denied,
// and returns how many passed (at most max).
func (s *server) allowed(t *testing.T, max int, kv ...string) int {
	t.Helper()
	for i := range max {
		if _, err := s.check(t, kv...); status.Code(err) == codes.ResourceExhausted {
			return i
		} else if err != nil {
			t.Fatalf("call %d: %v", i+1, err)
		}
	}
	return max
}

// TestPlanFromTrustedMetadata: the plan metadata (the plan header's name
// in lower case) of a trusted proxy puts its caller on the plan's rule;
// a caller on no plan, or on a plan no rule names, gets the plan-less one.
func TestPlanFromTrustedMetadata(t *testing.T) {
	s := newServer(t, planRules(), serverOpts{idCfg: loopbackProxy})
	md, err := s.check(t, "x-user-id", "alice", "x-sluice-plan", "premium")
	if err != nil || get(t, md, MetadataLimit) != "4" || get(t, md, MetadataPolicy) != `"check-premium";q=4;w=60` {
		t.Fatalf("premium call: %v, limit %q policy %q; want allowed under check-premium (4)", err, get(t, md, MetadataLimit), get(t, md, MetadataPolicy))
	}
	if n := s.allowed(t, 10, "x-user-id", "alice", "x-sluice-plan", "premium"); n != 3 {
		t.Errorf("premium caller: %d more calls allowed, want 3", n)
	}
	if n := s.allowed(t, 10, "x-user-id", "bob"); n != 2 {
		t.Errorf("caller on no plan: %d calls allowed, want 2", n)
	}
	if n := s.allowed(t, 10, "x-user-id", "carol", "x-sluice-plan", "gold"); n != 2 {
		t.Errorf("caller on a plan no rule names: %d calls allowed, want 2", n)
	}
	if _, err := s.check(t, "x-user-id", "dave", "x-sluice-plan", "no plan!"); status.Code(err) != codes.InvalidArgument {
		t.Errorf("bad plan: %v, want InvalidArgument", err)
	}
	if _, err := s.check(t, "x-user-id", "dave", "x-sluice-plan", "premium", "x-sluice-plan", "free"); status.Code(err) != codes.InvalidArgument {
		t.Errorf("plan sent twice: %v, want InvalidArgument", err)
	}
}

// TestPlanMetadataFromUntrustedPeerIgnored: a peer that is no trusted
// proxy cannot choose its plan.
func TestPlanMetadataFromUntrustedPeerIgnored(t *testing.T) {
	s := newServer(t, planRules(), serverOpts{idCfg: identity.Config{PlanHeader: "X-Sluice-Plan"}})
	if n := s.allowed(t, 10, "x-user-id", "alice", "x-sluice-plan", "premium"); n != 2 {
		t.Errorf("untrusted premium claim: %d calls allowed, want the plan-less 2", n)
	}
}

// TestPlanFromIdentityFunc: the IdentityFunc's Caller.Plan chooses the
// plan, over any metadata; an invalid one ends the call InvalidArgument.
func TestPlanFromIdentityFunc(t *testing.T) {
	s := newServer(t, planRules(), serverOpts{idCfg: loopbackProxy, config: func(c *Config) {
		c.Identity = func(ctx context.Context, _ string) (identity.Caller, error) {
			who := incoming{ctx}.Values("X-User-Id")
			switch who[0] {
			case "paying":
				return identity.Caller{UserID: "paying", Plan: "premium"}, nil
			case "bad":
				return identity.Caller{UserID: "bad", Plan: "not a plan"}, nil
			}
			return identity.Caller{UserID: who[0]}, nil
		}
	}})
	if n := s.allowed(t, 10, "x-user-id", "paying"); n != 4 {
		t.Errorf("premium caller by the IdentityFunc: %d calls allowed, want 4", n)
	}
	if n := s.allowed(t, 10, "x-user-id", "free"); n != 2 {
		t.Errorf("caller the IdentityFunc puts on no plan: %d calls allowed, want 2", n)
	}
	if _, err := s.check(t, "x-user-id", "bad"); status.Code(err) != codes.InvalidArgument {
		t.Errorf("IdentityFunc's invalid plan: %v, want InvalidArgument", err)
	}
}

// TestOverrideAcrossReload: a caller's override gives it its own limit
// under a rule, others keep the rule's; a reload changing the override
// keeps what the caller has spent.
func TestOverrideAcrossReload(t *testing.T) {
	rules := []sluice.Rule{checkRule} // 5 a minute per user
	s := newServer(t, rules, serverOpts{})
	withOverride := func(limit int64) {
		t.Helper()
		rs, err := sluice.NewRuleset(rules, nil, "")
		if err != nil {
			t.Fatal(err)
		}
		if rs, err = rs.WithOverrides([]sluice.Override{{Rule: "check", Key: "user:partner", Limit: limit}}); err != nil {
			t.Fatal(err)
		}
		s.reg.Swap(rs)
	}
	withOverride(8)
	md, err := s.check(t, "x-user-id", "partner")
	if err != nil || get(t, md, MetadataLimit) != "8" {
		t.Fatalf("partner: %v, limit %q; want allowed under its override of 8", err, get(t, md, MetadataLimit))
	}
	if n := s.allowed(t, 3, "x-user-id", "partner"); n != 3 {
		t.Fatalf("partner: %d more calls allowed, want 3", n)
	}
	if n := s.allowed(t, 10, "x-user-id", "other"); n != 5 {
		t.Errorf("caller without an override: %d calls allowed, want the rule's 5", n)
	}
	// The partner has spent 4 of 8. Held to 6 it has 2 left, not 6.
	withOverride(6)
	if n := s.allowed(t, 10, "x-user-id", "partner"); n != 2 {
		t.Errorf("after the reload to 6: %d calls allowed, want the 2 left of what was spent", n)
	}
	s.clock.Advance(time.Minute)
	if n := s.allowed(t, 10, "x-user-id", "partner"); n != 6 {
		t.Errorf("a minute later: %d calls allowed, want the override's 6", n)
	}
}
