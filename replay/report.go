package replay

import (
	"cmp"
	"math"
	"slices"
	"time"

	"github.com/sluice-go/sluice/identity"
)

// Report is what one configuration would have decided over a replay.
type Report struct {
	// Config is the configuration's name.
	Config string
	// Mode is its match mode.
	Mode string
	// First and Last are the times of the first and last request, Unix
	// nanoseconds.
	First, Last int64
	// Requests counts every request, by what serve would have answered.
	Requests, Unlimited, Allowed, Denied, BadIdentity, Failed int64
	// ShadowDenied counts the requests a shadow rule would have denied;
	// they passed, and are counted Allowed or Unlimited too.
	ShadowDenied int64
	// Share is the share of callers the SuggestedLimit of each rule leaves
	// never denied.
	Share float64
	// Rules are the rules in match order (most specific first), the
	// default last.
	Rules []RuleReport
	// Resolution is the width of a bucket of the rules' series.
	Resolution time.Duration
}

// RuleReport is one rule's part of a Report.
type RuleReport struct {
	// Name, Algorithm, Scope, Method, PathPrefix, Path, Limit, Burst,
	// Cost and Window are the rule's, as compiled (Method "*" for any).
	Name, Algorithm, Scope, Method, PathPrefix, Path string
	// Default reports the configuration's default rule.
	Default bool
	// Shadow reports a shadow rule: its Denied are would-be denials, of
	// requests that passed.
	Shadow bool
	// Plan is the plan the rule applies to, "" for every caller.
	Plan               string
	Limit, Burst, Cost int64
	Window             time.Duration
	// Calendar is, for a rule whose windows follow a calendar (and whose
	// Window is zero), the windows it counts in: "month in Europe/Berlin
	// from day 15"; empty for the others.
	Calendar string `json:",omitempty"`
	// Requests counts the requests the rule applied to; Denied those it
	// denied; Failed those it could not decide (bad identity, a cost over
	// its capacity).
	Requests, Denied, Failed int64
	// Callers counts the distinct caller keys; Affected those denied at
	// least once.
	Callers, Affected int
	// Top are the callers with the most denials, most first.
	Top []CallerReport
	// Needs are the callers' needs (see the package's peak computation),
	// ascending; Unbounded ones are left out and counted in Unbounded.
	Needs     []int64
	Unbounded int
	// SuggestedLimit is the smallest limit under which Report.Share of
	// the callers would never have been denied (0 without callers, or
	// Unbounded when no valid limit would do).
	SuggestedLimit int64
	// CoveredAtLimit is the share of callers whose need is at most the
	// rule's limit.
	CoveredAtLimit float64
	// RequestSeries and DenialSeries count requests and denials per
	// Report.Resolution from the first second of the replay.
	RequestSeries, DenialSeries []int64
}

// CallerReport is one caller's denials under a rule.
type CallerReport struct {
	// Key is the caller's key under the rule, as serve builds it and
	// identity.ShowKey shows it ("user:alice", "ip:192.0.2.1", an API
	// key as "keyhash:" and its hash).
	Key string
	// Requests and Denied count its requests under the rule and the
	// denials among them.
	Requests, Denied int64
	// FirstDenied and LastDenied are the times of its first and last
	// denial, Unix nanoseconds.
	FirstDenied, LastDenied int64
	// Need is the least limit under which it would never have been
	// denied, or Unbounded.
	Need int64
}

// DeniedShare returns Denied/Requests, 0 without requests.
func (r *RuleReport) DeniedShare() float64 {
	if r.Requests == 0 {
		return 0
	}
	return float64(r.Denied) / float64(r.Requests)
}

// Report summarises what the Replayer has decided so far: share is the
// share of callers each rule's SuggestedLimit must leave never denied (0
// to 1; out of range means 0.99), top how many callers each rule lists.
func (r *Replayer) Report(share float64, top int) *Report {
	if !(share > 0 && share <= 1) {
		share = 0.99
	}
	rep := &Report{
		Config: r.name, Mode: string(r.rs.Mode()),
		First: r.first, Last: r.last,
		Requests: r.total.Requests, Unlimited: r.total.Unlimited, Allowed: r.total.Allowed,
		Denied: r.total.Denied, BadIdentity: r.total.BadIdentity, Failed: r.total.Failed,
		ShadowDenied: r.total.ShadowDenied, Share: share,
	}
	res := int64(1e9)
	for _, s := range r.rules {
		if s.requests != nil {
			res = max(res, s.requests.res, s.denials.res)
		}
	}
	// About 120 buckets over the span, in whole doublings of a second.
	for span := r.last - r.origin; span/res > 120; {
		res *= 2
	}
	rep.Resolution = time.Duration(res)
	for _, s := range r.rules {
		rep.Rules = append(rep.Rules, s.report(share, top, res, r.last-r.origin))
	}
	return rep
}

