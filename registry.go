package sluice

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/sluice-go/sluice/algo"
	"github.com/sluice-go/sluice/internal/clip"
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

// valid reports whether m is a known match mode. The empty mode is not
// valid here; NewRuleset reads it as MatchMostSpecific.
func (m MatchMode) valid() bool { return m == MatchMostSpecific || m == MatchAll }

// Ruleset is an immutable, validated set of rules: what a Registry holds.
//
// Its rules match a path by prefix (Rule.PathPrefix) or by pattern
// (Rule.Path), and the most specific covering rule wins: a rule naming a
// host first, then the more specific path — two paths compared from the
// left, a literal character beating a parameter, a parameter beating a
// {rest...} or a prefix's end, a pattern's end beating a {rest...}, and
// of two prefixes the longer (pattern.go) — then an exact method. In
// MatchMostSpecific mode the rules of a group (Rule.Group) apply beside
// the most specific rule outside groups, all or nothing (group.go).
//
// Its shadow rules (Rule.Shadow) are kept apart from the enforced ones:
// AppendMatch returns enforced rules only, chosen as if there were no
// shadow rules, and AppendMatchShadow returns the shadow rules, chosen
// among themselves by the same mode. So a shadow rule more specific than
// an enforced one is decided beside it, and never takes its place.
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
	heads     bool                       // a rule names HEAD (a GET rule covers HEAD requests unless one does: rule.go's covers)
	fold      bool                       // PathCaseInsensitive: paths and prefixes are compared case-folded
	patterns  bool                       // a rule has a path pattern (Rule.Path)
	groups    bool                       // a rule is in a group (Rule.Group)
}

// RulesetOptions are the settings of a ruleset besides its rules. The zero
// value means the defaults.
type RulesetOptions struct {
	// Match is the match mode; empty means MatchMostSpecific.
	Match MatchMode
	// PathCase says whether a path's letters are matched in their case
	// (PathCaseSensitive, the default when empty) or in any case
	// (PathCaseInsensitive).
	PathCase PathCase
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
	return NewRulesetWith(rules, def, RulesetOptions{Match: mode})
}

// NewRulesetWith is NewRuleset with the ruleset's settings in opts: the
// match mode and the path case. In a ruleset of PathCaseInsensitive two
// rules whose path prefixes differ in case only have the same path prefix.
// An unknown path case is an error wrapping ErrInvalidConfig.
func NewRulesetWith(rules []Rule, def *Rule, opts RulesetOptions) (*Ruleset, error) {
	rs, i, err := compileRuleset(rules, def, opts)
	var re *RuleError
	if errors.As(err, &re) {
		re.Index = i
	}
	return rs, err
}

// compileRuleset is NewRuleset that also returns the index in rules of the
// rule at fault (-1 for the default or the mode).
func compileRuleset(rules []Rule, def *Rule, opts RulesetOptions) (*Ruleset, int, error) {
	mode := opts.Match
	if mode == "" {
		mode = MatchMostSpecific
	}
	if !mode.valid() {
		return nil, -1, fmt.Errorf("%w: match mode must be %q or %q, got %s", ErrInvalidConfig, MatchMostSpecific, MatchAll, clip.Quote(string(mode), clip.Max))
	}
	if opts.PathCase != "" && !opts.PathCase.valid() {
		return nil, -1, fmt.Errorf("%w: path case must be %q or %q, got %s", ErrInvalidConfig, PathCaseSensitive, PathCaseInsensitive, clip.Quote(string(opts.PathCase), clip.Max))
	}
	rs := &Ruleset{all: make([]*CompiledRule, 0, len(rules)), mode: mode, fold: opts.PathCase == PathCaseInsensitive}
	seen := make(map[string]int, len(rules)+1)
	var groups map[string]*groupLevels
	for i, r := range rules {
		c, err := r.compile()
		if err != nil {
			return nil, i, err
		}
		if rs.fold {
			c.prefix = foldCase(c.prefix)
			if c.pattern != nil {
				c.pattern.fold()
			}
			c.toks = c.pathTokens()
		}
		if j, dup := seen[r.Name]; dup {
			return nil, i, r.fail("name", "duplicate: rules[%d] has the same name", j)
		}
		seen[r.Name] = i
		if err := checkCounter(rs.all, c); err != nil {
			return nil, i, err
		}
		if err := checkGroup(rs.all, c); err != nil {
			return nil, i, err
		}
		groups = placeLevel(groups, c)
		if mode == MatchMostSpecific {
			for _, o := range rs.all {
				if o.rule.Shadow == c.rule.Shadow && o.rule.Method == c.rule.Method && o.samePath(c) && o.rule.Host == c.rule.Host && o.rule.Plan == c.rule.Plan &&
					o.rule.Group == "" && c.rule.Group == "" {
					kind := ""
					if c.rule.Shadow {
						kind = "shadow "
					}
					same, field := "method and path prefix", "path_prefix"
					if c.pattern != nil {
						same, field = "method and path", "path"
					}
					if c.rule.Host != "" {
						same += " and host"
						same = strings.Replace(same, " and ", ", ", 1)
					}
					return nil, i, r.fail(field, "%srule %q has the same %s and always wins in %s mode", kind, o.rule.Name, same, mode)
				}
			}
		}
		rs.all = append(rs.all, c)
		rs.hosts = rs.hosts || c.rule.Host != ""
		rs.heads = rs.heads || c.rule.Method == methodHead
		rs.patterns = rs.patterns || c.pattern != nil
		rs.groups = rs.groups || c.rule.Group != ""
	}
	slices.SortStableFunc(rs.all, rs.moreSpecific)
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
		if d.Group != "" {
			return nil, -1, d.fail("group", "not allowed on the default, which covers what no rule does; write a rule with path_prefix \"/\" in the group")
		}
		c, err := d.compile()
		if err != nil {
			return nil, -1, err
		}
		if err := checkCounter(rs.all, c); err != nil {
			return nil, -1, err
		}
		if j, dup := seen[d.Name]; dup {
			return nil, -1, d.fail("name", "duplicate: rules[%d] has the same name", j)
		}
		rs.def = c
	}
	return rs, -1, nil
}

