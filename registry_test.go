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
	"github.com/sluice-go/sluice/backend/memory"
	"github.com/sluice-go/sluice/engine"
)

var t0 = time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)

func rule(name, method, prefix string) sluice.Rule {
	return sluice.Rule{Name: name, Method: method, PathPrefix: prefix, Scope: sluice.ScopeUser,
		Algorithm: algo.SlidingCounterName, Limit: 10, Window: time.Minute}
}

func names(rs []*sluice.CompiledRule) []string {
	out := []string{}
	for _, r := range rs {
		out = append(out, r.Name())
	}
	return out
}

func mustRuleset(t *testing.T, rules []sluice.Rule, def *sluice.Rule, mode sluice.MatchMode) *sluice.Ruleset {
	t.Helper()
	rs, err := sluice.NewRuleset(rules, def, mode)
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

var gatewayRules = []sluice.Rule{
	rule("api", "*", "/api"),
	rule("orders-any", "*", "/api/orders"),
	rule("orders-write", "POST", "/api/orders"),
	rule("orders-get", "GET", "/api/orders"),
	rule("order-items", "*", "/api/orders/items"),
	rule("search", "GET", "/api/search"),
}

func TestMatchMostSpecific(t *testing.T) {
	def := rule("catch-all", "", "")
	tests := []struct {
		method, path string
		def          *sluice.Rule
		want         []string
	}{
		{"POST", "/api/orders", nil, []string{"orders-write"}},
		{"POST", "/api/orders/42", nil, []string{"orders-write"}},
		{"GET", "/api/orders/42", nil, []string{"orders-get"}},
		{"DELETE", "/api/orders/42", nil, []string{"orders-any"}},     // wildcard method when no exact one
		{"POST", "/api/orders/items/1", nil, []string{"order-items"}}, // a longer prefix beats an exact method
		{"GET", "/api/search?q=x", nil, []string{"search"}},
		{"POST", "/api/search", nil, []string{"api"}},
		{"GET", "/api", nil, []string{"api"}},
		{"GET", "/health", &def, []string{"catch-all"}}, // default fallback
		{"GET", "/health", nil, []string{}},             // no rule and no default: no match
		{"GET", "/ap", nil, []string{}},
	}
	for _, tt := range tests {
		rs := mustRuleset(t, gatewayRules, tt.def, sluice.MatchMostSpecific)
		if got := names(rs.AppendMatch(nil, sluice.RequestShape{Method: tt.method, Path: tt.path})); !slices.Equal(got, tt.want) {
			t.Errorf("Match(%s, %s) = %v, want %v", tt.method, tt.path, got, tt.want)
		}
		if got := names(rs.AppendMatch(nil, sluice.RequestShape{Method: tt.method, Path: tt.path})); !slices.Equal(got, tt.want) {
			t.Errorf("AppendMatch(%s, %s) = %v, want %v", tt.method, tt.path, got, tt.want)
		}
	}
}

func TestMatchAllReturnsEveryMatchMostSpecificFirst(t *testing.T) {
	def := rule("catch-all", "", "")
	rs := mustRuleset(t, gatewayRules, &def, sluice.MatchAll)
	tests := []struct {
		method, path string
		want         []string
	}{
		{"POST", "/api/orders/items", []string{"order-items", "orders-write", "orders-any", "api"}},
		{"GET", "/api/orders/1", []string{"orders-get", "orders-any", "api"}},
		{"PUT", "/api/search", []string{"api"}},
		{"GET", "/health", []string{"catch-all"}},
	}
	for _, tt := range tests {
		if got := names(rs.AppendMatch(nil, sluice.RequestShape{Method: tt.method, Path: tt.path})); !slices.Equal(got, tt.want) {
			t.Errorf("Match(%s, %s) = %v, want %v", tt.method, tt.path, got, tt.want)
		}
	}
}

func TestMatchAllAllowsTwoRulesOnOneRoute(t *testing.T) {
	perUser := rule("orders-user", "POST", "/api/orders")
	global := rule("orders-global", "POST", "/api/orders")
	global.Scope = sluice.ScopeGlobal
	rs := mustRuleset(t, []sluice.Rule{perUser, global}, nil, sluice.MatchAll)
	if got, want := names(rs.AppendMatch(nil, sluice.RequestShape{Method: "POST", Path: "/api/orders"})), []string{"orders-user", "orders-global"}; !slices.Equal(got, want) {
		t.Errorf("Match = %v, want %v", got, want)
	}
	// In most_specific mode the second could never apply.
	_, err := sluice.NewRuleset([]sluice.Rule{perUser, global}, nil, sluice.MatchMostSpecific)
	var re *sluice.RuleError
	if !errors.As(err, &re) || re.Rule != "orders-global" || re.Field != "path_prefix" {
		t.Errorf("NewRuleset(shadowed rule) = %v, want a path_prefix error on orders-global", err)
	}
}

func TestRulesetErrors(t *testing.T) {
	bad := rule("bad", "GET", "/x")
	bad.Window = 0
	badDef := rule("def", "", "")
	badDef.Limit = 0
	dupDef := rule("search", "", "")
	tests := []struct {
		name        string
		rules       []sluice.Rule
		def         *sluice.Rule
		mode        sluice.MatchMode
		rule, field string
		index       int
	}{
		{"invalid rule", []sluice.Rule{rule("a", "GET", "/a"), bad}, nil, "", "bad", "window", 1},
		{"duplicate names", []sluice.Rule{rule("a", "GET", "/a"), rule("a", "GET", "/b")}, nil, "", "a", "name", 1},
		{"invalid default", nil, &badDef, "", "def", "limit", -1},
		{"default named like a rule", []sluice.Rule{rule("search", "GET", "/s")}, &dupDef, sluice.MatchAll, "search", "name", -1},
	}
	for _, tt := range tests {
		_, err := sluice.NewRuleset(tt.rules, tt.def, tt.mode)
		var re *sluice.RuleError
		if !errors.As(err, &re) || re.Rule != tt.rule || re.Field != tt.field || re.Index != tt.index {
			t.Errorf("%s: NewRuleset = %v, want an error on rule %q (index %d) field %q", tt.name, err, tt.rule, tt.index, tt.field)
		}
	}
	if err := bad.Validate(); err == nil || err.(*sluice.RuleError).Index != -1 {
		t.Errorf("Validate = %v, want a *RuleError with Index -1", err)
	}
	if _, err := sluice.NewRuleset(nil, nil, "first"); !errors.Is(err, sluice.ErrInvalidConfig) {
		t.Errorf("NewRuleset(mode first) = %v, want ErrInvalidConfig", err)
	}
}

func TestCompiledRuleCarriesItsLimit(t *testing.T) {
	r := rule("search", "GET", "/api/search")
	r.Cost = 5
	rs := mustRuleset(t, []sluice.Rule{r}, nil, "")
	c := rs.Rule("search")
	if c == nil {
		t.Fatal(`Rule("search") = nil`)
	}
	l := c.Limit()
	if l.Namespace != "search" || l.Algorithm.Name() != algo.SlidingCounterName || l.Algorithm.Params().Limit != 10 {
		t.Errorf("Limit() = %+v, want namespace search, sliding_counter, limit 10", l)
	}
	if req := sluice.RuleRequest(c, "u1"); req.Cost != 5 || req.Key != "u1" || req.Limit != l {
		t.Errorf("Request(u1) = %+v", req)
	}
	if rs.Rule("orders") != nil {
		t.Error(`Rule("orders") != nil for a rule that does not exist`)
	}
	if c := mustRuleset(t, []sluice.Rule{rule("x", "", "/")}, nil, "").Rule("x"); c.Cost() != 1 || c.Rule().Method != sluice.AnyMethod {
		t.Errorf("defaults: cost %d method %q, want 1 and *", c.Cost(), c.Rule().Method)
	}
}

// TestReloadKeepsOrResetsTheBudget proves, through an engine over the memory
// backend, that a reload changing only a rule's limit keeps what callers have
// spent, while one changing its algorithm starts them fresh.
func TestReloadKeepsOrResetsTheBudget(t *testing.T) {
	clock := engine.NewFakeClock(t0)
	e, err := engine.New(memory.New(&memory.Options{SweepInterval: -1}), &engine.Options{Clock: clock, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })

	orders := rule("orders", "POST", "/api/orders")
	orders.Algorithm, orders.Limit = algo.FixedWindowName, 5
	reg := sluice.NewRegistry(mustRuleset(t, []sluice.Rule{orders}, nil, ""))
	spend := func(step string) algo.Decision {
		t.Helper()
		m := reg.Ruleset().AppendMatch(nil, sluice.RequestShape{Method: "POST", Path: "/api/orders"})
		if len(m) != 1 {
			t.Fatalf("%s: Match = %v, want one rule", step, names(m))
		}
		d, err := e.Apply(context.Background(), m[0].Limit(), "user-1", m[0].Cost())
		if err != nil {
			t.Fatalf("%s: Apply: %v", step, err)
		}
		return d
	}
	for i := range 5 {
		if d := spend(fmt.Sprint("spend ", i)); !d.Allowed {
			t.Fatalf("spend %d denied, want allowed", i)
		}
	}
	if d := spend("sixth"); d.Allowed {
		t.Fatal("sixth request allowed, want denied")
	}

	// Raise the limit: the five already spent still count.
	orders.Limit = 10
	if err := reg.Replace([]sluice.Rule{orders}, nil, ""); err != nil {
		t.Fatal(err)
	}
	if d := spend("after raising the limit"); !d.Allowed || d.Remaining != 4 {
		t.Errorf("after raising the limit: allowed %v remaining %d, want true 4 (budget kept)", d.Allowed, d.Remaining)
	}

	// Change the algorithm: the record is of another kind, so a fresh start.
	orders.Algorithm = algo.SlidingCounterName
	if err := reg.Replace([]sluice.Rule{orders}, nil, ""); err != nil {
		t.Fatal(err)
	}
	if d := spend("after changing the algorithm"); !d.Allowed || d.Remaining != 9 || d.CorruptState {
		t.Errorf("after changing the algorithm: allowed %v remaining %d corrupt %v, want true 9 false (fresh, not corrupt)", d.Allowed, d.Remaining, d.CorruptState)
	}
	if n := e.Stats().CorruptRecords; n != 0 {
		t.Errorf("after changing the algorithm: %d corrupt records counted, want 0 (the old record is another algorithm's, not corrupt)", n)
	}
	// An invalid reload is refused and the rules in force stay.
	bad := orders
	bad.Window = 0
	if err := reg.Replace([]sluice.Rule{bad}, nil, ""); err == nil {
		t.Fatal("Replace(invalid) = nil, want an error")
	}
	if got := reg.Ruleset().Rule("orders").Rule().Algorithm; got != algo.SlidingCounterName {
		t.Errorf("after a refused reload the algorithm is %q, want the old %q", got, algo.SlidingCounterName)
	}
}

// TestSwapUnderConcurrentReaders alternates two rulesets while readers
// match: each reader must see one whole ruleset (both routes from the same
// generation), never a mix. Run with -race.
func TestSwapUnderConcurrentReaders(t *testing.T) {
	gen := func(g int) *sluice.Ruleset {
		a := rule(fmt.Sprintf("a-%d", g), "GET", "/a")
		b := rule(fmt.Sprintf("b-%d", g), "GET", "/b")
		def := rule(fmt.Sprintf("def-%d", g), "", "")
		rs, err := sluice.NewRuleset([]sluice.Rule{a, b}, &def, sluice.MatchMostSpecific)
		if err != nil {
			t.Fatal(err)
		}
		return rs
	}
	sets := []*sluice.Ruleset{gen(0), gen(1)}
	reg := sluice.NewRegistry(sets[0])
	var wg sync.WaitGroup
	stop := make(chan struct{})
	errs := make(chan error, 8)
	for range 8 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				rs := reg.Ruleset()
				a, b, d := rs.AppendMatch(nil, sluice.RequestShape{Method: "GET", Path: "/a/1"}), rs.AppendMatch(nil, sluice.RequestShape{Method: "GET", Path: "/b/1"}), rs.AppendMatch(nil, sluice.RequestShape{Method: "GET", Path: "/c"})
				if len(a) != 1 || len(b) != 1 || len(d) != 1 || a[0].Name()[2:] != b[0].Name()[2:] || a[0].Name()[2:] != d[0].Name()[4:] {
					errs <- fmt.Errorf("mixed ruleset: %v %v %v", names(a), names(b), names(d))
					return
				}
				if m := reg.Ruleset().AppendMatch(nil, sluice.RequestShape{Method: "GET", Path: "/a"}); len(m) != 1 {
					errs <- fmt.Errorf("Match(/a) = %v, want one rule", names(m))
					return
				}
			}
		})
	}
	for i := range 2000 {
		reg.Swap(sets[i%2])
	}
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestNilRulesetMatchesNothing(t *testing.T) {
	reg := sluice.NewRegistry(nil)
	if m := reg.Ruleset().AppendMatch(nil, sluice.RequestShape{Method: "GET", Path: "/"}); len(m) != 0 {
		t.Errorf("Match on an empty registry = %v, want nothing", names(m))
	}
}

