package envoyrls_test

import (
	"context"
	"encoding/json"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.yaml.in/yaml/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	"pgregory.net/rapid"

	"github.com/sluice-go/sluice/algo"
	"github.com/sluice-go/sluice/backend/memory"
	"github.com/sluice-go/sluice/engine"
	"github.com/sluice-go/sluice/envoyrls"
	"github.com/sluice-go/sluice/envoyrls/rlsfile"
)

// envoyRoute is the rate_limits of the route that docs/rls.md's Envoy
// configuration gives /v1/chat/completions, decoded with go-control-plane
// from the document itself, so that the document's configuration is the
// one tested.
func envoyRoute(t *testing.T) (domain string, limits []*routev3.RateLimit) {
	t.Helper()
	b, err := os.ReadFile("../docs/rls.md")
	if err != nil {
		t.Fatal(err)
	}
	var block string
	for _, part := range strings.Split(string(b), "```yaml\n")[1:] {
		body, _, _ := strings.Cut(part, "```")
		if strings.Contains(body, "apply_on_stream_done: true") {
			block = body
			break
		}
	}
	if block == "" {
		t.Fatal("docs/rls.md has no Envoy configuration with apply_on_stream_done")
	}
	var v any
	if err := yaml.Unmarshal([]byte(block), &v); err != nil {
		t.Fatal(err)
	}
	j, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var hcm hcmv3.HttpConnectionManager
	if err := protojson.Unmarshal(j, &hcm); err != nil {
		t.Fatalf("the document's Envoy configuration: %v", err)
	}
	if err := hcm.ValidateAll(); err != nil {
		t.Fatalf("the document's Envoy configuration: %v", err)
	}
	var filter ratelimitv3.RateLimit
	if err := hcm.GetHttpFilters()[0].GetTypedConfig().UnmarshalTo(&filter); err != nil {
		t.Fatal(err)
	}
	route := hcm.GetRouteConfig().GetVirtualHosts()[0].GetRoutes()[0]
	var per ratelimitv3.RateLimitPerRoute
	if err := route.GetTypedPerFilterConfig()["envoy.filters.http.ratelimit"].UnmarshalTo(&per); err != nil {
		t.Fatal(err)
	}
	return filter.GetDomain(), per.GetRateLimits()
}

// envoyStream is one HTTP stream as Envoy's rate-limit filter sees it: the
// request's headers, the stream's dynamic metadata (namespace → fields),
// and the calls the filter makes.
type envoyStream struct {
	headers  map[string]string
	metadata map[string]map[string]string
}

// descriptors builds the descriptors of the rate_limits entries whose
// apply_on_stream_done is onDone, as Envoy's RateLimitPolicyEntry does for
// the actions the document uses: an action that cannot append its entry
// drops the descriptor, and so does a hits_addend format that does not
// give a number.
func (s *envoyStream) descriptors(t *testing.T, limits []*routev3.RateLimit, onDone bool) []*rlv3.RateLimitDescriptor {
	t.Helper()
	var out []*rlv3.RateLimitDescriptor
next:
	for _, rl := range limits {
		if rl.GetApplyOnStreamDone() != onDone {
			continue
		}
		d := &rlv3.RateLimitDescriptor{}
		for _, a := range rl.GetActions() {
			var key, value string
			var ok bool
			switch {
			case a.GetRequestHeaders() != nil:
				h := a.GetRequestHeaders()
				key = h.GetDescriptorKey()
				value, ok = s.headers[h.GetHeaderName()]
			case a.GetMetadata() != nil:
				m := a.GetMetadata()
				key = m.GetDescriptorKey()
				mk := m.GetMetadataKey()
				value, ok = s.metadata[mk.GetKey()][mk.GetPath()[0].GetKey()]
				if !ok && m.GetDefaultValue() != "" {
					value, ok = m.GetDefaultValue(), true
				}
			case a.GetGenericKey() != nil:
				key, value, ok = a.GetGenericKey().GetDescriptorKey(), a.GetGenericKey().GetDescriptorValue(), true
			default:
				t.Fatalf("the simulated filter takes no action %v", a)
			}
			if !ok {
				continue next
			}
			d.Entries = append(d.Entries, &rlv3.RateLimitDescriptor_Entry{Key: key, Value: value})
		}
		if h := rl.GetHitsAddend(); h != nil {
			n, ok := s.format(t, h.GetFormat())
			if h.GetNumber() != nil {
				n, ok = h.GetNumber().GetValue(), true
			}
			if !ok {
				continue
			}
			d.HitsAddend = wrapperspb.UInt64(n)
		}
		out = append(out, d)
	}
	return out
}

