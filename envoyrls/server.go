package envoyrls

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strconv"
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

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/algo"
	"github.com/sluice-go/sluice/engine"
	"github.com/sluice-go/sluice/internal/logpace"
	"github.com/sluice-go/sluice/internal/ratefield"
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

	// MaxDescriptors bounds the descriptors of one request; zero means
	// DefaultMaxDescriptors. A request with more is answered
	// InvalidArgument, deciding nothing.
	MaxDescriptors int
	// MaxEntries bounds the entries of one descriptor; zero means
	// DefaultMaxEntries. A request with a descriptor of more is answered
	// InvalidArgument.
	MaxEntries int
	// MaxValueBytes bounds the bytes of the domain and of each entry's key
	// and value; zero means DefaultMaxValueBytes. A request with a longer
	// one is answered InvalidArgument. Values under it are kept in the
	// store's keys as they are up to MaxKeptValue bytes and hashed past
	// it, so it bounds the work of a request, not what a key costs.
	MaxValueBytes int
}

// The bounds on one request, when Options leave them zero. Envoy sends one
// descriptor per rate_limits action list of a route and one entry per
// action, a handful of each (envoyproxy/ratelimit's users send one to a
// few); a descriptor with more entries than the configuration's depth
// matches nothing. DefaultMaxValueBytes is over Envoy's default limit on
// a request's headers (60 KiB, max_request_headers_kb), where a
// descriptor's value comes from: Envoy answers an InvalidArgument as any
// error of the service, by its failure_mode_deny, which lets the request
// pass by default, so a bound a client could reach with a long header
// would let it past every limit.
const (
	DefaultMaxDescriptors = 64
	DefaultMaxEntries     = 32
	DefaultMaxValueBytes  = 64 << 10
)

// Server is a RateLimitService server over a Config and an engine. Make one
// with NewServer; it is safe for concurrent use.
type Server struct {
	rlspb.UnimplementedRateLimitServiceServer

	cfg  atomic.Pointer[Config]
	opts Options
	eng  *engine.Engine
	log  *slog.Logger

	nearRatio float32 // Options.NearLimitRatio, as envoyproxy/ratelimit holds it

	overrides   sync.Map // overrideKey → *Limit, the limits requests bring
	nOverride   atomic.Int64
	core        *sluice.Decider // decides each request's batch
	neverLog    logpace.Pace    // paces the lines of costs that never pass
	noHandleLog logpace.Pace    // paces the lines of requests given no settle handle
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
	for _, b := range []struct {
		name string
		v    *int
		def  int
	}{{"MaxDescriptors", &opts.MaxDescriptors, DefaultMaxDescriptors}, {"MaxEntries", &opts.MaxEntries, DefaultMaxEntries}, {"MaxValueBytes", &opts.MaxValueBytes, DefaultMaxValueBytes}} {
		switch {
		case *b.v == 0:
			*b.v = b.def
		case *b.v < 0:
			return nil, fmt.Errorf("sluice/envoyrls: Options.%s %d: want a positive bound, or 0 for the default %d", b.name, *b.v, b.def)
		}
	}
	s := &Server{opts: opts, eng: opts.Engine, log: opts.Logger, nearRatio: float32(opts.NearLimitRatio)}
	if s.log == nil {
		s.log = slog.Default()
	}
	// A store error answers UNAVAILABLE, which Envoy decides by its
	// failure_mode_deny.
	core, err := sluice.NewDecider(sluice.DeciderConfig{Name: "envoyrls", Engine: opts.Engine, OnStoreError: sluice.FailClosed, Logger: s.log})
	if err != nil {
		return nil, err
	}
	s.core = core
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
	// settle: a descriptor of the call Envoy makes when the stream is
	// done (its last entry is SettleKey's): it settles estimate, spent at
	// at, with cost, the actual cost, and is never denied; settled: it was.
	settle, settled bool
	estimate, at    int64
	// never: a cost above the limit's capacity, which no wait lets pass.
	// It is denied with no duration_until_reset and no reset or
	// Retry-After header, as serve answers such a cost 500 and the
	// library ErrCostExceedsCapacity.
	never bool
}

