package sluice

import "strings"

// RequestShape is a request as rules match it, whatever door it came
// through: its method, path and host, and its caller's plan. Each field is
// compared as given; a door fills in what it knows and leaves the rest
// empty.
type RequestShape struct {
	// Method is the request's HTTP method, as sent ("GET"). Empty (a gRPC
	// call has none) is covered only by rules of AnyMethod.
	Method string
	// Path is what Rule.PathPrefix is matched against: the request's path
	// (net/http's decoded Request.URL.Path, without the query), or a gRPC
	// call's full method name ("/pkg.Service/Method"). The matching calls
	// put it in the ruleset's match form first: CanonicalPath, case-folded
	// under PathCaseInsensitive.
	Path string
	// Host is the request's host name without its port, in lower case (a
	// door puts the Host header or the :authority in this form). Empty is
	// covered
	// only by rules naming no host (Rule.Host).
	Host string
	// Plan is the caller's plan (Rule.Plan), empty for a caller on no plan.
	// A plan no rule names is matched as no plan.
	Plan string
}

// requestHost returns the host of a request as rules match it
// (RequestShape.Host): the Host header's, or the :authority's, name without its
// port, in lower case.
func requestHost(host string) string {
	if i := strings.LastIndexByte(host, ':'); i >= 0 && !strings.Contains(host[i:], "]") {
		host = host[:i]
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	return strings.ToLower(strings.TrimSuffix(host, "."))
}

// AppendMatch appends to dst the enforced rules that apply to a request of
// shape q, and returns the extended slice: in MatchMostSpecific mode the
// most specific enforced rule covering it outside groups and every rule
// of a group covering it (Rule.Group), most specific first, in MatchAll
// mode every enforced
// rule covering it, most specific first; in both, when no enforced rule
// covers it, the default alone if it is an enforced one, and otherwise
// nothing. The rules considered are those of q.Plan's caller (plan.go: a
// plan's rule replaces the plan-less rule of the same method, path prefix
// and host, and in MatchAll mode of the same scope too). Shadow rules are
// neither returned nor considered: see AppendMatchShadow.
func (rs *Ruleset) AppendMatch(dst []*CompiledRule, q RequestShape) []*CompiledRule {
	q.Path = rs.matchPath(q.Path)
	return rs.appendMatch(dst, q)
}

// appendMatch is AppendMatch of a shape whose path is in match form.
func (rs *Ruleset) appendMatch(dst []*CompiledRule, q RequestShape) []*CompiledRule {
	n := len(dst)
	dst = rs.appendCovering(dst, rs.forPlan(q.Plan), q)
	if len(dst) == n && rs.def != nil && !rs.def.rule.Shadow {
		dst = append(dst, rs.def)
	}
	return dst
}

// AppendMatchShadow appends to dst the shadow rules that apply to a request
// of shape q, chosen among the shadow rules alone as AppendMatch chooses
// among the enforced ones: the most specific covering it, or in MatchAll
// mode every one covering it. A shadow default applies to a request that
// no rule at all, enforced or shadow, covers. Shadow rules name no plan, so
// q.Plan is not read.
func (rs *Ruleset) AppendMatchShadow(dst []*CompiledRule, q RequestShape) []*CompiledRule {
	q.Path = rs.matchPath(q.Path)
	return rs.appendMatchShadow(dst, q)
}

// appendMatchShadow is AppendMatchShadow of a shape whose path is in match
// form.
func (rs *Ruleset) appendMatchShadow(dst []*CompiledRule, q RequestShape) []*CompiledRule {
	n := len(dst)
	dst = rs.appendCovering(dst, rs.shadow, q)
	if len(dst) == n && rs.shadowDefault(q) {
		dst = append(dst, rs.def)
	}
	return dst
}

// appendCovering appends the rules of from that cover a request: in
// MatchMostSpecific mode the first outside groups, and those of groups
// (group.go).
func (rs *Ruleset) appendCovering(dst, from []*CompiledRule, q RequestShape) []*CompiledRule {
	single := false // in MatchMostSpecific mode, the rule outside groups is found
	for _, c := range from {
		if single && c.rule.Group == "" {
			continue
		}
		if rs.covers(from, c, q) {
			dst = append(dst, c)
			if c.rule.Group == "" && rs.mode == MatchMostSpecific {
				if !rs.groups {
					return dst
				}
				single = true
			}
		}
	}
	return dst
}

// shadowDefault reports whether the default is a shadow rule and no
// enforced rule covers the request (the caller has found no shadow rule
// that does).
func (rs *Ruleset) shadowDefault(q RequestShape) bool {
	if rs.def == nil || !rs.def.rule.Shadow {
		return false
	}
	for _, c := range rs.rules {
		if rs.covers(rs.rules, c, q) {
			return false
		}
	}
	return true
}

// matchPath returns the form of a request path that the ruleset's rules
// are matched on: CanonicalPath(path), case-folded when the ruleset's
// PathCase is PathCaseInsensitive. Every matching call puts the path it is
// given in this form; a door needs it only to report what was matched.
func (rs *Ruleset) matchPath(path string) string {
	path = CanonicalPath(path)
	if rs.fold {
		path = foldCase(path)
	}
	return path
}