func (s *ruleStats) report(share float64, top int, res, span int64) RuleReport {
	rule := s.rule.Rule()
	rr := RuleReport{
		Name: rule.Name, Algorithm: string(rule.Algorithm), Scope: string(rule.Scope),
		Method: rule.Method, PathPrefix: rule.PathPrefix, Path: rule.Path, Default: s.isDefault,
		Shadow: rule.Shadow, Plan: rule.Plan,
		Limit: rule.Limit, Burst: rule.Burst, Cost: rule.Cost, Window: rule.Window,
		Calendar: s.rule.Limit().Algorithm.Params().Calendar.String(),
		Requests: s.counts.Requests, Denied: s.counts.Denied,
		Failed:  s.counts.BadIdentity + s.counts.Failed,
		Callers: len(s.list),
	}
	name, p := s.params()
	needs := make([]int64, len(s.list))
	for i := range s.list {
		c := &s.list[i]
		needs[i] = c.need.finish(name, p)
		if c.denied > 0 {
			rr.Affected++
		}
	}
	order := make([]int, 0, rr.Affected)
	for i := range s.list {
		if s.list[i].denied > 0 {
			order = append(order, i)
		}
	}
	slices.SortFunc(order, func(a, b int) int {
		if c := cmp.Compare(s.list[b].denied, s.list[a].denied); c != 0 {
			return c
		}
		return cmp.Compare(s.list[a].key, s.list[b].key)
	})
	for _, i := range order[:min(top, len(order))] {
		c := &s.list[i]
		rr.Top = append(rr.Top, CallerReport{Key: identity.ShowKey(c.key), Requests: c.requests, Denied: c.denied,
			FirstDenied: c.firstDenied, LastDenied: c.lastDenied, Need: needs[i]})
	}
	sg := suggest(needs, share, rule.Limit)
	rr.Needs, rr.Unbounded, rr.SuggestedLimit, rr.CoveredAtLimit = sg.needs, sg.unbounded, sg.limit, sg.covered
	buckets := int(span/res) + 1
	rr.RequestSeries = rebin(s.requests, res, buckets)
	rr.DenialSeries = rebin(s.denials, res, buckets)
	return rr
}

// rebin returns s's counts in buckets of res (a multiple of its own).
func rebin(s *series, res int64, buckets int) []int64 {
	out := make([]int64, buckets)
	if s == nil {
		return out
	}
	f := res / s.res
	for i, v := range s.n {
		if j := i / int(f); j < buckets {
			out[j] += v
		} else {
			out[buckets-1] += v
		}
	}
	return out
}

// suggestion is what a rule's callers' needs say of its limit.
type suggestion struct {
	needs     []int64 // the bounded needs, ascending
	unbounded int     // needs no valid limit meets
	limit     int64   // the least limit leaving the share never denied
	covered   float64 // the share of callers the rule's limit leaves never denied
}

// suggest reads the callers' needs (Unbounded for some, perhaps): the
// ceil(share·n)-th smallest is the least limit leaving that share of the
// n callers never denied (Unbounded when it falls among the unbounded
// ones, 0 without callers).
func suggest(needs []int64, share float64, limit int64) suggestion {
	var sg suggestion
	for _, n := range needs {
		if n == Unbounded {
			sg.unbounded++
		} else {
			sg.needs = append(sg.needs, n)
		}
	}
	slices.Sort(sg.needs)
	n := len(needs)
	if n == 0 {
		return sg
	}
	k := max(int(math.Ceil(share*float64(n)-1e-9)), 1)
	if k > len(sg.needs) {
		sg.limit = Unbounded
	} else {
		sg.limit = sg.needs[k-1]
	}
	covered, _ := slices.BinarySearch(sg.needs, limit+1)
	sg.covered = float64(covered) / float64(n)
	return sg
}

// label is the rule's name as the reports show it, with what sets it
// apart: the default rule, a plan's, a shadow rule.
func (rr *RuleReport) label() string {
	name := rr.Name
	if rr.Default {
		name += " (default)"
	}
	if rr.Plan != "" {
		name += " (plan " + rr.Plan + ")"
	}
	if rr.Shadow {
		name += " (shadow: would-be denials)"
	}
	return name
}
