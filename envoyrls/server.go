package envoyrls

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluice-go/sluice/algo"
	"github.com/sluice-go/sluice/engine"
)

// Headers says which rate-limit headers a response asks Envoy to add.
type Headers string

// The header sets.
const (
	// HeadersBoth, the default, adds the IETF draft fields and the
	// X-RateLimit-* ones.
	HeadersBoth Headers = "both"
	// HeadersIETF adds RateLimit-Policy and RateLimit (and Retry-After to
	// a denial).
	HeadersIETF Headers = "ietf"
	// HeadersX adds X-RateLimit-Limit, X-RateLimit-Remaining and
	// X-RateLimit-Reset (and Retry-After to a denial).
	HeadersX Headers = "x-ratelimit"
	// HeadersNone adds none.
	HeadersNone Headers = "none"
	// HeadersEnvoy adds what envoyproxy/ratelimit adds with
	// LIMIT_RESPONSE_HEADERS_ENABLED: the descriptor's requests_per_unit,
	// its limit_remaining and the seconds until its window resets, under
	// Options.EnvoyHeaderNames (RateLimit-Limit, RateLimit-Remaining and
	// RateLimit-Reset by default), so that a client sees the headers it
	// saw before the move.
	HeadersEnvoy Headers = "envoy"
)

// DefaultEnvoyHeaderNames are envoyproxy/ratelimit's LIMIT_LIMIT_HEADER,
// LIMIT_REMAINING_HEADER and LIMIT_RESET_HEADER defaults.
var DefaultEnvoyHeaderNames = [3]string{"RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset"}

// ParseHeaders reads a Headers by its name; empty is HeadersBoth.
func ParseHeaders(s string) (Headers, error) {
	switch h := Headers(s); h {
	case "":
		return HeadersBoth, nil
	case HeadersBoth, HeadersIETF, HeadersX, HeadersNone, HeadersEnvoy:
		return h, nil
	}
	return "", fmt.Errorf("want %s, %s, %s, %s or %s, got %q", HeadersBoth, HeadersIETF, HeadersX, HeadersEnvoy, HeadersNone, s)
}

// Options configure a Server. Engine is required; the zero value of every
// other field is its default.
type Options struct {
	// Engine decides and keeps the budgets. Required.
	Engine *engine.Engine
	// Metrics, if not nil, counts each decision.
	Metrics *Metrics
	// Headers chooses the rate-limit headers of each response; empty means
	// HeadersBoth. They describe the most restrictive limited descriptor:
	// the denying one with the longest wait, or else the one with the
	// least remaining.
	Headers Headers
	// QuotaMode puts every limit in quota mode: past its quota a limit
	// answers OK and is named in the dynamic metadata, never refusing the
	// request (envoyproxy/ratelimit's QUOTA_MODE).
	QuotaMode bool
	// DynamicMetadata returns, with each response, the request as
	// envoyproxy/ratelimit's RESPONSE_DYNAMIC_METADATA does, for Envoy's
	// filters and access logs: the domain, each descriptor's entries (as
	// key=value), limit and hits_addend, the request's hits_addend, the
	// quota_mode limits it went past (quotaModeViolations: the
	// descriptors' indices) and whether any limit is in quota mode.
	DynamicMetadata bool
	// EnvoyHeaderNames are HeadersEnvoy's names of the limit, remaining
	// and reset headers; an empty one is DefaultEnvoyHeaderNames'.
	EnvoyHeaderNames [3]string
	// ShadowHeaders makes shadow_mode limits take part in the headers;
	// by default a shadow_mode limit is invisible to the caller.
	ShadowHeaders bool
	// ShadowMode puts every limit in shadow mode: decided and counted, the
	// request always answered OK (envoyproxy/ratelimit's SHADOW_MODE).
	ShadowMode bool
	// Logger receives store errors, at most one line a second; nil means
	// slog.Default().
	Logger *slog.Logger
	// NearLimitRatio is the share of a limit past which allowed hits are
	// counted as near it (envoyproxy/ratelimit's NEAR_LIMIT_RATIO): a
	// value in (0, 1]; 0 means the default, NearLimitRatio's 0.8. As
	// there, the threshold is floor(requests_per_unit × ratio) in 32-bit
	// floating point.
	NearLimitRatio float64
}

