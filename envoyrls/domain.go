package envoyrls

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluice-go/sluice/algo"
	"github.com/sluice-go/sluice/engine"
	"github.com/sluice-go/sluice/internal/configerr"
)

// Descriptor is one descriptor of a domain's tree, as envoyproxy/ratelimit's
// configuration gives it: what NewDomain builds a Domain from. Package
// envoyrls/rlsfile reads them from YAML files; a program can write them in
// Go.
type Descriptor struct {
	// Key is "key", required.
	Key string
	// Value is "value": exact, or a pattern where each "*" matches any run
	// of characters; empty matches any value of Key.
	Value string
	// RateLimit is "rate_limit", or nil for a descriptor that only holds
	// others.
	RateLimit *RateLimit
	// ShadowMode is "shadow_mode": decided and counted, never denying.
	ShadowMode bool
	// QuotaMode is "quota_mode": over its limit, it denies the request
	// only when every quota_mode descriptor of the request is over its own.
	QuotaMode bool
	// DetailedMetric is "detailed_metric": metrics by the request's values.
	DetailedMetric bool
	// ValueToMetric is "value_to_metric": this level's value in the metric
	// label of the limits under it.
	ValueToMetric bool
	// ShareThreshold is "share_threshold", for a pattern Value only: every
	// value the pattern matches spends one budget.
	ShareThreshold bool
	// Descriptors are "descriptors", the levels under this one.
	Descriptors []Descriptor
}

// RateLimit is a descriptor's "rate_limit".
type RateLimit struct {
	// Unit is "unit": second, minute, hour, day, week, month or year,
	// matched without regard to case; empty when not given, which only an
	// unlimited limit may be.
	Unit string
	// RequestsPerUnit is "requests_per_unit", required unless Unlimited
	// (nil is not given); 0 refuses every request.
	RequestsPerUnit *uint32
	// UnitMultiplier is "unit_multiplier", at least 1; nil (not given) is
	// 1, and then the responses' current_limit carries none.
	UnitMultiplier *uint32
	// Unlimited is "unlimited": always OK, nothing counted against a
	// budget; it takes no unit, algorithm or burst.
	Unlimited bool
	// Name is "name", the name Replaces refers to; may be empty.
	Name string
	// Replaces are the names of "replaces", the limits this one replaces.
	Replaces []string
	// Algorithm is Sluice's "algorithm", one of algo.Names; empty is
	// fixed_window, as envoyproxy/ratelimit counts.
	Algorithm algo.Name
	// Burst is Sluice's "burst", the capacity of a bucket algorithm; 0 for
	// none.
	Burst int64
	// SettleOnStreamDone is Sluice's "settle_on_stream_done": the limit's
	// cost is an estimate on the request path, settled with the actual
	// cost by a call Envoy makes when the stream is done (see the package
	// doc's Settling). It takes no sliding_log, whose refund needs the
	// exact instant of the spend, and no unlimited limit.
	SettleOnStreamDone bool
	// Calendar is Sluice's "calendar": the windows of a unit of day,
	// week, month or year follow the calendar of Timezone (a week from
	// Monday, a month from the 1st, a year from January 1, each at
	// midnight; a month of 28 to 31 days, a day of 23 to 25 hours across
	// a change of summer time) instead of envoyproxy/ratelimit's fixed
	// lengths (a month of 30 days, a year of 365), which are the default.
	// It takes fixed_window (the default) or sliding_counter, and no
	// unit_multiplier above 1.
	Calendar bool
	// Timezone is Sluice's "timezone": the IANA name of the calendar's
	// time zone, such as Europe/Berlin; empty is UTC. Only with Calendar.
	Timezone string
}

// NewDomain builds the domain name from its descriptors, checked as
// envoyproxy/ratelimit checks a file's; file is where they come from
// (Domain.File), named in errors. An error is a *config.Error naming the
// field at fault by its place in the file ("descriptors[0].rate_limit.unit"),
// with no line: rlsfile.ParseFile adds the line.
func NewDomain(file, name string, descriptors []Descriptor) (*Domain, error) {
	if name == "" {
		return nil, &configerr.Error{File: file, Field: "domain", Reason: "required: a domain cannot be empty"}
	}
	b := &domainBuilder{file: file, domain: name}
	d := &Domain{Name: name, File: file, root: newNode("", "")}
	if err := b.descriptors(descriptors, "descriptors", name, d.root); err != nil {
		return nil, err
	}
	d.all = b.all
	return d, nil
}

// domainBuilder builds one domain's tree.
type domainBuilder struct {
	file, domain string
	all          []*Limit // in file order
}

func (b *domainBuilder) errorf(field, format string, args ...any) *configerr.Error {
	return &configerr.Error{File: b.file, Field: field, Reason: fmt.Sprintf(format, args...)}
}

func newNode(key, value string) *node {
	return &node{key: key, value: value, exact: map[entry]*node{}, patterns: map[string][]*node{}}
}

