package envoyrls

import (
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluice-go/sluice/algo"
	"github.com/sluice-go/sluice/engine"
	"github.com/sluice-go/sluice/internal/configerr"
	"github.com/sluice-go/sluice/internal/ratefield"
)

// The units of rate_limit.unit, by their configuration names (matched
// without regard to case), and their lengths.
var units = map[string]struct {
	unit rlspb.RateLimitResponse_RateLimit_Unit
	d    time.Duration
}{
	"second": {rlspb.RateLimitResponse_RateLimit_SECOND, time.Second},
	"minute": {rlspb.RateLimitResponse_RateLimit_MINUTE, time.Minute},
	"hour":   {rlspb.RateLimitResponse_RateLimit_HOUR, time.Hour},
	"day":    {rlspb.RateLimitResponse_RateLimit_DAY, 24 * time.Hour},
	"week":   {rlspb.RateLimitResponse_RateLimit_WEEK, 7 * 24 * time.Hour},
	"month":  {rlspb.RateLimitResponse_RateLimit_MONTH, 30 * 24 * time.Hour},
	"year":   {rlspb.RateLimitResponse_RateLimit_YEAR, 365 * 24 * time.Hour},
}

// unitLength returns the length of a protocol unit, or 0 for an unknown one.
func unitLength(u rlspb.RateLimitResponse_RateLimit_Unit) time.Duration {
	for _, x := range units {
		if x.unit == u {
			return x.d
		}
	}
	return 0
}

// Limit is one rate_limit of a configuration: where it sits, how much it
// allows, and how it answers. It is immutable once loaded.
type Limit struct {
	// Domain is the domain of the file the limit comes from.
	Domain string
	// Path is the limit's place in the configuration, as
	// envoyproxy/ratelimit names it in its statistics: the domain and each
	// level's key, or key_value where the level gives a value, joined by
	// dots ("messaging.message_type_marketing.to_number"). It is the
	// namespace of the limit's records, so two limits never share one.
	Path string
	// Name is rate_limit.name, the name replaces refers to; may be empty.
	Name string
	// Replaces lists the names of the limits this one replaces.
	Replaces []string
	// Unlimited reports rate_limit.unlimited: always OK, nothing counted
	// against a budget.
	Unlimited bool
	// Shadow reports shadow_mode: decided and counted, never denying.
	Shadow bool
	// Quota reports quota_mode: over its limit, it denies the request only
	// when every quota_mode descriptor of the request is over its own.
	Quota bool
	// DetailedMetric reports detailed_metric: metrics by the request's
	// values rather than by the configuration's path.
	DetailedMetric bool
	// RequestsPerUnit is rate_limit.requests_per_unit. Zero refuses every
	// request.
	RequestsPerUnit uint32
	// Unit is rate_limit.unit; UnitMultiplier is rate_limit.unit_multiplier
	// (1 when absent). The window is their product.
	Unit           rlspb.RateLimitResponse_RateLimit_Unit
	UnitMultiplier uint32
	// Window is the length of Unit times UnitMultiplier (a month is 30
	// days, a year 365).
	Window time.Duration
	// Algorithm is rate_limit.algorithm, fixed_window when absent; Burst
	// is rate_limit.burst, zero when absent.
	Algorithm algo.Name
	Burst     int64
	// Settle is rate_limit.settle_on_stream_done: the request path spends
	// an estimate and answers with a handle of it, which the call made
	// when the stream is done settles with the actual cost.
	Settle bool

	limit  engine.Limit // nil Algorithm when unlimited or RequestsPerUnit is 0
	proto  *rlspb.RateLimitResponse_RateLimit
	policy string                           // the RateLimit-Policy item name: Name, else Path
	metric string                           // the metric label: Path without the domain
	fields atomic.Pointer[ratefield.Policy] // headerFields' cache
}

// EngineLimit returns the engine limit that enforces l: its namespace is
// l.Path, its algorithm l.Algorithm with l's rate. It has no algorithm when
// l is unlimited or allows nothing (requests_per_unit 0).
func (l *Limit) EngineLimit() engine.Limit { return l.limit }

// Capacity returns what one request is measured against: the burst where
// one is set, else RequestsPerUnit.
func (l *Limit) Capacity() int64 {
	if l.Burst > 0 {
		return l.Burst
	}
	return int64(l.RequestsPerUnit)
}

// node is one descriptor of the configuration tree, or a domain's root.
type node struct {
	key, value                    string
	parts                         []string // value split on "*" when it is a pattern
	limit                         *Limit
	valueToMetric, shareThreshold bool

	exact    map[entry]*node    // children by key and value; a key-only child under an empty value
	patterns map[string][]*node // children whose value is a pattern, by key, in file order
}

type entry struct{ key, value string }

// Domain is the configuration of one domain: one file's descriptors, as
// NewDomain builds them.
type Domain struct {
	// Name is the domain.
	Name string
	// File is the file it was read from.
	File string
	root *node
	all  []*Limit
}

// Limits returns every limit of the domain, in file order.
func (d *Domain) Limits() []*Limit { return slices.Clone(d.all) }

// Config is a set of domains, as NewConfig gathers them (and
// rlsfile.Load reads them from a directory). It is immutable and safe for
// concurrent use.
type Config struct {
	domains map[string]*Domain
	files   []string
}