// format evaluates a hits_addend format of one substitution.
func (s *envoyStream) format(t *testing.T, f string) (uint64, bool) {
	t.Helper()
	var v string
	var ok bool
	switch {
	case strings.HasPrefix(f, "%REQ(") && strings.HasSuffix(f, ")%"):
		v, ok = s.headers[f[5:len(f)-2]]
	case strings.HasPrefix(f, "%DYNAMIC_METADATA(") && strings.HasSuffix(f, ")%"):
		ns, key, _ := strings.Cut(f[len("%DYNAMIC_METADATA("):len(f)-2], ":")
		v, ok = s.metadata[ns][key]
	default:
		t.Fatalf("the simulated filter takes no format %q", f)
	}
	n, err := strconv.ParseUint(v, 10, 64)
	return n, ok && err == nil && n <= 1e9
}

// requestPath makes the filter's request-path call: it reports whether the
// request passed, and keeps the answer's dynamic metadata as Envoy does.
func (s *envoyStream) requestPath(t *testing.T, srv *envoyrls.Server, domain string, limits []*routev3.RateLimit) bool {
	t.Helper()
	ds := s.descriptors(t, limits, false)
	if len(ds) == 0 {
		return true
	}
	resp, err := srv.ShouldRateLimit(context.Background(), &rlspb.RateLimitRequest{Domain: domain, Descriptors: ds})
	if err != nil {
		t.Fatalf("request path: %v", err)
	}
	if md := resp.GetDynamicMetadata(); md != nil && len(md.GetFields()) > 0 {
		s.metadata["envoy.filters.http.ratelimit"] = stringFields(md)
	}
	return resp.GetOverallCode() == rlspb.RateLimitResponse_OK
}

// streamDone makes the filter's call when the stream is done, with the
// actual cost a filter wrote as dynamic metadata; it reports whether a
// call was made (none when no descriptor could be built).
func (s *envoyStream) streamDone(t *testing.T, srv *envoyrls.Server, domain string, limits []*routev3.RateLimit, actual int64) bool {
	t.Helper()
	s.metadata["envoy.filters.http.lua"] = map[string]string{"total_tokens": strconv.FormatInt(actual, 10)}
	ds := s.descriptors(t, limits, true)
	if len(ds) == 0 {
		return false
	}
	if _, err := srv.ShouldRateLimit(context.Background(), &rlspb.RateLimitRequest{Domain: domain, Descriptors: ds}); err != nil {
		t.Fatalf("stream done: %v", err)
	}
	return true
}

func stringFields(st *structpb.Struct) map[string]string {
	out := map[string]string{}
	for k, v := range st.GetFields() {
		if s, ok := v.GetKind().(*structpb.Value_StringValue); ok {
			out[k] = s.StringValue
		}
	}
	return out
}

const llm = `domain: llm
descriptors:
  - key: api_key
    rate_limit:
      unit: minute
      requests_per_unit: 100
      algorithm: sliding_counter
      settle_on_stream_done: true
`

// remaining peeks what key has under the llm domain's limit.
func remaining(t *testing.T, f *fixture, key string) int64 {
	t.Helper()
	m := f.srv.Config().Match("llm", desc("api_key", key).GetEntries())
	d, err := f.eng.Peek(context.Background(), m.Limit.EngineLimit(), m.Key, 1)
	if err != nil {
		t.Fatal(err)
	}
	if d.Allowed {
		return d.Remaining + 1
	}
	return d.Remaining
}