// descriptors adds ds under parent, whose path is at (the domain, then
// each level's key or key_value); field is their place in the file. Each
// descriptor is checked before those under it, and before the next.
func (b *domainBuilder) descriptors(ds []Descriptor, field, at string, parent *node) error {
	for i := range ds {
		if err := b.descriptor(&ds[i], configerr.Index(field, i), at, parent); err != nil {
			return err
		}
	}
	return nil
}

func (b *domainBuilder) descriptor(d *Descriptor, field, at string, parent *node) error {
	if d.Key == "" {
		return b.errorf(configerr.Join(field, "key"), "required: descriptor has empty key")
	}
	final := d.Key
	if d.Value != "" {
		final += "_" + d.Value
	}
	path := at + "." + final
	child := newNode(d.Key, d.Value)
	child.valueToMetric, child.shareThreshold = d.ValueToMetric, d.ShareThreshold
	pattern := strings.Contains(d.Value, "*")
	if d.ShareThreshold && !pattern {
		return b.errorf(configerr.Join(field, "share_threshold"), "share_threshold can only be used with wildcard values (containing '*'), but found key %q", final)
	}
	if pattern {
		child.parts = strings.Split(d.Value, "*")
		for _, o := range parent.patterns[d.Key] {
			if o.value == d.Value {
				return b.errorf(field, "duplicate descriptor composite key %q", path)
			}
		}
		parent.patterns[d.Key] = append(parent.patterns[d.Key], child)
	} else {
		e := entry{d.Key, d.Value}
		if _, dup := parent.exact[e]; dup {
			return b.errorf(field, "duplicate descriptor composite key %q", path)
		}
		parent.exact[e] = child
	}
	if d.RateLimit != nil {
		l, err := b.limit(d.RateLimit, configerr.Join(field, "rate_limit"), path)
		if err != nil {
			return err
		}
		l.Shadow, l.Quota, l.DetailedMetric = d.ShadowMode, d.QuotaMode, d.DetailedMetric
		child.limit = l
		b.all = append(b.all, l)
	}
	return b.descriptors(d.Descriptors, configerr.Join(field, "descriptors"), path, child)
}

