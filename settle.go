package sluice

import (
	"context"
	"errors"
	"math"
	"strconv"
	"sync/atomic"

	"github.com/sluice-go/sluice/engine"
)

// Costs settled after the response: a rule whose Settle is set decides a
// request on an estimate of its cost (the Door's Key says what), and the
// door settles the actual cost once the response has ended (Door.Settle),
// through Decider.Settle: above the estimate the difference is charged,
// even past the limit (the caller is then in debt and denied until it has
// refilled); below it, refunded where the rule's algorithm can take it
// back exactly (see engine.Reservation.Settle). A request never settled
// (the client went away, the door found no actual cost) keeps its
// estimate.

// Settle says that a rule's cost is an estimate, settled with the
// request's actual cost once the response has ended, and where a door
// finds both. The estimate is the rule's Cost unless EstimateField names a
// number of the request's JSON body; the actual cost is read from the one
// of ActualHeader, ActualTrailer and ActualField that is set. A door that
// reads no such thing (only package httplimit reads bodies; package
// grpclimit reads ActualTrailer) decides on the estimate, which then
// stands.
type Settle struct {
	// EstimateField, when set, is the dotted path of a number in the
	// request's JSON body, such as "max_tokens": the estimate is its value
	// plus EstimateAdd. A body without it (or not JSON, or with a value
	// that is not a whole number of zero or more) is estimated at the
	// rule's Cost. An estimate above the rule's capacity is taken as the
	// capacity: the settle charges the rest.
	EstimateField string
	// EstimateAdd is added to EstimateField's value: an allowance for what
	// the field does not count, such as a prompt's tokens when max_tokens
	// counts the completion's only. Zero or more.
	EstimateAdd int64
	// MaxBody is how many bytes of a request body the door reads for
	// EstimateField, and of a response body for ActualField; zero means
	// DefaultSettleMaxBody. A request body above it is refused (413 over
	// HTTP); a response body above it is passed on whole, its actual cost
	// unread (the estimate stands).
	MaxBody int64
	// ActualHeader is a response header holding the actual cost.
	ActualHeader string
	// ActualTrailer is a response trailer holding the actual cost (an
	// HTTP trailer, or a gRPC trailer's metadata key, in lower case).
	ActualTrailer string
	// ActualField is the dotted path of the actual cost in the response's
	// JSON body, such as "usage.total_tokens", or in the last event of a
	// text/event-stream response that holds it.
	ActualField string
}

// DefaultSettleMaxBody is Settle.MaxBody's default: 1 MiB.
const DefaultSettleMaxBody = 1 << 20

// maxSettleMaxBody bounds Settle.MaxBody: a door holds that much of a
// request in memory.
const maxSettleMaxBody = 64 << 20

// check returns the field of s that is wrong and why, or "".
func (s *Settle) check() (field, reason string) {
	n := 0
	for _, v := range []string{s.ActualHeader, s.ActualTrailer, s.ActualField} {
		if v != "" {
			n++
		}
	}
	switch {
	case n != 1:
		return "settle", "want exactly one of actual_header, actual_trailer and actual_field"
	case s.EstimateAdd < 0:
		return "settle.estimate_add", "must be zero or more"
	case s.MaxBody < 0 || s.MaxBody > maxSettleMaxBody:
		return "settle.max_body", "must be between 1 and 64 MiB when given"
	case s.EstimateField != "" && !validFieldPath(s.EstimateField):
		return "settle.estimate_field", "want a dotted path of JSON object keys, such as max_tokens"
	case s.ActualField != "" && !validFieldPath(s.ActualField):
		return "settle.actual_field", "want a dotted path of JSON object keys, such as usage.total_tokens"
	case s.ActualHeader != "" && !isToken(s.ActualHeader):
		return "settle.actual_header", "want a header name"
	case s.ActualTrailer != "" && !isToken(s.ActualTrailer):
		return "settle.actual_trailer", "want a trailer name"
	}
	return "", ""
}

// Limit returns s.MaxBody, or its default.
func (s *Settle) Limit() int64 {
	if s.MaxBody > 0 {
		return s.MaxBody
	}
	return DefaultSettleMaxBody
}

// validFieldPath reports whether p is keys joined by dots, none empty.
func validFieldPath(p string) bool {
	if p == "" || len(p) > 256 {
		return false
	}
	for _, k := range splitPath(p) {
		if k == "" {
			return false
		}
	}
	return true
}

