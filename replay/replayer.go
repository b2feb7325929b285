package replay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/textproto"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/algo"
	"github.com/sluice-go/sluice/backend/memory"
	"github.com/sluice-go/sluice/config"
	"github.com/sluice-go/sluice/engine"
	"github.com/sluice-go/sluice/identity"
)

// Status is what serve would have answered a request.
type Status uint8

// The statuses of an Outcome.
const (
	// Unlimited: no rule (and no default) covers the request; it passes
	// untouched.
	Unlimited Status = iota
	// Allowed: every rule that applies admits it.
	Allowed
	// Denied: a rule denies it (429 Too Many Requests).
	Denied
	// BadIdentity: its identity is unusable, a user id over
	// identity.MaxUserIDLen or an API key over identity.MaxAPIKeyLen (400
	// Bad Request).
	BadIdentity
	// Failed: the engine refused it, a cost above the rule's capacity
	// (500, a configuration error).
	Failed
)

var statusNames = [...]string{"unlimited", "allowed", "denied", "bad identity", "failed"}

// String returns the status's name.
func (s Status) String() string {
	if int(s) < len(statusNames) {
		return statusNames[s]
	}
	return fmt.Sprintf("Status(%d)", uint8(s))
}

// Outcome is the decision of one request.
type Outcome struct {
	// Status is what serve would have answered.
	Status Status
	// Rule is the rule the answer reports, as every door picks it
	// (sluice.Door: in all mode the denying rule with the longest
	// Retry-After, or the rule with the least remaining), or nil when
	// Unlimited.
	Rule *sluice.CompiledRule
	// Key is the caller's key under Rule, "" when Unlimited or
	// BadIdentity.
	Key string
	// Decision is Rule's decision, when Allowed or Denied.
	Decision algo.Decision
	// ShadowRule is the shadow rule whose decision httplimit's
	// ShadowHeaders would report (sluice.Rule.Shadow), nil when no shadow
	// rule decided the request: shadow rules decide only requests that
	// pass (Unlimited or Allowed).
	ShadowRule *sluice.CompiledRule
	// ShadowDenied reports that a shadow rule would have denied the
	// request; it passed all the same.
	ShadowDenied bool
}

// maxStackRules is how many matching rules are gathered without
// allocating, as sluice.Door does.
const maxStackRules = 8

// Replayer decides requests under one configuration, as sluice serve
// decides them, on an engine whose clock is each request's time. Make one
// with New; it is not safe for concurrent use.
type Replayer struct {
	name  string
	rs    *sluice.Ruleset
	id    *identity.Identifier
	eng   *engine.Engine
	clock *engine.FakeClock

	userHeader, apiKeyHeader string // canonical names of the identity headers
	planHeader               string // canonical name of the plan header, "" for none
	hdr                      recordHeader

	rules   []*ruleStats // in Ruleset order, the default last
	byRule  map[*sluice.CompiledRule]*ruleStats
	total   counts
	decided int64
	first   int64
	origin  int64
	last    int64
	sweepAt int64
	door    *sluice.Door[*Record] // the decision, as serve's middleware makes it
	plan    string                // the plan of the request being decided
}

// counts are the statuses of a set of requests.
type counts struct {
	Requests, Unlimited, Allowed, Denied, BadIdentity, Failed int64
	// ShadowDenied counts the requests a shadow rule would have denied
	// (they are counted by their status too).
	ShadowDenied int64
}

func (c *counts) add(s Status) {
	c.Requests++
	switch s {
	case Unlimited:
		c.Unlimited++
	case Allowed:
		c.Allowed++
	case Denied:
		c.Denied++
	case BadIdentity:
		c.BadIdentity++
	case Failed:
		c.Failed++
	}
}

// sweepEvery is how many requests pass between sweeps of expired records,
// which keep the store's memory to the callers active within their TTLs.
const sweepEvery = 1 << 16