// Server is a RateLimitService server over a Config and an engine. Make one
// with NewServer; it is safe for concurrent use.
type Server struct {
	rlspb.UnimplementedRateLimitServiceServer

	cfg  atomic.Pointer[Config]
	opts Options
	eng  *engine.Engine
	log  *slog.Logger

	nearRatio float32 // Options.NearLimitRatio, as envoyproxy/ratelimit holds it

	overrides sync.Map // overrideKey → *Limit, the limits requests bring
	nOverride atomic.Int64
	lastLog   atomic.Int64 // unix ns of the last store error logged
}

// maxOverrides bounds the request-borne limits a Server keeps built.
const maxOverrides = 4096

// NewServer returns a Server answering under cfg. A nil cfg is a server
// waiting for its first configuration (from a control plane, say): until
// SetConfig gives one, every call is an Unavailable error, as
// envoyproxy/ratelimit answers before it has loaded one.
func NewServer(cfg *Config, opts Options) (*Server, error) {
	if opts.Engine == nil {
		return nil, errors.New("sluice/envoyrls: NewServer needs an engine")
	}
	h, err := ParseHeaders(string(opts.Headers))
	if err != nil {
		return nil, fmt.Errorf("sluice/envoyrls: Options.Headers: %w", err)
	}
	opts.Headers = h
	switch r := opts.NearLimitRatio; {
	case r == 0:
		opts.NearLimitRatio = NearLimitRatio
	case !(r > 0 && r <= 1):
		return nil, fmt.Errorf("sluice/envoyrls: Options.NearLimitRatio %v: want a share in (0, 1]", r)
	}
	s := &Server{opts: opts, eng: opts.Engine, log: opts.Logger, nearRatio: float32(opts.NearLimitRatio)}
	if s.log == nil {
		s.log = slog.Default()
	}
	s.SetConfig(cfg)
	return s, nil
}

// SetConfig puts cfg in force: requests in flight finish under the
// configuration they took, later ones see cfg. A limit that keeps its path
// keeps what callers spent under it.
func (s *Server) SetConfig(cfg *Config) {
	s.opts.Metrics.InitConfig(cfg)
	s.cfg.Store(cfg)
}

// Config returns the configuration in force.
func (s *Server) Config() *Config { return s.cfg.Load() }

// item is one descriptor of a request being decided.
type item struct {
	limit   *Limit
	key     string
	metric  string
	cost    int64
	d       algo.Decision
	denied  bool // over its limit
	shadow  bool // never denies the request
	quota   bool // quota_mode, its own or QuotaMode's: never denies, OK past its quota
	spent   bool
	checkOK bool // hits_addend 0: checked, never denied
}

