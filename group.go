package sluice

// Groups: a hierarchy of budgets decided together. An organisation shares
// 1,000 requests a minute among its teams, each team 300 of them, each
// user 100: three rules of one group (Rule.Group), scoped attr:org,
// attr:team and user, each covering the requests the level counts.
//
//	rules:
//	  - {name: org-minute,  group: org-tree, path_prefix: /v1/, scope: "attr:org",  limit: 1000, window: 1m, algorithm: sliding_counter}
//	  - {name: team-minute, group: org-tree, path_prefix: /v1/, scope: "attr:team", limit: 300,  window: 1m, algorithm: sliding_counter}
//	  - {name: user-minute, group: org-tree, path_prefix: /v1/, scope: user,        limit: 100,  window: 1m, algorithm: sliding_counter}
//
// In most_specific mode the rules outside groups keep most-specific-wins,
// and every rule of a group covering a request applies to it as well: the
// request is decided under the most specific rule outside groups covering
// it (if any) and every covering rule of every group, in one all-or-nothing
// batch (engine.Engine.ApplyAll, as match: all decides a request): nothing
// is spent unless every level allows, so a user denied at their own level
// spends nothing of the team's or the organisation's. A request covered by
// a group's rule is covered: the default does not apply to it. In all mode
// every covering rule applies already, and a group changes nothing.
//
// The levels are listed from the widest: a global level first, then the
// levels of a header, an attribute or a path parameter (in the order
// given, which is the hierarchy's: attr:org before attr:team), then user
// or api_key, then ip. A group listing a level after a narrower one, or
// holding both user and api_key levels (neither holds the other), is
// refused, as are two levels of one scope on the same requests, unless
// they name different counters (Rule.Counter; one may be the other's
// name): two budgets of one level, a monthly quota beside a per-minute
// pool, each replaced only by a plan rule of its own counter. The batch
// is decided in this order, most specific path first, ties in the order
// given, so the parent is decided first.
//
// Overrides and plans apply per level: an override names a caller under
// one rule (a premium organisation under org-minute, one team raised under
// team-minute), and a plan's rule in a group replaces the plan-less rule
// of the same group, method, path and scope only (one level), as in all
// mode.
//
// On a Redis Cluster the levels of one request have different caller keys
// (attr:acme, attr:red, user:42), so they lie on different hash slots: see
// docs/redis.md for what such a batch costs.

// scopeRank ranks a scope by how wide a level of a hierarchy it counts:
// global, then a header, attribute or path parameter, then user or API
// key, then IP.
func scopeRank(s Scope) int {
	switch s {
	case ScopeGlobal:
		return 0
	case ScopeUser, ScopeAPIKey:
		return 2
	case ScopeIP:
		return 3
	}
	return 1
}

// checkGroup says what is wrong with c given the rules of the ruleset
// before it, as a group goes: nil when c is in no group.
func checkGroup(before []*CompiledRule, c *CompiledRule) error {
	g := c.rule.Group
	if g == "" {
		return nil
	}
	for _, o := range before {
		if o.rule.Group != g {
			continue
		}
		os, cs := o.rule.Scope, c.rule.Scope
		switch {
		case scopeRank(os) > scopeRank(cs):
			return c.rule.fail("scope", "rule %q of group %q, scoped %s, is a narrower level than this one, scoped %s, and listed before it: list a hierarchy's levels from the widest (global, then header:, attr: or param:, then user or api_key, then ip)", o.rule.Name, g, os, cs)
		case os != cs && scopeRank(os) == 2 && scopeRank(cs) == 2:
			return c.rule.fail("scope", "rule %q of group %q is scoped %s and this one %s: neither holds the other, so they cannot be levels of one hierarchy", o.rule.Name, g, os, cs)
		case os == cs && o.rule.Method == c.rule.Method && o.samePath(c) && o.rule.Host == c.rule.Host && o.rule.Plan == c.rule.Plan && sameBudget(o, c):
			return c.rule.fail("scope", "rule %q of group %q counts the same requests by the same scope %s: one level is one budget; two budgets of one level (a month's quota and a minute's pool) name their counters (counter:), which a plan's rule then names to replace one of them", o.rule.Name, g, cs)
		}
	}
	return nil
}