// TestSettleEnvoySequence makes the calls Envoy's rate-limit filter makes
// under docs/rls.md's configuration, request path then stream done, for a
// limit of 100 tokens a minute per key: each stream's actual cost is
// charged once, a request refused on the request path costs nothing (its
// stream-done call is never built), one that used more than its estimate
// is charged past the limit, and the caller in debt is refused.
func TestSettleEnvoySequence(t *testing.T) {
	domain, limits := envoyRoute(t)
	f := newFixture(t, envoyrls.Options{}, llm)
	stream := func(estimate int) *envoyStream {
		return &envoyStream{headers: map[string]string{"x-api-key": "k1", "x-token-estimate": strconv.Itoa(estimate)}, metadata: map[string]map[string]string{}}
	}
	type step struct {
		what      string
		do        func() bool
		want      bool // the request passed, or the call was made
		remaining int64
	}
	var steps []step
	a, b, c, d := stream(60), stream(60), stream(30), stream(1)
	steps = append(steps,
		step{"A's request path, estimate 60", func() bool { return a.requestPath(t, f.srv, domain, limits) }, true, 40},
		step{"B's request path, estimate 60 while A is in flight", func() bool { return b.requestPath(t, f.srv, domain, limits) }, false, 40},
		step{"B's stream done: no call", func() bool { return b.streamDone(t, f.srv, domain, limits, 0) }, false, 40},
		step{"A's stream done, 20 used: 40 back", func() bool { return a.streamDone(t, f.srv, domain, limits, 20) }, true, 80},
		step{"C's request path, estimate 30", func() bool { return c.requestPath(t, f.srv, domain, limits) }, true, 50},
		step{"C's stream done, 110 used: 80 more, past the limit", func() bool { return c.streamDone(t, f.srv, domain, limits, 110) }, true, 0},
		step{"D's request path, in debt", func() bool { return d.requestPath(t, f.srv, domain, limits) }, false, 0},
	)
	for i, s := range steps {
		if got := s.do(); got != s.want {
			t.Fatalf("step %d, %s: %v, want %v", i, s.what, got, s.want)
		}
		if got := remaining(t, f, "k1"); got != s.remaining {
			t.Fatalf("step %d, %s: remaining %d, want %d", i, s.what, got, s.remaining)
		}
	}
	counts := f.metrics.Counts()
	if counts.SettledCharged != 80 || counts.SettledRefunded != 40 {
		t.Fatalf("settled: charged %d refunded %d, want 80 and 40", counts.SettledCharged, counts.SettledRefunded)
	}
	// The debt: 20 + 110 spent in this minute, 30 past the limit. The
	// sliding counter weighs this minute's 130 in the next one: a second
	// into it, 127 still count; half a minute in, 65 do.
	f.clock.Advance(time.Minute + time.Second)
	if stream(1).requestPath(t, f.srv, domain, limits) {
		t.Fatalf("a second into the next minute, in debt still: passed")
	}
	f.clock.Advance(30 * time.Second)
	if !stream(1).requestPath(t, f.srv, domain, limits) {
		t.Fatalf("half a minute into the next minute: refused")
	}
}

// settleCall is a stream-done call settling handle on key with the actual
// cost.
func settleCall(f *fixture, key, handle string, actual uint64) (*rlspb.RateLimitResponse, error) {
	d := desc("api_key", key, envoyrls.SettleKey, handle)
	d.HitsAddend = wrapperspb.UInt64(actual)
	return f.srv.ShouldRateLimit(context.Background(), &rlspb.RateLimitRequest{Domain: "llm", Descriptors: []*rlv3.RateLimitDescriptor{d}})
}

// TestSettleCalls: the answers of the calls themselves. The request path
// hands a handle only to an allowed request; a stream-done call is OK with
// the limit's remaining after the settle, also past the limit; "charge"
// charges the whole cost; a malformed handle and is_negative_hits are
// refused with InvalidArgument, naming the descriptor.
func TestSettleCalls(t *testing.T) {
	f := newFixture(t, envoyrls.Options{}, llm)
	r := f.ask(t, "llm", 70, desc("api_key", "k"))
	h := stringFields(r.GetDynamicMetadata())[envoyrls.SettleKey]
	if want := "70@" + strconv.FormatInt(t0.UnixNano(), 10); h != want {
		t.Fatalf("handle %q, want %q", h, want)
	}
	if r := f.ask(t, "llm", 70, desc("api_key", "k")); codesOf(r) != "OVER_LIMIT: OVER_LIMIT" || r.GetDynamicMetadata() != nil {
		t.Fatalf("a refused request: %s, metadata %v; want OVER_LIMIT and none", codesOf(r), r.GetDynamicMetadata())
	}
	resp, err := settleCall(f, "k", h, 150)
	if err != nil {
		t.Fatal(err)
	}
	if got := codesOf(resp); got != "OK: OK" || resp.Statuses[0].LimitRemaining != 0 || len(resp.ResponseHeadersToAdd) != 0 {
		t.Fatalf("settle past the limit: %s remaining %d headers %d, want OK: OK, 0, none", got, resp.Statuses[0].LimitRemaining, len(resp.ResponseHeadersToAdd))
	}
	if _, err := settleCall(f, "k2", envoyrls.SettleCharge, 30); err != nil {
		t.Fatal(err)
	}
	if got := remaining(t, f, "k2"); got != 70 {
		t.Fatalf("after a charge of 30: remaining %d, want 70", got)
	}
	for _, bad := range []string{"", "x", "5@", "@5", "-1@5", "1@2@3"} {
		_, err := settleCall(f, "k", bad, 1)
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "descriptor 0") {
			t.Errorf("handle %q: %v, want InvalidArgument naming descriptor 0", bad, err)
		}
	}
	neg := desc("api_key", "k")
	neg.HitsAddend, neg.IsNegativeHits = wrapperspb.UInt64(5), true
	_, err = f.srv.ShouldRateLimit(context.Background(), &rlspb.RateLimitRequest{Domain: "llm", Descriptors: []*rlv3.RateLimitDescriptor{desc("api_key", "k3"), neg}})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "descriptor 1 has is_negative_hits") {
		t.Fatalf("is_negative_hits: %v, want InvalidArgument naming descriptor 1", err)
	}
	if got := remaining(t, f, "k3"); got != 100 {
		t.Fatalf("the refused call spent: remaining %d", got)
	}
}