// ShouldRateLimit decides a request: see the package doc. A request with
// no domain or no descriptor is an InvalidArgument error; a store failure
// is an Unavailable error, which Envoy answers by its failure_mode_deny
// setting (by default the request passes).
func (s *Server) ShouldRateLimit(ctx context.Context, req *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error) {
	if req.GetDomain() == "" {
		return nil, status.Error(codes.InvalidArgument, "rate limit domain must not be empty")
	}
	if len(req.GetDescriptors()) == 0 {
		return nil, status.Error(codes.InvalidArgument, "rate limit descriptor list must not be empty")
	}
	cfg := s.cfg.Load()
	if cfg == nil {
		return nil, status.Error(codes.Unavailable, "no rate limit configuration loaded")
	}
	domain := req.GetDomain()
	known := cfg.Domain(domain) != nil
	if !known {
		if m := s.opts.Metrics; m != nil {
			m.unknownDomain.Add(1)
		}
	}
	descs := req.GetDescriptors()
	sc := getScratch(len(descs))
	defer sc.put()
	items := sc.items
	for i, desc := range descs {
		it := &items[i]
		it.cost = max(1, int64(req.GetHitsAddend()))
		if h := desc.GetHitsAddend(); h != nil {
			it.cost = int64(min(h.GetValue(), math.MaxInt64))
		}
		if desc.GetIsNegativeHits() || !known {
			continue // spending never refunds: a negative hit changes nothing
		}
		if desc.GetLimit() != nil {
			it.limit, it.key, it.metric = s.override(domain, desc)
		} else {
			m := cfg.Match(domain, desc.GetEntries())
			it.limit, it.key, it.metric = m.Limit, m.Key, m.Metric
		}
		if it.limit != nil && len(it.limit.Replaces) > 0 {
			sc.replacing = true
		}
	}
	if sc.replacing {
		sc.dropReplaced(items)
	}

	// Sort the descriptors: those decided without the engine, and the
	// candidates for one ApplyAll.
	now := s.eng.Clock().Now()
	active := sc.active[:0]
	for i := range items {
		it := &items[i]
		l := it.limit
		if l == nil || l.Unlimited {
			continue
		}
		it.shadow = l.Shadow || s.opts.ShadowMode
		it.quota = l.Quota || s.opts.QuotaMode
		switch {
		case l.RequestsPerUnit == 0:
			w := int64(l.Window)
			it.d = algo.Decision{RetryAfter: time.Duration(w - now%w), Reset: time.Duration(w - now%w)}
			it.denied = true
		case it.cost == 0, it.cost > l.Capacity():
			d, err := s.eng.Peek(l.limit, it.key, 1)
			if err != nil {
				return nil, s.storeError(err)
			}
			if d.Allowed {
				d.Remaining++
			}
			it.d = d
			if it.cost == 0 {
				it.checkOK = true
			} else {
				it.denied = true
				it.d.Allowed, it.d.RetryAfter = false, d.Reset
			}
		default:
			active = append(active, i)
		}
	}
	// A denial of a shadow_mode or quota_mode limit never refuses the
	// request, as in envoyproxy/ratelimit (its service tests: quota mode
	// alone, every quota limit over, answers OK); the others refuse it.
	fatal := func() bool {
		for i := range items {
			if it := &items[i]; it.denied && !it.shadow && !it.quota {
				return true
			}
		}
		return false
	}

	sc.active = active
	over := fatal()
	reqs := sc.reqs[:0]
	for !over && len(active) > 0 {
		reqs = reqs[:0]
		for _, i := range active {
			reqs = append(reqs, engine.Request{Limit: items[i].limit.limit, Key: items[i].key, Cost: items[i].cost})
		}
		sc.reqs = reqs
		ds, all, err := s.eng.ApplyAll(reqs)
		if err != nil {
			return nil, s.storeError(err)
		}
		for j, i := range active {
			items[i].d = ds[j]
		}
		if all {
			for _, i := range active {
				items[i].spent = true
			}
			break
		}
		// Denials that do not deny the request (shadow_mode, quota_mode
		// short of all) leave the others to be decided again without
		// them: the request passes and spends where it is allowed.
		rest := active[:0]
		for j, i := range active {
			if ds[j].Allowed {
				rest = append(rest, i)
			} else {
				items[i].denied = true
			}
		}
		active = rest
		over = fatal()
	}
	if over {
		// Nothing was spent; the decisions of the others say what they
		// would have answered. Those not yet decided are peeked.
		for _, i := range active {
			it := &items[i]
			if it.d.Limit == 0 {
				d, err := s.eng.Peek(it.limit.limit, it.key, it.cost)
				if err != nil {
					return nil, s.storeError(err)
				}
				it.d = d
				it.denied = !d.Allowed
			}
		}
	}
	resp := s.answer(domain, items, over)
	if s.opts.DynamicMetadata {
		resp.DynamicMetadata = requestMetadata(req, items)
	}
	return resp, nil
}

// respBlock holds a response of up to blockStatuses descriptors, their
// statuses, durations and headers in one allocation.
type respBlock struct {
	resp    rlspb.RateLimitResponse
	ptrs    [blockStatuses]*rlspb.RateLimitResponse_DescriptorStatus
	sts     [blockStatuses]rlspb.RateLimitResponse_DescriptorStatus
	durs    [blockStatuses]durationpb.Duration
	hdrs    [maxHeaders]corev3.HeaderValue
	hdrPtrs [maxHeaders]*corev3.HeaderValue
}

const (
	blockStatuses = 4
	maxHeaders    = 6 // RateLimit-Policy, RateLimit, X-RateLimit-* (3), Retry-After
)

