package sluice

import (
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
)

// MatchMode says which of the rules covering a request apply to it.
type MatchMode string

// The match modes.
const (
	// MatchMostSpecific, the default, applies the one most specific rule:
	// the longest path prefix, then an exact method over AnyMethod, then
	// the rule listed first.
	MatchMostSpecific MatchMode = "most_specific"
	// MatchAll applies every rule covering the request, most specific
	// first; the caller spends on all of them or on none
	// (engine.Engine.ApplyAll).
	MatchAll MatchMode = "all"
)

// Valid reports whether m is a known match mode. The empty mode is not
// valid here; NewRuleset reads it as MatchMostSpecific.
func (m MatchMode) Valid() bool { return m == MatchMostSpecific || m == MatchAll }

// Ruleset is an immutable, validated set of rules: what a Registry holds.
//
// Its shadow rules (Rule.Shadow) are kept apart from the enforced ones:
// Match and AppendMatch return enforced rules only, chosen as if there
// were no shadow rules, and MatchShadow and AppendMatchShadow return the
// shadow rules, chosen among themselves by the same mode. So a shadow rule
// more specific than an enforced one is decided beside it, and never
// takes its place.
type Ruleset struct {
	rules  []*CompiledRule // the enforced rules, most specific first; ties in the order given
	shadow []*CompiledRule // the shadow rules, in the same order
	all    []*CompiledRule // both, in the same order
	def    *CompiledRule   // nil when there is no default
	mode   MatchMode

	free      []*CompiledRule            // the plan-less enforced rules, in rules' order: what a caller on no plan is matched against
	plans     map[string][]*CompiledRule // per plan named by a rule, what its callers are matched against (plan.go); nil without plan rules
	overrides *overrideSet               // the callers given their own limits (override.go); nil without overrides
	hosts     bool                       // a rule names a host
}

// NewRuleset validates and compiles rules, the optional default rule def
// (applied to requests no rule covers) and the match mode (empty means
// MatchMostSpecific). The default's Method and PathPrefix are ignored: it
// covers whatever nothing else does.
//
// Errors are *RuleError values naming the rule and the field, and giving
// its Index (an unknown mode is an error wrapping ErrInvalidConfig). Besides each
// rule's own validation, duplicate names are refused (they would share
// counters), as is, in MatchMostSpecific mode, a rule with the same method
// and path prefix as an earlier one of the same kind, enforced or shadow
// (it could never apply). A shadow rule may repeat an enforced rule's
// method and path prefix: that is how a new limit for the same requests is
// tried out.
func NewRuleset(rules []Rule, def *Rule, mode MatchMode) (*Ruleset, error) {
	rs, i, err := compileRuleset(rules, def, mode)
	var re *RuleError
	if errors.As(err, &re) {
		re.Index = i
	}
	return rs, err
}