// ShouldRateLimit decides a request: see the package doc. A request with
// no domain or no descriptor is an InvalidArgument error; a store failure
// is an Unavailable error, which Envoy answers by its failure_mode_deny
// setting (by default the request passes).
func (s *Server) ShouldRateLimit(ctx context.Context, req *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error) {
	if err := ctx.Err(); err != nil {
		return nil, ctxError(err)
	}
	if req.GetDomain() == "" {
		return nil, status.Error(codes.InvalidArgument, "rate limit domain must not be empty")
	}
	if len(req.GetDescriptors()) == 0 {
		return nil, status.Error(codes.InvalidArgument, "rate limit descriptor list must not be empty")
	}
	if err := s.checkBounds(ctx, req); err != nil {
		return nil, err
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
		if i%ctxEvery == ctxEvery-1 && ctx.Err() != nil {
			return nil, ctxError(ctx.Err())
		}
		it := &items[i]
		it.cost = max(1, int64(req.GetHitsAddend()))
		if h := desc.GetHitsAddend(); h != nil {
			it.cost = int64(min(h.GetValue(), math.MaxInt64))
		}
		if desc.GetIsNegativeHits() {
			// A refund must name the instant of the spend it takes back,
			// which a bare negative hit does not: see settle.
			return nil, status.Errorf(codes.InvalidArgument, "rate limit descriptor %d has is_negative_hits, which sluice rls does not take: a refund needs the instant of the spend; settle the cost on stream done with a %s entry (see settle_on_stream_done)", i, SettleKey)
		}
		entries := desc.GetEntries()
		if n := len(entries); n > 0 && entries[n-1].GetKey() == SettleKey {
			var err error
			if it.estimate, it.at, err = parseSettle(entries[n-1].GetValue()); err != nil {
				return nil, status.Errorf(codes.InvalidArgument, "rate limit descriptor %d: its %s entry: %v", i, SettleKey, err)
			}
			it.settle = true
			entries = entries[:n-1]
		}
		if !known {
			continue
		}
		if desc.GetLimit() != nil {
			it.limit, it.key, it.metric = s.override(domain, desc.GetLimit(), entries)
		} else {
			m := cfg.Match(domain, entries)
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
	settles := false
	for i := range items {
		if i%ctxEvery == ctxEvery-1 && ctx.Err() != nil {
			return nil, ctxError(ctx.Err())
		}
		it := &items[i]
		l := it.limit
		if l == nil || l.Unlimited {
			continue
		}
		it.shadow = l.Shadow || s.opts.ShadowMode
		it.quota = l.Quota || s.opts.QuotaMode
		if it.settle {
			settles = true
			continue
		}
		switch {
		case l.RequestsPerUnit == 0:
			w := int64(l.Window)
			it.d = algo.Decision{RetryAfter: time.Duration(w - now%w), Reset: time.Duration(w - now%w)}
			it.denied = true
		case it.cost == 0, it.cost > l.Capacity():
			// Peeked for what the descriptor has (the IETF field's r);
			// a cost above the capacity is refused without a reset or a
			// Retry-After, as no wait lets it pass (see never).
			d, err := s.has(ctx, l, it.key)
			if err != nil {
				return nil, s.storeError(ctx, err)
			}
			it.d = d
			if it.cost == 0 {
				it.checkOK = true
			} else {
				it.denied, it.never = true, true
				it.d.Allowed, it.d.RetryAfter = false, 0
				s.logNever(l, it.cost)
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
	if settles {
		// Envoy acts on no answer to this call: what it settles is
		// settled whatever the request's other descriptors answer.
		for i := range items {
			if it := &items[i]; it.settle && it.limit != nil && !it.limit.Unlimited {
				if err := s.settle(ctx, it); err != nil {
					return nil, s.storeError(ctx, err)
				}
			}
		}
	}
	over := fatal()
	if !over && len(active) > 0 {
		// Nothing is spent once the caller has gone: the engine is asked
		// only while the call's context lives.
		if err := ctx.Err(); err != nil {
			return nil, ctxError(err)
		}
		var err error
		if over, err = s.spend(ctx, sc, items, active); err != nil {
			return nil, s.storeError(ctx, err)
		}
	}
	if over {
		// Nothing was spent; the decisions of the others say what they
		// would have answered. Those not yet decided are peeked.
		for _, i := range active {
			it := &items[i]
			if it.d.Limit == 0 {
				d, err := s.core.Peek(ctx, it.limit.Path, it.limit.limit, it.key, it.cost)
				if err != nil {
					return nil, s.storeError(ctx, err)
				}
				it.d = d
				it.denied = !d.Allowed
			}
		}
	}
	resp := s.answer(domain, known, items, over)
	if s.opts.DynamicMetadata {
		resp.DynamicMetadata = requestMetadata(req, items)
	}
	if !over {
		if h := s.settleHandle(items, now); h != "" {
			if resp.DynamicMetadata == nil {
				resp.DynamicMetadata = &structpb.Struct{Fields: make(map[string]*structpb.Value, 1)}
			}
			resp.DynamicMetadata.Fields[SettleKey] = structpb.NewStringValue(h)
		}
	}
	return resp, nil
}

// spend decides the active items (their indices in items) through the
// decision core, as one Partial batch: a denial of a shadow_mode or
// quota_mode limit leaves the others to be decided again without it, so
// that the request passes and spends where it is allowed; any other denial
// refuses the request, spending nothing (over). Each item keeps its last
// decision, and whether it spent or was denied.
func (s *Server) spend(ctx context.Context, sc *scratch, items []item, active []int) (over bool, err error) {
	reqs, names, soft := sc.reqs[:0], sc.labels[:0], sc.soft[:0]
	for _, i := range active {
		it := &items[i]
		reqs = append(reqs, engine.Request{Limit: it.limit.limit, Key: it.key, Cost: it.cost})
		names = append(names, it.limit.Path)
		soft = append(soft, it.shadow || it.quota)
	}
	sc.reqs, sc.labels, sc.soft = reqs, names, soft
	res, _, err := s.core.Decide(ctx, sluice.Batch{Names: names, Soft: soft, Partial: true}, reqs, &sc.scratch)
	if err != nil {
		return false, err
	}
	for j, i := range active {
		it := &items[i]
		it.d = res.Decisions[j]
		it.spent = res.Spent(j)
		it.denied = !it.d.Allowed
	}
	return res.Over, nil
}

// has peeks what key has under l: a decision whose Remaining counts the
// unit the peek asked for when it is allowed.
func (s *Server) has(ctx context.Context, l *Limit, key string) (algo.Decision, error) {
	d, err := s.core.Peek(ctx, l.Path, l.limit, key, 1)
	if d.Allowed {
		d.Remaining++
	}
	return d, err
}

// ctxEvery is how many descriptors a loop works through between two looks
// at the call's context.
const ctxEvery = 64

// ctxError is the gRPC error of a call whose context ended with err:
// DeadlineExceeded or Canceled.
func ctxError(err error) error { return status.FromContextError(err).Err() }

// checkBounds refuses, as InvalidArgument, a request past the server's
// bounds (Options.MaxDescriptors, MaxEntries, MaxValueBytes), naming what
// is over and by how much, never quoting the values.
func (s *Server) checkBounds(ctx context.Context, req *rlspb.RateLimitRequest) error {
	descs := req.GetDescriptors()
	if n := len(descs); n > s.opts.MaxDescriptors {
		return status.Errorf(codes.InvalidArgument, "rate limit request has %d descriptors, over the %d allowed (sluice rls --max-descriptors)", n, s.opts.MaxDescriptors)
	}
	maxBytes := s.opts.MaxValueBytes
	if n := len(req.GetDomain()); n > maxBytes {
		return status.Errorf(codes.InvalidArgument, "rate limit domain is %d bytes, over the %d allowed (sluice rls --max-value-bytes)", n, maxBytes)
	}
	for i, d := range descs {
		if i%ctxEvery == ctxEvery-1 && ctx.Err() != nil {
			return ctxError(ctx.Err())
		}
		es := d.GetEntries()
		if n := len(es); n > s.opts.MaxEntries {
			return status.Errorf(codes.InvalidArgument, "rate limit descriptor %d has %d entries, over the %d allowed (sluice rls --max-entries)", i, n, s.opts.MaxEntries)
		}
		for j, e := range es {
			if n := max(len(e.GetKey()), len(e.GetValue())); n > maxBytes {
				what := "value"
				if len(e.GetKey()) > maxBytes {
					what = "key"
				}
				return status.Errorf(codes.InvalidArgument, "rate limit descriptor %d, entry %d: its %s is %d bytes, over the %d allowed (sluice rls --max-value-bytes)", i, j, what, n, maxBytes)
			}
		}
	}
	return nil
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

// answer builds the response and counts the decisions; known is whether
// the configuration the request was decided under has its domain (read
// from that configuration, not again from the one in force, which a reload
// may have replaced meanwhile).
func (s *Server) answer(domain string, known bool, items []item, over bool) *rlspb.RateLimitResponse {
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
		if it.settle {
			// Not a request: nothing to count as a hit, and no wait.
			st.CurrentLimit = l.proto
			if it.settled {
				st.LimitRemaining = uint32(min(max(it.d.Remaining, 0), math.MaxUint32))
			}
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
		switch {
		case it.never:
			// No duration: there is no time after which it passes.
		case blk != nil:
			blk.durs[i].Seconds, blk.durs[i].Nanos = int64(wait/time.Second), int32(wait%time.Second)
			st.DurationUntilReset = &blk.durs[i]
		default:
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
	}
	if m != nil && known {
		// A domain no file configures is counted once, in
		// unknown_domain_total: its name is the client's.
		c := m.of(domain, "", "")
		if over {
			c.requestsOver.Add(1)
		} else {
			c.requestsOK.Add(1)
		}
	}
	pick := -1
	if s.opts.Headers != HeadersNone {
		pick = sluice.Pick(len(items), over, func(i int) (algo.Decision, bool) { return s.pickable(&items[i]) })
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

// headerSlots returns scratch for n headers: blk's, or new.
func headerSlots(blk *respBlock, n int) ([]corev3.HeaderValue, []*corev3.HeaderValue) {
	if blk != nil && n <= maxHeaders {
		return blk.hdrs[:0:n], blk.hdrPtrs[:0:n]
	}
	return make([]corev3.HeaderValue, 0, n), make([]*corev3.HeaderValue, 0, n)
}

// pickable returns it as the headers' pick (sluice.Pick) sees it, and
// whether it may describe the request: a limited descriptor, a shadow_mode
// one only with Options.ShadowHeaders. A denial that refuses the request
// is one not allowed, and a cost that never passes waits the longest of
// all.
func (s *Server) pickable(it *item) (algo.Decision, bool) {
	if it.limit == nil || it.limit.Unlimited || it.settle || (it.shadow && !s.opts.ShadowHeaders) {
		return algo.Decision{}, false
	}
	d := it.d
	d.Allowed = !it.denied || it.shadow
	if it.never {
		d.RetryAfter = math.MaxInt64
	}
	return d, true
}

// headers renders the rate-limit fields of the chosen descriptor, whose
// status is st, as every door makes them (package internal/ratefield), in
// Envoy's terms: X-RateLimit-Limit is the limit's capacity,
// X-RateLimit-Remaining is st's limit_remaining, as Envoy's own
// x-ratelimit-remaining is (0 on an OVER_LIMIT status), and
// X-RateLimit-Reset is a denied descriptor's wait, as its
// duration_until_reset is; the IETF RateLimit field's r keeps its meaning,
// what may be spent now. Retry-After answers a request over the limit.
func (s *Server) headers(it *item, st *rlspb.RateLimitResponse_DescriptorStatus, over bool, blk *respBlock) []*corev3.HeaderValue {
	l := it.limit
	p := l.headerFields()
	ietf := s.opts.Headers == HeadersBoth || s.opts.Headers == HeadersIETF
	x := s.opts.Headers == HeadersBoth || s.opts.Headers == HeadersX
	d := it.d
	d.Allowed = !it.denied
	set := p.Of(d)
	set.Limit, set.Remaining, set.R, set.NoReset = l.Capacity(), int64(st.LimitRemaining), max(d.Remaining, 0), it.never
	if it.denied {
		set.Reset = set.T
	}
	if !over {
		set.RetryAfter = 0
	}
	// The values in one buffer, one string, and every header in one
	// array: a handful of allocations, however many headers.
	var buf [160]byte
	b, ends := p.Append(buf[:0], &set)
	v := ends.Cut(string(b))

	vals, hs := headerSlots(blk, maxHeaders)
	add := func(k, val string) {
		vals = append(vals, corev3.HeaderValue{Key: k, Value: val})
		hs = append(hs, &vals[len(vals)-1])
	}
	if ietf {
		add("RateLimit-Policy", p.Field)
		add("RateLimit", v[ratefield.RateLimit])
	}
	if x {
		add("X-RateLimit-Limit", v[ratefield.Limit])
		add("X-RateLimit-Remaining", v[ratefield.Remaining])
		if !it.never {
			add("X-RateLimit-Reset", v[ratefield.Reset])
		}
	}
	if r := v[ratefield.RetryAfter]; r != "" {
		add("Retry-After", r)
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
	)
	if it.never {
		return append(hs, &vals[0], &vals[1]) // no reset: it never passes
	}
	vals = append(vals, corev3.HeaderValue{Key: names[2], Value: strconv.FormatInt(ratefield.CeilSeconds(it.d.Reset), 10)})
	return append(hs, &vals[0], &vals[1], &vals[2])
}

// headerFields returns what l's rate-limit fields carry whatever the
// decision, worked out on first use: the quota is l's capacity, its window
// the algorithm's quota window (algo.Quota: a bucket's is the time it
// refills from empty), and it is named by l's name, else its path.
func (l *Limit) headerFields() *ratefield.Policy {
	if f := l.fields.Load(); f != nil {
		return f
	}
	window := l.Window
	if l.limit.Algorithm != nil {
		_, window = algo.Quota(l.limit.Algorithm)
	}
	f := ratefield.NewPolicy(l.policy, l.Capacity(), window)
	l.fields.Store(&f)
	return &f
}

// storeError counts a failed decision (the decision core has logged it)
// and returns the gRPC error that answers it: the call's own status when
// its context ended before the engine decided.
func (s *Server) storeError(ctx context.Context, err error) error {
	if cerr := ctx.Err(); cerr != nil && errors.Is(err, cerr) {
		// The call ended before the engine decided: nothing was spent,
		// and the store is not to blame.
		return ctxError(cerr)
	}
	if m := s.opts.Metrics; m != nil {
		m.storeErrors.Add(1)
	}
	return status.Errorf(codes.Unavailable, "rate limit store: %v", err)
}

// logNever logs, at most once a second, a request whose cost can never
// pass l: a hits_addend that Envoy's configuration (or a client, where it
// feeds hits_addend) sets above the limit's capacity.
func (s *Server) logNever(l *Limit, cost int64) {
	if ok, suppressed := s.neverLog.Let(time.Now().UnixNano()); ok {
		s.log.Warn("envoyrls: hits_addend above the limit's capacity can never pass; answered OVER_LIMIT without a reset",
			"limit", l.Path, "hits_addend", cost, "capacity", l.Capacity(), "suppressed", suppressed)
	}
}

// overrideKey identifies a limit a request brings.
type overrideKey struct {
	domain string
	rpu    uint32
	unit   rlspb.RateLimitResponse_RateLimit_Unit
	mult   uint32
}

// override returns the limit o, a descriptor's own limit field, sets
// (Envoy's dynamic limit override), and the key of the descriptor's
// entries under it. Its budget
// is a fixed window of its own, never a configured limit's, and it is
// never in shadow mode, as in envoyproxy/ratelimit.
func (s *Server) override(domain string, o *rlv3.RateLimitDescriptor_RateLimitOverride, entries []*rlv3.RateLimitDescriptor_Entry) (*Limit, string, string) {
	k := overrideKey{domain: domain, rpu: o.GetRequestsPerUnit(), unit: rlspb.RateLimitResponse_RateLimit_Unit(o.GetUnit()), mult: max(1, o.GetUnitMultiplier().GetValue())}
	var key []byte
	for _, e := range entries {
		key = appendKeyField(key, e.GetKey())
		key = appendKeyField(key, e.GetValue())
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

// scratch is one call's working scratch, reused across calls: nothing in it
// outlives the call (the response holds none of it).
type scratch struct {
	items     []item
	reqs      []engine.Request
	active    []int
	names     []string    // the names the matched limits replace
	labels    []string    // the names of the engine's requests, for the decision core
	soft      []bool      // whether a denial under each request leaves the request to pass
	scratch      sluice.Scratch // the decision core's scratch
	replacing bool        // some matched limit replaces others
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
	clear(sc.names[:cap(sc.names)])
	clear(sc.labels[:cap(sc.labels)])
	sc.scratch.Clear()
	sc.names = sc.names[:0]
	sc.reqs, sc.active, sc.replacing = sc.reqs[:0], sc.active[:0], false
	scratchPool.Put(sc)
}

// dropReplaced unsets the limits that a matched limit's replaces names:
// every name any of them replaces, found before any is unset. The names
// are gathered once, each limit's once (a limit matched by several
// descriptors is looked at once), and looked up by a scan while they are
// few, else by a map: the work grows with the descriptors and the names,
// not their product.
func (sc *scratch) dropReplaced(items []item) {
	names := sc.names[:0]
	var last *Limit
	for i := range items {
		if l := items[i].limit; l != nil && l != last && len(l.Replaces) > 0 {
			names = append(names, l.Replaces...)
			last = l
		}
	}
	sc.names = names
	var set map[string]struct{}
	if len(names) > scanNames {
		set = make(map[string]struct{}, len(names))
		for _, n := range names {
			set[n] = struct{}{}
		}
	}
	replaced := func(name string) bool {
		if set != nil {
			countLookup(1)
			_, ok := set[name]
			return ok
		}
		countLookup(len(names))
		return slices.Contains(names, name)
	}
	for i := range items {
		if l := items[i].limit; l != nil && l.Name != "" && replaced(l.Name) {
			items[i].limit = nil
		}
	}
}

// scanNames is the most replaced names dropReplaced scans for a limit's
// name before it builds a map of them.
const scanNames = 8

// countLookups, set by tests, counts in lookups the names dropReplaced
// compares: its work, independent of the clock.
var (
	countLookups bool
	lookups      atomic.Int64
)

func countLookup(n int) {
	if countLookups {
		lookups.Add(int64(n))
	}
}