// answer builds the response and counts the decisions.
func (s *Server) answer(domain string, items []item, over bool) *rlspb.RateLimitResponse {
	var blk *respBlock
	var resp *rlspb.RateLimitResponse
	if len(items) <= blockStatuses {
		blk = new(respBlock)
		resp = &blk.resp
		resp.Statuses = blk.ptrs[:len(items):len(items)]
	} else {
		resp = &rlspb.RateLimitResponse{Statuses: make([]*rlspb.RateLimitResponse_DescriptorStatus, len(items))}
	}
	resp.OverallCode = rlspb.RateLimitResponse_OK
	if over {
		resp.OverallCode = rlspb.RateLimitResponse_OVER_LIMIT
	}
	m := s.opts.Metrics
	pick := -1
	for i := range items {
		it := &items[i]
		l := it.limit
		var st *rlspb.RateLimitResponse_DescriptorStatus
		if blk != nil {
			st = &blk.sts[i]
		} else {
			st = new(rlspb.RateLimitResponse_DescriptorStatus)
		}
		st.Code = rlspb.RateLimitResponse_OK
		resp.Statuses[i] = st
		if l == nil {
			continue
		}
		var c *counters
		if m != nil {
			c = m.of(domain, it.metric, l.metric)
			c.hits.Add(uint64(it.cost))
		}
		if l.Unlimited {
			st.LimitRemaining = math.MaxUint32
			if c != nil {
				c.within.Add(uint64(it.cost))
			}
			continue
		}
		st.CurrentLimit = l.proto
		// As envoyproxy/ratelimit answers: an OVER_LIMIT descriptor (a
		// shadow_mode one too) has 0 remaining, whatever the request's
		// cost left; one the rejected request did not spend has what it
		// had, its decision's Remaining being after the cost.
		remaining := it.d.Remaining
		switch {
		case it.denied:
			remaining = 0
		case over && !it.spent && !it.checkOK:
			remaining = min(remaining+it.cost, l.Capacity())
		}
		st.LimitRemaining = uint32(min(max(remaining, 0), math.MaxUint32))
		wait := it.d.Reset
		if it.denied {
			wait = it.d.RetryAfter
			// A quota_mode limit past its quota is OK, with 0 remaining,
			// as envoyproxy/ratelimit answers it (the violation is in the
			// dynamic metadata), even in a request another limit refuses.
			if !it.shadow && !it.quota {
				st.Code = rlspb.RateLimitResponse_OVER_LIMIT
			}
		}
		if blk != nil {
			blk.durs[i].Seconds, blk.durs[i].Nanos = int64(wait/time.Second), int32(wait%time.Second)
			st.DurationUntilReset = &blk.durs[i]
		} else {
			st.DurationUntilReset = durationpb.New(wait)
		}
		if c != nil {
			switch {
			case it.denied:
				c.over.Add(uint64(it.cost))
				if it.shadow {
					c.shadow.Add(uint64(it.cost))
				}
			case it.spent || it.checkOK:
				c.within.Add(uint64(it.cost))
				capacity := l.Capacity()
				used := capacity - it.d.Remaining
				near := int64(math.Floor(float64(float32(capacity) * s.nearRatio)))
				if used > near {
					c.near.Add(uint64(min(it.cost, used-near)))
				}
			}
		}
		if it.shadow && !s.opts.ShadowHeaders {
			continue
		}
		if pick < 0 || s.moreRestrictive(it, &items[pick], over) {
			pick = i
		}
	}
	if m != nil && s.cfg.Load().Domain(domain) != nil {
		// A domain no file configures is counted once, in
		// unknown_domain_total: its name is the client's.
		c := m.of(domain, "", "")
		if over {
			c.requestsOver.Add(1)
		} else {
			c.requestsOK.Add(1)
		}
	}
	switch {
	case pick < 0 || s.opts.Headers == HeadersNone:
	case s.opts.Headers == HeadersEnvoy:
		resp.ResponseHeadersToAdd = s.envoyHeaders(&items[pick], resp.Statuses[pick], blk)
	default:
		resp.ResponseHeadersToAdd = s.headers(&items[pick], resp.Statuses[pick], over, blk)
	}
	return resp
}

