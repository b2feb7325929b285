package httplimit

import (
	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/algo"
	"github.com/sluice-go/sluice/engine"
)

// The decision a door makes once it has the rules and the caller's keys,
// exported so that a program deciding requests off line (package replay)
// decides them exactly as the middleware does. The steps are the
// middleware's own, in its order:
//
//  1. match: Ruleset.MatchPlan in most_specific mode, AppendMatchPlan in
//     all mode, with the caller's plan (only when Ruleset.HasPlans);
//  2. for each rule, the caller's key under its scope, then the caller's
//     override, Override;
//  3. Decide: engine.Apply for one rule, engine.ApplyAll for several;
//  4. Pick the rule the answer reports;
//  5. when the enforced rules let the request through (or none covers it),
//     the same for the shadow rules (Ruleset.AppendMatchShadow), with
//     PickShadow, whose denials never refuse.
//
// Steps 1 and 2 stay in each door because the key comes from a request of
// its own kind; the middleware's single-rule path keeps its own
// engine.Apply call so that the common request pays for no slice.

// Override replaces each rule of rules by the caller's override under it
// (sluice.Ruleset.Override), keys[i] being the caller's key under rules[i],
// and sets reqs[i].Limit to match when reqs is not nil. rules must be the
// caller's own slice (AppendMatchPlan's), not one a Ruleset returned.
func Override(rs *sluice.Ruleset, rules []*sluice.CompiledRule, reqs []engine.Request) {
	for i, c := range rules {
		if o := rs.Override(c, reqs[i].Key); o != c {
			rules[i] = o
			reqs[i].Limit = o.Limit()
		}
	}
}

// Decide decides reqs on eng as the middleware does: engine.Apply when
// there is one, its decision stored in *one, else engine.ApplyAll. all
// reports whether every request was allowed (and spent); when not,
// nothing was spent.
func Decide(eng *engine.Engine, reqs []engine.Request, one *[1]algo.Decision) (ds []algo.Decision, all bool, err error) {
	if len(reqs) == 1 {
		d, err := eng.Apply(reqs[0].Limit, reqs[0].Key, reqs[0].Cost)
		one[0] = d
		return one[:], d.Allowed, err
	}
	return eng.ApplyAll(reqs)
}

// Pick returns the index of the decision among ds the answer reports, all
// being Decide's: when some deny, the denying one with the longest
// RetryAfter (the first of those tied), else the one with the least
// Remaining (the first of those tied).
func Pick(ds []algo.Decision, all bool) int {
	pick := 0
	for i := 1; i < len(ds); i++ {
		di := ds[i]
		if !all {
			if !di.Allowed && (ds[pick].Allowed || di.RetryAfter > ds[pick].RetryAfter) {
				pick = i
			}
		} else if di.Remaining < ds[pick].Remaining {
			pick = i
		}
	}
	return pick
}

// PickShadow returns the index of the shadow decision among ds whose
// headers Config.ShadowHeaders reports: the one with the least Remaining.
func PickShadow(ds []algo.Decision) int {
	pick := 0
	for i, di := range ds {
		if di.Remaining < ds[pick].Remaining {
			pick = i
		}
	}
	return pick
}