// NewConfig gathers domains into a Config. Two of the same name are an
// error naming both files (envoyproxy/ratelimit refuses them too).
func NewConfig(domains ...*Domain) (*Config, error) {
	c := &Config{domains: make(map[string]*Domain, len(domains))}
	for _, d := range domains {
		if o, dup := c.domains[d.Name]; dup {
			return nil, &configerr.Error{File: d.File, Field: "domain", Reason: fmt.Sprintf("duplicate domain %q: %s has it too", d.Name, o.File)}
		}
		c.domains[d.Name] = d
		c.files = append(c.files, d.File)
	}
	return c, nil
}

// Domain returns the named domain, or nil. A nil Config has no domains.
func (c *Config) Domain(name string) *Domain {
	if c == nil {
		return nil
	}
	return c.domains[name]
}

// Domains returns the domains' names, sorted.
func (c *Config) Domains() []string {
	if c == nil {
		return nil
	}
	names := make([]string, 0, len(c.domains))
	for n := range c.domains {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// Files returns the files the configuration was read from.
func (c *Config) Files() []string {
	if c == nil {
		return nil
	}
	return slices.Clone(c.files)
}

// LoadOptions change how domains are gathered into a Config: by
// NewConfigWith, and so by rlsfile.LoadWith from files and by package xds
// from a control plane.
type LoadOptions struct {
	// MergeDomains reads the files of one domain as one, as
	// envoyproxy/ratelimit's MERGE_DOMAIN_CONFIG does: their top-level
	// descriptors together, one that two files both have refused. Without
	// it two files of one domain are an error.
	MergeDomains bool
	// CalendarMonth counts every fixed_window or sliding_counter limit of
	// unit month in UTC calendar months, as envoyproxy/ratelimit's
	// USE_CALENDAR_MONTH_RATE_LIMIT does, rather than in 30 days from the
	// Unix epoch; a limit's own calendar (RateLimit.Calendar, with its
	// timezone) is kept. A month limit with a unit_multiplier above 1 is
	// then refused. Off, unit month is 30 days unless a limit says
	// calendar: true.
	CalendarMonth bool
}

// NewConfigWith is NewConfig reading the domains as o says: with
// o.MergeDomains, the domains of one name are merged, in order, into the
// first of them (which it changes), as rlsfile.LoadWith merges the files
// of one domain.
func NewConfigWith(o LoadOptions, domains ...*Domain) (*Config, error) {
	if o.CalendarMonth {
		for _, d := range domains {
			if err := d.calendarMonths(); err != nil {
				return nil, err
			}
		}
	}
	if o.MergeDomains {
		var err error
		if domains, err = mergeDomains(domains); err != nil {
			return nil, err
		}
	}
	return NewConfig(domains...)
}

// mergeDomains merges the domains of one name, in file order, into the
// first of them.
func mergeDomains(ds []*Domain) ([]*Domain, error) {
	byName := map[string]*Domain{}
	out := ds[:0:0]
	for _, d := range ds {
		first, ok := byName[d.Name]
		if !ok {
			byName[d.Name] = d
			out = append(out, d)
			continue
		}
		if err := first.merge(d); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// merge adds o's top-level descriptors to d. A descriptor both have (the
// same key and value) is an error naming both files, as
// envoyproxy/ratelimit's "duplicate descriptor composite key".
func (d *Domain) merge(o *Domain) error {
	for e, n := range o.root.exact {
		if _, dup := d.root.exact[e]; dup {
			return &configerr.Error{File: o.File, Field: "descriptors", Reason: fmt.Sprintf("duplicate descriptor %s=%s of domain %q: %s has it too (MERGE_DOMAIN_CONFIG merges the files' descriptors, not their children)", e.key, e.value, d.Name, d.File)}
		}
		d.root.exact[e] = n
	}
	for key, ns := range o.root.patterns {
		for _, n := range ns {
			if slices.ContainsFunc(d.root.patterns[key], func(m *node) bool { return m.value == n.value }) {
				return &configerr.Error{File: o.File, Field: "descriptors", Reason: fmt.Sprintf("duplicate descriptor %s=%s of domain %q: %s has it too", key, n.value, d.Name, d.File)}
			}
			d.root.patterns[key] = append(d.root.patterns[key], n)
		}
	}
	d.all = append(d.all, o.all...)
	d.File += "," + o.File
	return nil
}

// calendarMonths makes d's fixed_window and sliding_counter limits of unit
// month count UTC calendar months (LoadOptions.CalendarMonth).
func (d *Domain) calendarMonths() error {
	for _, l := range d.all {
		a := l.limit.Algorithm
		if l.Unit != rlspb.RateLimitResponse_RateLimit_MONTH || a == nil || !a.Params().Calendar.IsZero() ||
			(a.Name() != algo.FixedWindowName && a.Name() != algo.SlidingCounterName) {
			continue
		}
		if l.UnitMultiplier > 1 {
			return &configerr.Error{File: d.File, Field: "rate_limit.unit_multiplier", Reason: fmt.Sprintf("%s: a calendar month (USE_CALENDAR_MONTH_RATE_LIMIT, --calendar-month) counts one month at a time; unit_multiplier %d is not taken", l.Path, l.UnitMultiplier)}
		}
		p := a.Params()
		p.Window, p.Calendar = 0, algo.Calendar{Unit: algo.CalendarMonth, Location: time.UTC}
		c, err := algo.New(a.Name(), p)
		if err != nil {
			return err // the limit's parameters were valid, and a calendar takes them
		}
		l.limit.Algorithm = c
		l.fields.Store(nil)
	}
	return nil
}