// TestSettleConfig: settle_on_stream_done is refused on a sliding_log and
// on an unlimited limit, naming the field.
func TestSettleConfig(t *testing.T) {
	for _, c := range []struct{ rl, want string }{
		{"{unit: minute, requests_per_unit: 10, algorithm: sliding_log, settle_on_stream_done: true}", "descriptors[0].rate_limit.settle_on_stream_done"},
		{"{unlimited: true, settle_on_stream_done: true}", "descriptors[0].rate_limit.settle_on_stream_done"},
	} {
		_, err := rlsfile.ParseFile("f.yaml", []byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit: "+c.rl+"\n"))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error at %s", c.rl, err, c.want)
		}
	}
}

// TestSettleModel drives random interleavings of requests and their
// stream-done calls on a fixed window within one window, and compares
// every admission and every remaining with a model: a request of estimate
// e passes when the spent count plus e is within the limit; its settle
// adds actual − e, up to twice the limit (the debt bound), or takes back
// e − actual, at most what is spent. A refused request costs nothing.
func TestSettleModel(t *testing.T) {
	const limit = 100
	rapid.Check(t, func(rt *rapid.T) {
		clock := engine.NewFakeClock(t0)
		eng, err := engine.New(memory.New(&memory.Options{SweepInterval: -1}), &engine.Options{Clock: clock})
		if err != nil {
			rt.Fatal(err)
		}
		defer eng.Close()
		d, err := envoyrls.NewDomain("f", "llm", []envoyrls.Descriptor{{Key: "api_key", RateLimit: &envoyrls.RateLimit{
			Unit: "hour", RequestsPerUnit: new(uint32(limit)), Algorithm: algo.FixedWindowName, SettleOnStreamDone: true}}})
		if err != nil {
			rt.Fatal(err)
		}
		cfg, _ := envoyrls.NewConfig(d)
		srv, err := envoyrls.NewServer(cfg, envoyrls.Options{Engine: eng})
		if err != nil {
			rt.Fatal(err)
		}
		f := &fixture{srv: srv, eng: eng, clock: clock}
		type flight struct {
			handle   string
			estimate int64
		}
		var inFlight []flight
		spent := int64(0)
		for i := range rapid.IntRange(1, 40).Draw(rt, "calls") {
			if len(inFlight) == 0 || rapid.Bool().Draw(rt, "start") {
				e := rapid.Int64Range(1, limit).Draw(rt, "estimate")
				r, err := f.srv.ShouldRateLimit(context.Background(), &rlspb.RateLimitRequest{Domain: "llm", HitsAddend: uint32(e), Descriptors: []*rlv3.RateLimitDescriptor{desc("api_key", "k")}})
				if err != nil {
					rt.Fatal(err)
				}
				passed := r.OverallCode == rlspb.RateLimitResponse_OK
				if want := spent+e <= limit; passed != want {
					rt.Fatalf("call %d: estimate %d with %d spent: passed %v, want %v", i, e, spent, passed, want)
				}
				if passed {
					spent += e
					inFlight = append(inFlight, flight{stringFields(r.GetDynamicMetadata())[envoyrls.SettleKey], e})
				}
			} else {
				j := rapid.IntRange(0, len(inFlight)-1).Draw(rt, "which")
				fl := inFlight[j]
				inFlight = append(inFlight[:j], inFlight[j+1:]...)
				actual := rapid.Int64Range(0, 2*limit).Draw(rt, "actual")
				if _, err := settleCall(f, "k", fl.handle, uint64(actual)); err != nil {
					rt.Fatal(err)
				}
				if delta := actual - fl.estimate; delta > 0 {
					spent += min(delta, max(2*limit-spent, 0))
				} else {
					spent -= min(-delta, spent)
				}
			}
			m := f.srv.Config().Match("llm", desc("api_key", "k").GetEntries())
			dd, err := f.eng.Peek(context.Background(), m.Limit.EngineLimit(), m.Key, 1)
			if err != nil {
				rt.Fatal(err)
			}
			got := dd.Remaining
			if dd.Allowed {
				got++
			}
			if want := max(limit-spent, 0); got != want {
				rt.Fatalf("call %d: remaining %d, want %d (spent %d)", i, got, want, spent)
			}
		}
	})
}