// New returns a Replayer for a configuration as config.Load or
// config.Parse returned it (rules, default, match mode and identity
// section); name is what reports call it. The configuration's store is not
// used: the replay keeps its records in memory.
func New(name string, cfg *config.Config) (*Replayer, error) {
	rs, err := cfg.Ruleset()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	id, err := identity.New(cfg.Identity)
	if err != nil {
		return nil, fmt.Errorf("%s: identity: %w", name, err)
	}
	clock := engine.NewFakeClock(timeZero)
	// The sweeper, when it runs, must see the replay's time, not the
	// wall clock's, or it would drop every record as long expired.
	store := memory.New(&memory.Options{SweepInterval: -1, Now: clock.Now})
	eng, err := engine.New(store, &engine.Options{Clock: clock, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return nil, err
	}
	ic := cfg.Identity.WithDefaults()
	r := &Replayer{
		name:         name,
		rs:           rs,
		id:           id,
		eng:          eng,
		clock:        clock,
		userHeader:   textproto.CanonicalMIMEHeaderKey(ic.UserHeader),
		apiKeyHeader: textproto.CanonicalMIMEHeaderKey(ic.APIKeyHeader),
		planHeader:   "\x00", // matches no header name
		byRule:       map[*sluice.CompiledRule]*ruleStats{},
	}
	if ic.PlanHeader != "" {
		r.planHeader = textproto.CanonicalMIMEHeaderKey(ic.PlanHeader)
	}
	r.hdr.r = r
	r.door, err = sluice.NewDoor(sluice.DoorConfig[*Record]{
		Name:   "sluice/replay",
		Engine: eng,
		Key:    r.key,
		Plan:   r.planOf,
		Tally:  r.tally,
		// A store error is a failure to decide, as an engine error is: the
		// replay's store is in memory, and counts it Failed.
		OnStoreError: sluice.FailClosed,
		Logger:       slog.New(slog.DiscardHandler),
	})
	if err != nil {
		eng.Close()
		return nil, err
	}
	all := rs.Rules()
	if d := rs.Default(); d != nil {
		all = append(all, d)
	}
	for _, c := range all {
		s := newRuleStats(c, c == rs.Default(), &r.origin)
		r.rules = append(r.rules, s)
		r.byRule[c] = s
	}
	return r, nil
}

// Close releases the engine.
func (r *Replayer) Close() error { return r.eng.Close() }

// Ruleset returns the rules the Replayer decides by.
func (r *Replayer) Ruleset() *sluice.Ruleset { return r.rs }

// recordHeader shows a Record's fields to the Identifier as the request
// headers serve would have read them. It returns slices of its own
// arrays, so reading a header allocates nothing.
type recordHeader struct {
	r                               *Replayer
	rec                             *Record
	user, key, xff, forwarded, plan [1]string
}

// Values implements identity.Header.
func (h *recordHeader) Values(name string) []string {
	one := func(dst *[1]string, v string) []string {
		if v == "" {
			return nil
		}
		dst[0] = v
		return dst[:]
	}
	switch name {
	case h.r.userHeader:
		return one(&h.user, h.rec.User)
	case h.r.apiKeyHeader:
		return one(&h.key, h.rec.APIKey)
	case "X-Forwarded-For":
		return one(&h.xff, h.rec.XForwardedFor)
	case "Forwarded":
		return one(&h.forwarded, h.rec.Forwarded)
	case h.r.planHeader:
		return one(&h.plan, h.rec.Plan)
	}
	return nil
}

// Decide decides one request at rec.Time. Requests must come in time
// order (an older one is decided as if at the newest time seen, as the
// engine's clock never steps back).
func (r *Replayer) Decide(rec *Record) Outcome {
	r.hdr.rec, r.plan = rec, ""
	defer func() { r.hdr.rec = nil }()
	r.note(rec.Time)
	r.clock.SetUnixNano(rec.Time)
	o := r.door.Decide(context.Background(), r.rs, rec.Method, rec.Path, rec)
	// A log records no response's end: a concurrency rule's slot is
	// given back at once, so such a rule refuses nothing in a replay.
	r.door.Release(context.Background(), o.Held)
	out := Outcome{Rule: o.Rule, Key: o.Key, Decision: o.Decision, ShadowRule: o.Shadow, ShadowDenied: o.ShadowDenied}
	switch o.Verdict {
	case sluice.Unlimited, sluice.Passed:
		out.Status = Unlimited
	case sluice.Allowed:
		out.Status = Allowed
	case sluice.Denied:
		out.Status = Denied
	case sluice.Unidentified:
		out.Status = Failed
		if errors.Is(o.Err, identity.ErrBadIdentity) {
			out.Status = BadIdentity
		}
		var ke *sluice.KeyError
		if errors.As(o.Err, &ke) && ke.Rule == nil {
			// serve answers a bad plan before matching: no rule counts
			// it, and nothing is swept.
			r.total.add(out.Status)
			return Outcome{Status: out.Status}
		}
		out.Rule = ke.Rule
		r.fail(rec, out.Status)
	default: // Unavailable, Failed: the engine refused it
		out.Status = Failed
		r.fail(rec, Failed)
	}
	r.total.add(out.Status)
	if out.ShadowDenied {
		r.total.ShadowDenied++
	}
	if r.decided%sweepEvery == 0 {
		r.eng.Sweep(sweepEvery)
	}
	return out
}

// note keeps the span of times seen.
func (r *Replayer) note(t int64) {
	if r.decided == 0 {
		r.first, r.origin = t, timeOrigin(t)
	}
	r.first = min(r.first, t)
	r.last = max(r.last, t)
	r.decided++
}

// key is the Door's Key: the caller's key under rule as the middleware
// builds it, from the record's headers; every request costs its rule's
// Cost.
func (r *Replayer) key(rec *Record, rule *sluice.CompiledRule) (string, int64, error) {
	key, err := r.id.Key(rule.Scope(), rec.Peer, &r.hdr)
	return key, 0, err
}

// planOf is the Door's Plan: the record's plan header, believed from a
// trusted proxy only. It keeps the plan, for fail.
func (r *Replayer) planOf(rec *Record) (string, error) {
	plan, err := r.id.Plan(rec.Peer, &r.hdr)
	r.plan = plan
	return plan, err
}

// tally is the Door's Tally: it counts each rule's part in the request
// being decided.
func (r *Replayer) tally(rule *sluice.CompiledRule, key string, cost int64, allowed bool) {
	r.byRule[rule].record(key, r.hdr.rec.Time, cost, allowed)
}

// fail counts a request the enforced rules could not decide under each of
// them, as st: serve refuses it having spent nothing.
func (r *Replayer) fail(rec *Record, st Status) {
	var stack [maxStackRules]*sluice.CompiledRule
	for _, c := range r.rs.AppendMatch(stack[:0], sluice.RequestShape{Method: rec.Method, Path: rec.Path, Plan: r.plan}) {
		r.byRule[c].counts.add(st)
	}
}

// timeZero is where a Replayer's clock stands before its first request.
var timeZero = time.Unix(0, 0)
