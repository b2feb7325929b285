package sluice

import (
	"slices"
	"strings"

	"github.com/sluice-go/sluice/backend"
	"github.com/sluice-go/sluice/engine"
)

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
// every covering rule applies already, and a group changes nothing of what
// applies; its levels count within their tenant all the same (below).
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
// A level narrower than the request's tenant counts within it. The
// tenant is the widest level of the group scoped header: or attr:
// (tenantScope) whose value the caller has: its key is the scope's kind
// and a value ("attr:acme", tenantKey), not the IP key a caller without
// the attribute is counted by. Every level of the group after it in the
// hierarchy (a team's attr:, user, api_key, ip) is a budget within the
// tenant, keyed NestedKey(tenant, own key): "no user takes more than 100
// of the organisation's 1,000", so alice in acme and alice in globex are
// two budgets, and alice without an organisation a third (her own key).
// The tenant's own level keeps its key (two budgets of it, a month's
// quota and a minute's pool, both), and so do a global level and a level
// wider than the tenant: nothing nests under a global key, which would put
// every caller's records in one place. With the organisation missing and
// a team present, the team is the tenant; with no tenant, every level
// keeps its own key, as a rule outside groups does. The tenant is the
// caller's whatever rules of the group cover the request (a level not
// covering it is asked its key), so a level's budget is one whatever
// path spends it.
//
// This is no bypass: the tenant is believed only as its scope is, from a
// trusted proxy (header:) or from the program's identity function (attr:),
// so a client cannot name another organisation to get a fresh budget. A
// param: level is never a tenant: the client chooses the path, and a user
// naming other organisations in /v1/orgs/{org}/ would otherwise multiply
// its budget. A door's Key making a key that begins with a NUL byte, the
// form of NestedKey's, is refused, so no caller poses as another within a
// tenant; rules sharing a counter are of one group, or of none, so that
// they key their callers alike.
//
// On a Redis Cluster the levels within a tenant are stored under the
// tenant's hash tag (prefix{attr:acme}{user:42}:rule), on one slot, and a
// request is one script; without a tenant each level's own key (attr:acme,
// ip:…, user:42) lies on its own slot: see docs/redis.md for what such a
// batch costs.

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

// groupLevels is the hierarchy of one group: its levels' scopes, from the
// widest (the order checkGroup holds them to), and of those the scopes a
// tenant is found by.
type groupLevels struct {
	scopes []Scope
	// tenants are the first rule of each header: or attr: level, widest
	// first: the rule whose key a caller's tenant is read from.
	tenants []*CompiledRule
}

// placeLevel places c, a rule just compiled, at its level of its group's
// hierarchy, groups holding the hierarchies of the rules before it (nil
// for none yet), and returns groups.
func placeLevel(groups map[string]*groupLevels, c *CompiledRule) map[string]*groupLevels {
	name := c.rule.Group
	if name == "" {
		return groups
	}
	if groups == nil {
		groups = make(map[string]*groupLevels)
	}
	g := groups[name]
	if g == nil {
		g = &groupLevels{}
		groups[name] = g
	}
	s := c.rule.Scope
	level := slices.Index(g.scopes, s)
	if level < 0 {
		level = len(g.scopes)
		g.scopes = append(g.scopes, s)
		if tenantScope(s) {
			g.tenants = append(g.tenants, c)
		}
	}
	c.group, c.level = g, level
	return groups
}

// tenantScope reports whether a level of scope s can be a tenant, within
// which the narrower levels count: a header's (set by a trusted proxy) or
// an attribute's (the program's identity function). A path parameter's
// cannot: the client chooses the path.
func tenantScope(s Scope) bool { return s.Header() != "" || s.Attr() != "" }

// tenantKey reports whether key, a caller's key under a rule of scope s
// (tenantScope), names a tenant: it is the scope's kind and a value, as
// package identity makes it ("attr:acme"), not the IP key a caller without
// the attribute is counted by, nor any other a door's own Key may answer.
func tenantKey(s Scope, key string) bool {
	kind := "attr:"
	if s.Header() != "" {
		kind = "header:"
	}
	return len(key) > len(kind) && strings.HasPrefix(key, kind)
}

// nest puts within its tenant the key of each request of reqs, a
// request's under rules (one each, keys as the door's Key gave them), at a
// level of a group narrower than the group's tenant: see the groups'
// comment above. A tenant level's key may be asked of the door (keyOf) when
// no rule of the batch is at that level; its error is returned, with its
// rule.
func (d *Door[R]) nest(req R, path string, rules []*CompiledRule, reqs []engine.Request) (*CompiledRule, error) {
	for i, c := range rules {
		g := c.configured().group
		if g == nil || len(g.tenants) == 0 || slices.ContainsFunc(rules[:i], func(o *CompiledRule) bool { return o.configured().group == g }) {
			continue // no tenant to count within, or the group's done
		}
		tenant, level, at, err := d.tenantOf(req, path, g, rules, reqs)
		if err != nil {
			return at, err
		}
		if tenant == "" {
			continue
		}
		for j := i; j < len(rules); j++ {
			if cj := rules[j].configured(); cj.group == g && cj.level > level {
				reqs[j].Key = backend.NestedKey(tenant, reqs[j].Key)
			}
		}
	}
	return nil, nil
}

// tenantOf returns the key of the caller's tenant in the hierarchy g and
// its level: the widest header: or attr: level whose key names a tenant
// (tenantKey), read from the batch (rules, reqs) when a rule of it is at
// that level, else asked of the door. It returns "" when the caller has
// none.
func (d *Door[R]) tenantOf(req R, path string, g *groupLevels, rules []*CompiledRule, reqs []engine.Request) (tenant string, level int, at *CompiledRule, err error) {
	for _, t := range g.tenants {
		key, found := "", false
		for j, c := range rules {
			if c := c.configured(); c.group == g && c.level == t.level {
				key, found = reqs[j].Key, true
				break
			}
		}
		if !found {
			if key, _, err = d.keyOf(req, t, path); err != nil {
				return "", 0, t, err
			}
		}
		if tenantKey(t.rule.Scope, key) {
			return key, t.level, nil, nil
		}
	}
	return "", 0, nil, nil
}

// NestedKey returns the caller key a level of a group counts by within
// its tenant: tenant is the tenant's key ("attr:acme"), own the caller's
// own key under the level's rule ("user:alice"). It is backend.NestedKey's
// form, which no door's Key makes (a Door refuses a key beginning with a
// NUL byte); package identity's ShowKey shows it as {TENANT}OWN.
func NestedKey(tenant, own string) string { return backend.NestedKey(tenant, own) }

// SplitNestedKey splits a key NestedKey made into the tenant's key and the
// caller's own; ok is false for any other key.
func SplitNestedKey(key string) (tenant, own string, ok bool) { return backend.SplitNested(key) }