// splitPath splits a dotted field path into its keys.
func splitPath(p string) []string {
	var out []string
	for {
		i := 0
		for i < len(p) && p[i] != '.' {
			i++
		}
		out = append(out, p[:i])
		if i == len(p) {
			return out
		}
		p = p[i+1:]
	}
}

// FieldPath returns the keys of a dotted field path (Settle.EstimateField,
// Settle.ActualField).
func FieldPath(p string) []string { return splitPath(p) }

// ParseCost parses an actual cost as a door reads it from a response: a
// whole number of zero or more, in decimal; one above the largest int64
// is the largest (a settle charges it up to the rule's debt bound). ok is
// false for anything else: a negative or fractional number, or not a
// number.
func ParseCost(s string) (n int64, ok bool) {
	n, err := strconv.ParseInt(s, 10, 64)
	switch {
	case err == nil:
		return n, n >= 0
	case errors.Is(err, strconv.ErrRange) && s != "" && s[0] != '-':
		return math.MaxInt64, true
	}
	return 0, false
}

// isToken reports whether s is an HTTP token.
func isToken(s string) bool {
	for i := 0; i < len(s); i++ {
		if !isTokenChar(s[i]) {
			return false
		}
	}
	return s != ""
}

// SettleObserver is an Observer that is also told each settle a door
// makes: under which rule, and the units charged beyond the estimate or
// refunded of it. Package metrics' *Metrics is one; an Observer that is
// not sees no settles.
type SettleObserver interface {
	Observer
	// ObserveSettle records one settle under the named rule: charged units
	// beyond the estimate, refunded units of it (one of them zero), or
	// neither when the actual cost was the estimate; stands reports a
	// reservation left unsettled, its estimate standing (no actual cost
	// was found, or the client went away).
	ObserveSettle(rule string, charged, refunded int64, stands bool)
}

// Settle settles r, a reservation under the named rule, with the actual
// cost, and tells a SettleObserver. A store error is counted and logged as
// Decide's are (the estimate then stands); ctx bounds the store call.
func (c *Decider) Settle(ctx context.Context, name string, r *engine.Reservation, actual int64) (engine.Settlement, error) {
	s, err := r.Settle(ctx, actual)
	switch {
	case err == nil:
		if c.settleObs != nil {
			c.settleObs.ObserveSettle(name, s.Charged, s.Refunded, false)
		}
	case ended(ctx, err), errors.Is(err, engine.ErrSettled), errors.Is(err, engine.ErrNotReserved):
	case engine.IsStoreError(err):
		c.storeError(name, c.policy, err)
	default:
		c.log.Error(c.name+": cannot settle the request", "rule", name, "err", err)
	}
	return s, err
}

// Unsettled tells a SettleObserver that a reservation under the named
// rule was left unsettled: its estimate stands.
func (c *Decider) Unsettled(name string) {
	if c.settleObs != nil {
		c.settleObs.ObserveSettle(name, 0, 0, true)
	}
}

// Reserved is what a Door reserved for a request decided under rules with
// Settle (Outcome.Reserved): the reservations of the batch, one per rule,
// to settle once the response has ended (Door.Settle).
type Reserved struct {
	// Rules are the rules of the batch, as decided.
	Rules []*CompiledRule
	// Reservations are their reservations, one each. Only those of rules
	// with Settle are settled; the others' costs are final.
	Reservations []engine.Reservation

	done atomic.Bool // Door.Settle has been called
}

// Settle settles the reservations of out, an Allowed Outcome with
// Reserved, once (a second call does nothing), under every rule of its
// batch that has Settle: actual returns
// a rule's actual cost, or false when the door found none (the estimate
// then stands). ctx bounds the store calls: give one that outlives the
// request's when the client may have gone (context.WithoutCancel).
func (d *Door[R]) Settle(ctx context.Context, out *Outcome, actual func(*CompiledRule) (int64, bool)) {
	res := out.Reserved
	if res == nil || out.Verdict != Allowed || !res.done.CompareAndSwap(false, true) {
		return
	}
	for i, rule := range res.Rules {
		if rule.rule.Settle == nil {
			continue
		}
		n, ok := actual(rule.configured())
		if !ok {
			d.core.Unsettled(rule.Name())
			continue
		}
		d.core.Settle(ctx, rule.Name(), &res.Reservations[i], n)
	}
}