// limit checks a rate_limit, at field in the file, and builds its Limit at
// path.
func (b *domainBuilder) limit(rl *RateLimit, field, path string) (*Limit, error) {
	l := &Limit{Domain: b.domain, Path: path, Name: rl.Name, Replaces: rl.Replaces, Unlimited: rl.Unlimited, UnitMultiplier: 1}
	for i, r := range rl.Replaces {
		f := configerr.Join(configerr.Index(configerr.Join(field, "replaces"), i), "name")
		if r == "" {
			return nil, b.errorf(f, "should not have an empty replaces entry")
		}
		if r == rl.Name {
			return nil, b.errorf(f, "replaces should not contain name of same descriptor (%q)", r)
		}
	}
	u, validUnit := units[strings.ToLower(rl.Unit)]
	if rl.Unlimited {
		if validUnit {
			return nil, b.errorf(configerr.Join(field, "unit"), "should not specify rate limit unit when unlimited")
		}
		if rl.Algorithm != "" || rl.Burst != 0 {
			return nil, b.errorf(field, "an unlimited rate_limit takes no algorithm or burst")
		}
		if rl.SettleOnStreamDone {
			return nil, b.errorf(configerr.Join(field, "settle_on_stream_done"), "an unlimited rate_limit spends nothing to settle")
		}
		if rl.Calendar || rl.Timezone != "" {
			return nil, b.errorf(configerr.Join(field, "calendar"), "an unlimited rate_limit counts in no window")
		}
		l.policy, l.metric = l.Path, strings.TrimPrefix(l.Path, b.domain+".")
		return l, nil
	}
	if !validUnit {
		if rl.Unit == "" {
			return nil, b.errorf(configerr.Join(field, "unit"), "required: want one of second, minute, hour, day, week, month, year")
		}
		return nil, b.errorf(configerr.Join(field, "unit"), "invalid rate limit unit %q: want one of second, minute, hour, day, week, month, year", rl.Unit)
	}
	if rl.RequestsPerUnit == nil {
		return nil, b.errorf(configerr.Join(field, "requests_per_unit"), "required")
	}
	if rl.UnitMultiplier != nil {
		if *rl.UnitMultiplier == 0 {
			return nil, b.errorf(configerr.Join(field, "unit_multiplier"), "must be at least 1")
		}
		l.UnitMultiplier = *rl.UnitMultiplier
	}
	l.Unit, l.RequestsPerUnit = u.unit, *rl.RequestsPerUnit
	if max := uint64(algo.MaxWindow / u.d); uint64(l.UnitMultiplier) > max {
		return nil, b.errorf(configerr.Join(field, "unit_multiplier"), "a window of %d %ss is longer than %s", l.UnitMultiplier, strings.ToLower(rl.Unit), algo.MaxWindow)
	}
	l.Window = u.d * time.Duration(l.UnitMultiplier)
	l.Algorithm, l.Burst, l.Settle = rl.Algorithm, rl.Burst, rl.SettleOnStreamDone
	if l.Algorithm == "" {
		l.Algorithm = algo.FixedWindowName
	}
	if !rl.Calendar && rl.Timezone != "" {
		return nil, b.errorf(configerr.Join(field, "timezone"), "only a calendar rate_limit takes a time zone; add calendar: true")
	}
	if l.Settle && l.Algorithm == algo.SlidingLogName {
		// A refund of a sliding log takes back the entries of the exact
		// instant of the spend, which the request path's answer does not
		// know to the nanosecond (it reads the clock before deciding).
		return nil, b.errorf(configerr.Join(field, "settle_on_stream_done"), "a sliding_log cannot be settled on stream done (its refund needs the exact instant of the spend): use sliding_counter, which refunds within its window")
	}
	l.proto = &rlspb.RateLimitResponse_RateLimit{Name: rl.Name, RequestsPerUnit: l.RequestsPerUnit, Unit: l.Unit}
	if rl.UnitMultiplier != nil {
		l.proto.UnitMultiplier = wrapperspb.UInt32(l.UnitMultiplier)
	}
	l.policy = l.Name
	if l.policy == "" {
		l.policy = l.Path
	}
	l.metric = strings.TrimPrefix(l.Path, b.domain+".")
	if l.RequestsPerUnit == 0 {
		// Allows nothing (a block list entry): no algorithm takes a
		// limit of 0, and none is needed.
		if rl.Burst != 0 {
			return nil, b.errorf(configerr.Join(field, "burst"), "a rate_limit of 0 requests takes no burst")
		}
		if !l.Algorithm.Known() {
			return nil, b.errorf(configerr.Join(field, "algorithm"), "must be one of %v, got %q", algo.Names, l.Algorithm)
		}
		return l, nil
	}
	if l.Algorithm == algo.ConcurrencyName {
		// Envoy's calls share no handle with the request's end: no slot
		// taken here could be given back.
		return nil, b.errorf(configerr.Join(field, "algorithm"), "must be one of %v, got %q: the rate-limit service cannot hold a slot until a request ends", algo.Names, l.Algorithm)
	}
	p := algo.Params{Limit: int64(l.RequestsPerUnit), Window: l.Window, Burst: l.Burst}
	if cal, err := b.calendar(rl, field); err != nil {
		return nil, err
	} else if !cal.IsZero() {
		p.Window, p.Calendar = 0, cal
	}
	a, err := algo.New(l.Algorithm, p)
	if err != nil {
		var pe *algo.ParamError
		switch {
		case errors.As(err, &pe):
			// The file's names for the parameters.
			f := map[string]string{"limit": "requests_per_unit", "window": "unit"}[pe.Field]
			if f == "" {
				f = pe.Field
			}
			return nil, &configerr.Error{File: b.file, Field: configerr.Join(field, f), Reason: pe.Reason, Err: err}
		default:
			return nil, &configerr.Error{File: b.file, Field: configerr.Join(field, "algorithm"), Reason: fmt.Sprintf("must be one of %v, got %q", algo.Names, l.Algorithm), Err: err}
		}
	}
	l.limit = engine.Limit{Namespace: l.Path, Algorithm: a}
	return l, nil
}

// calendar returns the calendar of rl, a rate_limit at field: the zero
// Calendar unless rl.Calendar.
func (b *domainBuilder) calendar(rl *RateLimit, field string) (algo.Calendar, error) {
	if !rl.Calendar {
		return algo.Calendar{}, nil
	}
	unit := algo.Unit(strings.ToLower(rl.Unit))
	switch {
	case !slices.Contains(algo.Units, unit):
		return algo.Calendar{}, b.errorf(configerr.Join(field, "calendar"), "a calendar's unit is day, week, month or year, not %s", rl.Unit)
	case rl.UnitMultiplier != nil && *rl.UnitMultiplier != 1:
		return algo.Calendar{}, b.errorf(configerr.Join(field, "calendar"), "a calendar counts one %s at a time; unit_multiplier %d is not taken", unit, *rl.UnitMultiplier)
	}
	switch rl.Algorithm {
	case "", algo.FixedWindowName, algo.SlidingCounterName:
	default:
		return algo.Calendar{}, b.errorf(configerr.Join(field, "calendar"), "only fixed_window and sliding_counter follow a calendar, not %s", rl.Algorithm)
	}
	loc := time.UTC
	if rl.Timezone != "" {
		var err error
		loc, err = time.LoadLocation(rl.Timezone)
		if err != nil || rl.Timezone == "Local" {
			return algo.Calendar{}, b.errorf(configerr.Join(field, "timezone"), "unknown time zone %q: want an IANA name such as Europe/Berlin or America/New_York", rl.Timezone)
		}
	}
	return algo.Calendar{Unit: unit, Location: loc}, nil
}
