package sluice

import (
	"slices"
	"time"

	"github.com/sluice-go/sluice/algo"
	"github.com/sluice-go/sluice/engine"
	"github.com/sluice-go/sluice/internal/ratefield"
)

// SetWaitSleep replaces l's Wait sleep: f is called with each duration Wait
// would sleep, and returns the channel Wait waits on and its stop function.
func SetWaitSleep(l *Limiter, f func(time.Duration) (<-chan time.Time, func() bool)) {
	l.after = f
}

// DefaultLimiterName is a Limiter's name when WithName is not given.
const DefaultLimiterName = defaultLimiterName

// RequestHost is requestHost, for the tests.
var RequestHost = requestHost

// ResetSeconds returns X-RateLimit-Reset for d: the seconds until the
// capacity is whole again, rounded up.
func ResetSeconds(d algo.Decision) int64 { return ratefield.CeilSeconds(d.Reset) }

// HasPlans reports whether any rule of rs has a Plan.
func HasPlans(rs *Ruleset) bool { return rs.hasPlans() }

// HasShadow reports whether rs holds a shadow rule.
func HasShadow(rs *Ruleset) bool { return rs.hasShadow() }

// HasHostRules reports whether a rule of rs names a host.
func HasHostRules(rs *Ruleset) bool { return rs.hasHostRules() }

// Plans returns the plans rs's rules name, sorted.
func Plans(rs *Ruleset) []string {
	out := make([]string, 0, len(rs.plans))
	for p := range rs.plans {
		out = append(out, p)
	}
	slices.Sort(out)
	return out
}

// Overrides returns the overrides of rs, in the order given.
func Overrides(rs *Ruleset) []Override {
	if rs.overrides == nil {
		return nil
	}
	return append([]Override(nil), rs.overrides.list...)
}

// RuleRequest returns the engine request that spends c's cost by key.
func RuleRequest(c *CompiledRule, key string) engine.Request { return c.request(key) }

// FleetSize returns the number of gateways l divides the rules by.
func FleetSize(l *LocalFallback) int { return l.fleet }

// LocalRequest returns l's request for key under c's share.
func LocalRequest(l *LocalFallback, c *CompiledRule, key string, cost int64) engine.Request {
	return l.request(c, key, cost)
}

// LocalShare returns c's share as l compiles it.
func LocalShare(l *LocalFallback, c *CompiledRule) *CompiledRule { return l.shareOf(c) }

// LocalEngine returns l's in-process engine.
func LocalEngine(l *LocalFallback) *engine.Engine { return l.eng }

// RulesetPathCase returns rs's path case.
func RulesetPathCase(rs *Ruleset) PathCase {
	if rs.fold {
		return PathCaseInsensitive
	}
	return PathCaseSensitive
}