// Rules by host: a rule naming a host covers only requests to it (a
// wildcard the names under it, not the name itself), and is more specific
// than a rule naming none, whatever their paths; a request whose host the
// door does not give matches only the rules naming none.
func TestHostRules(t *testing.T) {
	mk := func(name, host, prefix string) sluice.Rule {
		return sluice.Rule{Name: name, Host: host, PathPrefix: prefix, Scope: sluice.ScopeIP, Algorithm: "gcra", Limit: 1, Window: time.Second}
	}
	rs, err := sluice.NewRuleset([]sluice.Rule{
		mk("any-api", "", "/api/orders"),
		mk("exact", "api.example.com", "/"),
		mk("wild", "*.example.com", "/"),
	}, nil, sluice.MatchMostSpecific)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ host, path, want string }{
		{"api.example.com", "/api/orders", "exact"},
		{"eu.example.com", "/api/orders", "wild"},
		{"example.com", "/api/orders", "any-api"},
		{"", "/api/orders", "any-api"},
		{"other.org", "/x", ""},
	} {
		got := ""
		if m := rs.AppendMatch(nil, sluice.RequestShape{Method: "GET", Path: c.path, Host: c.host}); len(m) > 0 {
			got = m[0].Name()
		}
		if got != c.want {
			t.Errorf("%s%s: %q, want %q", c.host, c.path, got, c.want)
		}
	}
	if !sluice.HasHostRules(rs) {
		t.Error("HasHostRules = false")
	}
	for _, h := range []string{"API.example.com", "api.example.com:8080", "*", "a..b", "*.*.x"} {
		if _, err := sluice.NewRuleset([]sluice.Rule{mk("bad", h, "/")}, nil, sluice.MatchMostSpecific); err == nil || !strings.Contains(err.Error(), "host") {
			t.Errorf("host %q: %v, want a host error", h, err)
		}
	}
	for in, want := range map[string]string{"API.Example.com:8443": "api.example.com", "[::1]:80": "::1", "example.com.": "example.com", "h": "h"} {
		if got := sluice.RequestHost(in); got != want {
			t.Errorf("RequestHost(%q) = %q, want %q", in, got, want)
		}
	}
}