// headerSlots returns room for n headers: blk's, or new.
func headerSlots(blk *respBlock, n int) ([]corev3.HeaderValue, []*corev3.HeaderValue) {
	if blk != nil && n <= maxHeaders {
		return blk.hdrs[:0:n], blk.hdrPtrs[:0:n]
	}
	return make([]corev3.HeaderValue, 0, n), make([]*corev3.HeaderValue, 0, n)
}

// moreRestrictive reports whether a describes the request better than b in
// the headers: in a denied request the denying limit with the longest wait,
// else the one with the least remaining.
func (s *Server) moreRestrictive(a, b *item, over bool) bool {
	da, db := a.denied && !a.shadow, b.denied && !b.shadow
	if over && da != db {
		return da
	}
	if over && da {
		return a.d.RetryAfter > b.d.RetryAfter
	}
	return a.d.Remaining < b.d.Remaining
}

// headers renders the rate-limit fields of the chosen descriptor, whose
// status is st. X-RateLimit-Remaining is st's limit_remaining, as Envoy's
// own x-ratelimit-remaining is (0 on an OVER_LIMIT status); the IETF
// RateLimit field's r keeps its meaning, what may be spent now.
func (s *Server) headers(it *item, st *rlspb.RateLimitResponse_DescriptorStatus, over bool, blk *respBlock) []*corev3.HeaderValue {
	l := it.limit
	f := l.headerFields()
	ietf := s.opts.Headers == HeadersBoth || s.opts.Headers == HeadersIETF
	x := s.opts.Headers == HeadersBoth || s.opts.Headers == HeadersX
	wait := it.d.Reset
	if it.denied {
		wait = it.d.RetryAfter
	}
	reset := ceilSeconds(wait)
	// The per-decision values in one buffer, one string, and every header
	// in one array: a handful of allocations, however many headers.
	var buf [128]byte
	b := buf[:0]
	var ends [5]int
	b = strconv.AppendUint(b, uint64(st.LimitRemaining), 10)
	ends[0] = len(b)
	b = strconv.AppendInt(b, reset, 10)
	ends[1] = len(b)
	if ietf {
		// The quota policy as httplimit states it (algo.Quota): a
		// bucket's window is the time it refills from empty, and t is
		// never past it.
		t := reset
		if !it.denied {
			t = ceilSeconds(min(it.d.Reset, f.window))
		}
		b = append(b, f.sfName...)
		b = append(b, ";r="...)
		b = strconv.AppendInt(b, max(it.d.Remaining, 0), 10)
		b = append(b, ";t="...)
		b = strconv.AppendInt(b, t, 10)
	}
	ends[2] = len(b)
	if over {
		b = strconv.AppendInt(b, max(ceilSeconds(it.d.RetryAfter), 1), 10)
	}
	ends[3] = len(b)
	v := string(b)
	remaining, resetS, rl, retry := v[:ends[0]], v[ends[0]:ends[1]], v[ends[1]:ends[2]], v[ends[2]:ends[3]]

	vals, hs := headerSlots(blk, maxHeaders)
	add := func(k, val string) {
		vals = append(vals, corev3.HeaderValue{Key: k, Value: val})
		hs = append(hs, &vals[len(vals)-1])
	}
	if ietf {
		add("RateLimit-Policy", f.policy)
		add("RateLimit", rl)
	}
	if x {
		add("X-RateLimit-Limit", f.capacity)
		add("X-RateLimit-Remaining", remaining)
		add("X-RateLimit-Reset", resetS)
	}
	if over {
		add("Retry-After", retry)
	}
	return hs
}