// compileRuleset is NewRuleset that also returns the index in rules of the
// rule at fault (-1 for the default or the mode).
func compileRuleset(rules []Rule, def *Rule, mode MatchMode) (*Ruleset, int, error) {
	if mode == "" {
		mode = MatchMostSpecific
	}
	if !mode.Valid() {
		return nil, -1, fmt.Errorf("%w: match mode must be %q or %q, got %q", ErrInvalidConfig, MatchMostSpecific, MatchAll, string(mode))
	}
	rs := &Ruleset{all: make([]*CompiledRule, 0, len(rules)), mode: mode}
	seen := make(map[string]int, len(rules)+1)
	for i, r := range rules {
		c, err := r.compile()
		if err != nil {
			return nil, i, err
		}
		if j, dup := seen[r.Name]; dup {
			return nil, i, r.fail("name", "duplicate: rules[%d] has the same name", j)
		}
		seen[r.Name] = i
		if mode == MatchMostSpecific {
			for _, o := range rs.all {
				if o.rule.Shadow == c.rule.Shadow && o.rule.Method == c.rule.Method && o.rule.PathPrefix == c.rule.PathPrefix && o.rule.Host == c.rule.Host && o.rule.Plan == c.rule.Plan {
					kind := ""
					if c.rule.Shadow {
						kind = "shadow "
					}
					same := "method and path prefix"
					if c.rule.Host != "" {
						same = "method, path prefix and host"
					}
					return nil, i, r.fail("path_prefix", "%srule %q has the same %s and always wins in %s mode", kind, o.rule.Name, same, mode)
				}
			}
		}
		rs.all = append(rs.all, c)
		rs.hosts = rs.hosts || c.rule.Host != ""
	}
	slices.SortStableFunc(rs.all, moreSpecific)
	for _, c := range rs.all {
		if c.rule.Shadow {
			rs.shadow = append(rs.shadow, c)
		} else {
			rs.rules = append(rs.rules, c)
		}
	}
	rs.indexPlans()
	if def != nil {
		d := *def
		d.Method, d.PathPrefix, d.Host = AnyMethod, "/", ""
		if d.Plan != "" {
			return nil, -1, d.fail("plan", "not allowed on the default, which covers every caller; write a rule with path_prefix \"/\" and this plan")
		}
		c, err := d.compile()
		if err != nil {
			return nil, -1, err
		}
		if j, dup := seen[d.Name]; dup {
			return nil, -1, d.fail("name", "duplicate: rules[%d] has the same name", j)
		}
		rs.def = c
	}
	return rs, -1, nil
}

// Mode returns the ruleset's match mode.
func (rs *Ruleset) Mode() MatchMode { return rs.mode }

// Rules returns the compiled rules, enforced and shadow, most specific
// first, without the default. The slice is a copy.
func (rs *Ruleset) Rules() []*CompiledRule { return slices.Clone(rs.all) }

// HasShadow reports whether the ruleset holds a shadow rule (the default
// included), so that a door can skip MatchShadow when it holds none.
func (rs *Ruleset) HasShadow() bool {
	return len(rs.shadow) > 0 || rs.def != nil && rs.def.rule.Shadow
}

// HasHostRules reports whether a rule of the ruleset names a host
// (Rule.Host), so that a door reads the request's host only then.
func (rs *Ruleset) HasHostRules() bool { return rs.hosts }

// Default returns the default rule, or nil when there is none.
func (rs *Ruleset) Default() *CompiledRule { return rs.def }

// Rule returns the rule (or default) with the given name, or nil.
func (rs *Ruleset) Rule(name string) *CompiledRule {
	for _, c := range rs.all {
		if c.rule.Name == name {
			return c
		}
	}
	if rs.def != nil && rs.def.rule.Name == name {
		return rs.def
	}
	return nil
}

// Match returns the enforced rules that apply to a request of a caller on
// no plan (rules with a Plan are left out; MatchPlan matches a plan's
// caller): in MatchMostSpecific mode the most specific enforced rule
// covering it, in MatchAll mode every enforced rule covering it, most
// specific first; in both, when no enforced rule covers it, the default
// alone if it is an enforced one, and otherwise nothing (nil). Shadow rules
// are not returned, nor considered: see MatchShadow.
//
// The result must not be modified. In MatchMostSpecific mode it is not
// allocated; use AppendMatch to avoid the allocation in MatchAll mode.
func (rs *Ruleset) Match(method, path string) []*CompiledRule {
	return rs.MatchHostPlan("", method, path, "")
}

// AppendMatch appends the rules Match would return to dst.
func (rs *Ruleset) AppendMatch(dst []*CompiledRule, method, path string) []*CompiledRule {
	return rs.AppendMatchHostPlan(dst, "", method, path, "")
}

