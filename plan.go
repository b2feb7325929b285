package sluice

import "slices"

// Plans: a rule with a Plan applies only to callers of that plan, the plan
// a door learns from the caller's identity (package identity: a Caller the
// program supplies, or a header set by a trusted proxy). Which rule a
// caller of plan P gets is decided by one rule, the same in both match
// modes:
//
//	A rule of plan P replaces, for P's callers, every plan-less rule it
//	stands in for: in MatchMostSpecific mode the plan-less rule with the
//	same method and path prefix outside groups; in MatchAll mode, and in a
//	group (Rule.Group), the plan-less rules of the same group with the same
//	method, path prefix and scope (one level of a hierarchy) and, when
//	either rule names a counter (Rule.Counter), the same counter (so a
//	premium monthly quota replaces the monthly quota, not the per-minute
//	pool of the same scope beside it). The rules P's callers are
//	matched against are P's rules and the plan-less rules not replaced,
//	and among those the usual order decides: the longest path prefix, then
//	an exact method over AnyMethod (MatchMostSpecific), or every covering
//	rule (MatchAll). No plan's rule is ever matched for a caller of another
//	plan or of none.
//
// So a plan rule of the same match as a plan-less one wins for its plan's
// callers (in most_specific mode the two would otherwise tie), and the most
// specific rule still wins: a premium rule on /api does not cover
// /api/orders for premium callers when a plan-less rule for /api/orders
// exists, since that one is more specific; write a premium rule for
// /api/orders too. A caller on no plan, or on a plan no rule names, gets
// the plan-less rules. The default rule has no plan; a rule with path
// prefix "/" and a plan is a plan's catch-all (more specific than the
// default, so it wins wherever the default would apply).

// MaxPlanLen is the longest plan name, in bytes.
const MaxPlanLen = 64

// planSyntax describes a valid plan name, for errors.
const planSyntax = "want a plan name of 1 to 64 letters, digits, '_', '-' or '.', starting with a letter or digit"

// ValidPlan reports whether s is a valid plan name: 1 to MaxPlanLen ASCII
// letters, digits, '_', '-' and '.', starting with a letter or a digit.
// Plan names are case-sensitive.
func ValidPlan(s string) bool {
	if s == "" || len(s) > MaxPlanLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case i > 0 && (c == '_' || c == '-' || c == '.'):
		default:
			return false
		}
	}
	return true
}

// indexPlans builds free and plans from rules (sorted most specific
// first).
func (rs *Ruleset) indexPlans() {
	var names []string
	for _, c := range rs.rules {
		if p := c.rule.Plan; p != "" && !slices.Contains(names, p) {
			names = append(names, p)
		}
	}
	if names == nil {
		rs.free = rs.rules
		return
	}
	rs.free = make([]*CompiledRule, 0, len(rs.rules))
	for _, c := range rs.rules {
		if c.rule.Plan == "" {
			rs.free = append(rs.free, c)
		}
	}
	rs.plans = make(map[string][]*CompiledRule, len(names))
	for _, p := range names {
		var own []*CompiledRule
		for _, c := range rs.rules {
			if c.rule.Plan == p {
				own = append(own, c)
			}
		}
		list := slices.Clone(own)
		for _, c := range rs.free {
			if !slices.ContainsFunc(own, func(o *CompiledRule) bool { return rs.replaces(o, c) }) {
				list = append(list, c)
			}
		}
		// Stable: at equal specificity the plan's own rules, appended
		// first, stay first (they can tie only with a rule of another
		// match, which never covers the same request).
		slices.SortStableFunc(list, rs.moreSpecific)
		rs.plans[p] = list
	}
}

// replaces reports whether the plan rule o stands in for the plan-less
// rule c, for o's plan's callers.
func (rs *Ruleset) replaces(o, c *CompiledRule) bool {
	same := o.rule.Method == c.rule.Method && o.samePath(c) && o.rule.Host == c.rule.Host && o.rule.Group == c.rule.Group
	if rs.mode == MatchAll || o.rule.Group != "" {
		return same && o.rule.Scope == c.rule.Scope && sameBudget(o, c)
	}
	return same
}

// sameBudget reports whether o and c are one budget of one level, as a
// plan's rule replaces one in MatchAll mode and in a group: when either
// names a counter (Rule.Counter), only a rule of the same counter is (the
// month's quota, not the minute's pool beside it at the same scope);
// when neither does, any rule of the level is.
func sameBudget(o, c *CompiledRule) bool {
	return o.rule.Counter == "" && c.rule.Counter == "" || o.limit.Namespace == c.limit.Namespace
}

// hasPlans reports whether any rule of the ruleset has a Plan. A door
// needs the caller's plan only then.
func (rs *Ruleset) hasPlans() bool { return rs.plans != nil }

// forPlan returns the rules a caller of plan is matched against.
func (rs *Ruleset) forPlan(plan string) []*CompiledRule {
	if plan != "" && rs.plans != nil {
		if list, ok := rs.plans[plan]; ok {
			return list
		}
	}
	return rs.free
}