// requestMetadata is DynamicMetadata's struct for req, answered as items
// say.
func requestMetadata(req *rlspb.RateLimitRequest, items []item) *structpb.Struct {
	descs := make([]*structpb.Value, 0, len(req.GetDescriptors()))
	for _, d := range req.GetDescriptors() {
		entries := make([]*structpb.Value, 0, len(d.GetEntries()))
		for _, e := range d.GetEntries() {
			entries = append(entries, structpb.NewStringValue(e.GetKey()+"="+e.GetValue()))
		}
		f := map[string]*structpb.Value{"entries": structpb.NewListValue(&structpb.ListValue{Values: entries})}
		if d.GetLimit() != nil {
			f["limit"] = structpb.NewStringValue(d.GetLimit().String())
		}
		if h := d.GetHitsAddend(); h != nil {
			f["hitsAddend"] = structpb.NewNumberValue(float64(h.GetValue()))
		}
		descs = append(descs, structpb.NewStructValue(&structpb.Struct{Fields: f}))
	}
	fields := map[string]*structpb.Value{
		"domain":      structpb.NewStringValue(req.GetDomain()),
		"descriptors": structpb.NewListValue(&structpb.ListValue{Values: descs}),
	}
	if h := req.GetHitsAddend(); h != 0 {
		fields["hitsAddend"] = structpb.NewNumberValue(float64(h))
	}
	var violations []*structpb.Value
	quota := false
	for i := range items {
		if l := items[i].limit; l != nil && l.Quota {
			quota = true // the limits' own flag, as there
		}
		if items[i].quota && items[i].denied {
			violations = append(violations, structpb.NewNumberValue(float64(i)))
		}
	}
	if len(violations) > 0 {
		fields["quotaModeViolations"] = structpb.NewListValue(&structpb.ListValue{Values: violations})
	}
	fields["quotaModeEnabled"] = structpb.NewBoolValue(quota)
	return &structpb.Struct{Fields: fields}
}

// envoyHeaders renders envoyproxy/ratelimit's own headers of the chosen
// descriptor (HeadersEnvoy): its requests_per_unit, the limit_remaining of
// its status, and the seconds until its window resets.
func (s *Server) envoyHeaders(it *item, st *rlspb.RateLimitResponse_DescriptorStatus, blk *respBlock) []*corev3.HeaderValue {
	names := s.opts.EnvoyHeaderNames
	for i, n := range names {
		if n == "" {
			names[i] = DefaultEnvoyHeaderNames[i]
		}
	}
	vals, hs := headerSlots(blk, 3)
	vals = append(vals,
		corev3.HeaderValue{Key: names[0], Value: strconv.FormatUint(uint64(it.limit.RequestsPerUnit), 10)},
		corev3.HeaderValue{Key: names[1], Value: strconv.FormatUint(uint64(st.LimitRemaining), 10)},
		corev3.HeaderValue{Key: names[2], Value: strconv.FormatInt(ceilSeconds(it.d.Reset), 10)},
	)
	return append(hs, &vals[0], &vals[1], &vals[2])
}

// limitFields are the parts of a limit's rate-limit headers that do not
// change from one decision to the next.
type limitFields struct {
	sfName   string        // the policy's name as a structured-field string
	policy   string        // the RateLimit-Policy value
	capacity string        // X-RateLimit-Limit
	window   time.Duration // the quota policy's window (algo.Quota)
}

// headerFields returns l's limitFields, worked out on first use.
func (l *Limit) headerFields() *limitFields {
	if f := l.fields.Load(); f != nil {
		return f
	}
	window := l.Window
	if l.limit.Algorithm != nil {
		_, window = algo.Quota(l.limit.Algorithm)
	}
	name := sfString(l.policy)
	capacity := strconv.FormatInt(l.Capacity(), 10)
	f := &limitFields{sfName: name, capacity: capacity, window: window,
		policy: name + ";q=" + capacity + ";w=" + strconv.FormatInt(ceilSeconds(window), 10)}
	l.fields.Store(f)
	return f
}

// ceilSeconds rounds d up to whole seconds.
func ceilSeconds(d time.Duration) int64 {
	return int64((d + time.Second - 1) / time.Second)
}

// sfString renders s as a structured-field string (RFC 8941): quoted, with
// characters outside printable ASCII replaced by "_".
func sfString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < 0x20 || c > 0x7e:
			b.WriteByte('_')
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// storeError logs (at most once a second) and counts a failed decision and
// returns the gRPC error that answers it.
func (s *Server) storeError(err error) error {
	if m := s.opts.Metrics; m != nil {
		m.storeErrors.Add(1)
	}
	now := time.Now().UnixNano()
	if last := s.lastLog.Load(); now-last >= int64(time.Second) && s.lastLog.CompareAndSwap(last, now) {
		s.log.Error("envoyrls: the store failed; answering UNAVAILABLE", "err", err)
	}
	return status.Errorf(codes.Unavailable, "rate limit store: %v", err)
}

