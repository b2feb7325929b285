package replay

import (
	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/algo"
)

// callerStats are one caller's requests under one rule.
type callerStats struct {
	key         string
	requests    int64
	denied      int64
	firstDenied int64
	lastDenied  int64
	need        needTracker
}

// ruleStats accumulate one rule's requests.
type ruleStats struct {
	rule      *sluice.CompiledRule
	isDefault bool
	kind      windowKind
	window    int64
	cal       algo.Algorithm // the rule's algorithm when its windows follow a calendar, else nil
	counts    counts
	callers   map[string]int32 // key → index in list
	list      []callerStats
	requests  *series
	denials   *series
	origin    *int64 // the replay's first whole second, every series' origin
}

func newRuleStats(c *sluice.CompiledRule, isDefault bool, origin *int64) *ruleStats {
	r := c.Rule()
	return &ruleStats{
		rule:      c,
		isDefault: isDefault,
		kind:      kindFor(r.Algorithm),
		window:    int64(r.Window),
		cal:       calendarAlgorithm(c),
		callers:   map[string]int32{},
		origin:    origin,
	}
}

// calendarAlgorithm returns c's algorithm when its windows follow a
// calendar, else nil.
func calendarAlgorithm(c *sluice.CompiledRule) algo.Algorithm {
	if a := c.Limit().Algorithm; !a.Params().Calendar.IsZero() {
		return a
	}
	return nil
}

// record counts a decided request of key at t; allowed is false when this
// rule denied it.
func (s *ruleStats) record(key string, t, cost int64, allowed bool) {
	if s.requests == nil {
		s.requests, s.denials = newSeries(*s.origin), newSeries(*s.origin)
	}
	i, ok := s.callers[key]
	if !ok {
		i = int32(len(s.list))
		s.list = append(s.list, callerStats{key: key})
		s.callers[key] = i
	}
	c := &s.list[i]
	c.requests++
	if s.cal != nil {
		c.need.addCalendar(s.kind, s.cal, t, cost)
	} else {
		c.need.add(s.kind, s.window, t, cost)
	}
	s.requests.add(t, 1)
	if allowed {
		s.counts.add(Allowed)
		return
	}
	s.counts.add(Denied)
	s.denials.add(t, 1)
	if c.denied == 0 {
		c.firstDenied = t
	}
	c.denied++
	c.lastDenied = t
}

// timeOrigin is the whole second at or before t.
func timeOrigin(t int64) int64 { return alignDown(t, 1e9) }

// params returns the rule's algorithm parameters.
func (s *ruleStats) params() (algo.Name, algo.Params) {
	r := s.rule.Rule()
	return r.Algorithm, algo.Params{Limit: r.Limit, Window: r.Window, Burst: r.Burst, Calendar: s.rule.Limit().Algorithm.Params().Calendar}
}