// checkCounter says what is wrong with c sharing its counter (its limit's
// namespace) with a rule before it: rules share one only when one names
// the other's (Rule.Counter), with the same window algorithm, window and
// scope.
func checkCounter(before []*CompiledRule, c *CompiledRule) error {
	ns := c.limit.Namespace
	for _, o := range before {
		if o.limit.Namespace != ns {
			continue
		}
		switch {
		case o.rule.Counter == "" && c.rule.Counter == "":
			continue // the same name: refused as such
		case o.rule.Algorithm != c.rule.Algorithm:
			return c.rule.fail("counter", "shares counter %q with rule %q, whose algorithm is %s, not %s: rules sharing a counter keep one record", ns, o.rule.Name, o.rule.Algorithm, c.rule.Algorithm)
		case o.rule.Scope != c.rule.Scope:
			return c.rule.fail("counter", "shares counter %q with rule %q, scoped %s, not %s: rules sharing a counter count the same callers", ns, o.rule.Name, o.rule.Scope, c.rule.Scope)
		case o.rule.Group != c.rule.Group:
			return c.rule.fail("counter", "shares counter %q with rule %q, of group %q, not %q: rules sharing a counter count the same callers, and a group's level may count each within its tenant (group.go)", ns, o.rule.Name, o.rule.Group, c.rule.Group)
		case c.rule.Algorithm != algo.FixedWindowName && c.rule.Algorithm != algo.SlidingCounterName:
			return c.rule.fail("counter", "shares counter %q with rule %q under %s: a shared counter carries what was spent for the window algorithms (%s, %s), whose record is a count; a bucket's record is its level, which another rate would read as another amount", ns, o.rule.Name, c.rule.Algorithm, algo.FixedWindowName, algo.SlidingCounterName)
		case o.rule.Window != c.rule.Window:
			return c.rule.fail("counter", "shares counter %q with rule %q, whose window is %v, not %v: rules sharing a counter count in the same windows", ns, o.rule.Name, o.rule.Window, c.rule.Window)
		case o.rule.Calendar != c.rule.Calendar || o.rule.Timezone != c.rule.Timezone || o.rule.Anchor != c.rule.Anchor:
			return c.rule.fail("counter", "shares counter %q with rule %q, whose calendar, time zone and anchor are %q %q %q, not %q %q %q: rules sharing a counter count in the same windows",
				ns, o.rule.Name, o.rule.Calendar, o.rule.Timezone, o.rule.Anchor, c.rule.Calendar, c.rule.Timezone, c.rule.Anchor)
		}
	}
	return nil
}

// moreSpecific orders the ruleset's rules most specific first.
func (rs *Ruleset) moreSpecific(a, b *CompiledRule) int { return moreSpecific(a, b, rs.patterns) }

// Mode returns the ruleset's match mode.
func (rs *Ruleset) Mode() MatchMode { return rs.mode }

// Rules returns the compiled rules, enforced and shadow, most specific
// first, without the default. The slice is a copy.
func (rs *Ruleset) Rules() []*CompiledRule { return slices.Clone(rs.all) }

// hasShadow reports whether the ruleset holds a shadow rule (the default
// included), so that a door can skip shadow matching when it holds none.
func (rs *Ruleset) hasShadow() bool {
	return len(rs.shadow) > 0 || rs.def != nil && rs.def.rule.Shadow
}

// hasHostRules reports whether a rule of the ruleset names a host
// (Rule.Host), so that a door reads the request's host only then.
func (rs *Ruleset) hasHostRules() bool { return rs.hosts }

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