// MatchShadow returns the shadow rules that apply to a request, chosen
// among the shadow rules alone as Match chooses among the enforced ones:
// the most specific covering it, or in MatchAll mode every one covering it.
// A shadow default applies to a request that no rule at all, enforced or
// shadow, covers. The result must not be modified; in MatchMostSpecific
// mode it is not allocated.
func (rs *Ruleset) MatchShadow(method, path string) []*CompiledRule {
	if rs.mode == MatchMostSpecific {
		for _, c := range rs.shadow {
			if c.matches("", method, path) {
				return c.alone
			}
		}
		if rs.shadowDefault("", method, path) {
			return rs.def.alone
		}
		return nil
	}
	return rs.AppendMatchShadow(nil, method, path)
}

// AppendMatchShadow appends the rules MatchShadow would return to dst.
func (rs *Ruleset) AppendMatchShadow(dst []*CompiledRule, method, path string) []*CompiledRule {
	return rs.AppendMatchHostShadow(dst, "", method, path)
}

// AppendMatchHostShadow is AppendMatchShadow for a request to host (see
// Rule.Host; "" matches only the rules naming no host).
func (rs *Ruleset) AppendMatchHostShadow(dst []*CompiledRule, host, method, path string) []*CompiledRule {
	n := len(dst)
	dst = rs.appendCovering(dst, rs.shadow, host, method, path)
	if len(dst) == n && rs.shadowDefault(host, method, path) {
		dst = append(dst, rs.def)
	}
	return dst
}

// appendCovering appends the rules of from that cover a request: the
// first only in MatchMostSpecific mode.
func (rs *Ruleset) appendCovering(dst, from []*CompiledRule, host, method, path string) []*CompiledRule {
	for _, c := range from {
		if c.matches(host, method, path) {
			dst = append(dst, c)
			if rs.mode == MatchMostSpecific {
				return dst
			}
		}
	}
	return dst
}

// shadowDefault reports whether the default is a shadow rule and no
// enforced rule covers the request (the caller has found no shadow rule
// that does).
func (rs *Ruleset) shadowDefault(host, method, path string) bool {
	if rs.def == nil || !rs.def.rule.Shadow {
		return false
	}
	for _, c := range rs.rules {
		if c.matches(host, method, path) {
			return false
		}
	}
	return true
}

// Registry holds the ruleset in force and replaces it whole: a reload
// publishes a new Ruleset with one atomic pointer swap, so a reader sees
// either the old ruleset or the new one, never a mix. Reads take no lock.
//
// A caller that looks up several things for one request should take the
// ruleset once with Ruleset and ask it, rather than call the Registry's
// methods repeatedly across a possible swap.
//
// A Registry is safe for concurrent use.
type Registry struct {
	current atomic.Pointer[Ruleset]
}

// NewRegistry returns a registry holding rs; nil means an empty ruleset
// that matches nothing.
func NewRegistry(rs *Ruleset) *Registry {
	g := &Registry{}
	g.Swap(rs)
	return g
}

// Ruleset returns the ruleset in force.
func (g *Registry) Ruleset() *Ruleset { return g.current.Load() }

// Swap puts rs in force and returns the ruleset it replaces; nil means an
// empty ruleset. Records of rules that keep their name and algorithm carry
// over, so a changed limit keeps callers' spent budget.
func (g *Registry) Swap(rs *Ruleset) (old *Ruleset) {
	if rs == nil {
		rs = &Ruleset{mode: MatchMostSpecific}
	}
	return g.current.Swap(rs)
}

// Replace validates a new ruleset as NewRuleset does and puts it in force.
// On an error the ruleset in force stays.
func (g *Registry) Replace(rules []Rule, def *Rule, mode MatchMode) error {
	rs, err := NewRuleset(rules, def, mode)
	if err != nil {
		return err
	}
	g.Swap(rs)
	return nil
}

// Match is Ruleset().Match(method, path).
func (g *Registry) Match(method, path string) []*CompiledRule {
	return g.Ruleset().Match(method, path)
}

// MatchShadow is Ruleset().MatchShadow(method, path).
func (g *Registry) MatchShadow(method, path string) []*CompiledRule {
	return g.Ruleset().MatchShadow(method, path)
}