// overrideKey identifies a limit a request brings.
type overrideKey struct {
	domain string
	rpu    uint32
	unit   rlspb.RateLimitResponse_RateLimit_Unit
	mult   uint32
}

// override returns the limit a descriptor's own limit field sets (Envoy's
// dynamic limit override), and the descriptor's key under it. Its budget
// is a fixed window of its own, never a configured limit's, and it is
// never in shadow mode, as in envoyproxy/ratelimit.
func (s *Server) override(domain string, desc *rlv3.RateLimitDescriptor) (*Limit, string, string) {
	o := desc.GetLimit()
	k := overrideKey{domain: domain, rpu: o.GetRequestsPerUnit(), unit: rlspb.RateLimitResponse_RateLimit_Unit(o.GetUnit()), mult: max(1, o.GetUnitMultiplier().GetValue())}
	var key []byte
	for _, e := range desc.GetEntries() {
		key = appendField(key, e.GetKey())
		key = appendField(key, e.GetValue())
	}
	// The limit and the values are the client's: one label for them all.
	metric := overrideMetric
	if l, ok := s.overrides.Load(k); ok {
		return l.(*Limit), string(key), metric
	}
	unitLen := unitLength(k.unit)
	l := &Limit{Domain: domain, Path: "override:" + domain, RequestsPerUnit: k.rpu, Unit: k.unit, UnitMultiplier: k.mult, Algorithm: algo.FixedWindowName}
	l.metric = metric
	l.proto = &rlspb.RateLimitResponse_RateLimit{RequestsPerUnit: k.rpu, Unit: k.unit}
	if o.GetUnitMultiplier() != nil {
		l.proto.UnitMultiplier = wrapperspb.UInt32(k.mult)
	}
	if unitLen == 0 || uint64(k.mult) > uint64(algo.MaxWindow/unitLen) {
		// An unknown unit, or a window too long: the override cannot be
		// enforced and is ignored.
		return nil, "", ""
	}
	l.Window = unitLen * time.Duration(k.mult)
	l.policy = "override"
	// The namespace holds the rate, so two overrides of one descriptor
	// with different rates never share a record.
	l.Path = fmt.Sprintf("override:%s:%d/%d*%d", domain, k.rpu, k.unit, k.mult)
	if k.rpu > 0 {
		l.limit = engine.Limit{Namespace: l.Path, Algorithm: algo.MustNew(algo.FixedWindowName, algo.Params{Limit: int64(k.rpu), Window: l.Window})}
	}
	if s.nOverride.Add(1) <= maxOverrides {
		s.overrides.Store(k, l)
	}
	return l, string(key), metric
}

// scratch is one call's working room, reused across calls: nothing in it
// outlives the call (the response holds none of it).
type scratch struct {
	items     []item
	reqs      []engine.Request
	active    []int
	drop      []bool
	replacing bool // some matched limit replaces others
}

var scratchPool = sync.Pool{New: func() any { return new(scratch) }}

// getScratch returns a scratch with n zero items.
func getScratch(n int) *scratch {
	sc := scratchPool.Get().(*scratch)
	if cap(sc.items) < n {
		sc.items = make([]item, n)
	}
	sc.items = sc.items[:n]
	return sc
}

// put clears what the call left (limits and keys it must not keep alive)
// and returns sc to the pool.
func (sc *scratch) put() {
	clear(sc.items)
	clear(sc.reqs[:cap(sc.reqs)])
	sc.reqs, sc.active, sc.replacing = sc.reqs[:0], sc.active[:0], false
	scratchPool.Put(sc)
}

// dropReplaced unsets the limits that a matched limit's replaces names:
// every name any of them replaces, found before any is unset.
func (sc *scratch) dropReplaced(items []item) {
	drop := sc.drop[:0]
	for i := range items {
		l := items[i].limit
		replaced := false
		if l != nil && l.Name != "" {
			for j := range items {
				if o := items[j].limit; o != nil && slices.Contains(o.Replaces, l.Name) {
					replaced = true
					break
				}
			}
		}
		drop = append(drop, replaced)
	}
	for i, d := range drop {
		if d {
			items[i].limit = nil
		}
	}
	sc.drop = drop
}
