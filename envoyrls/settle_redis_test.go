package envoyrls_test

import (
	"context"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	goredis "github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluice-go/sluice/backend/redis"
	"github.com/sluice-go/sluice/backend/redis/redistest"
	"github.com/sluice-go/sluice/engine"
	"github.com/sluice-go/sluice/envoyrls"
	"github.com/sluice-go/sluice/envoyrls/rlsfile"
)

const llmDay = `domain: llm
descriptors:
  - key: api_key
    rate_limit: {unit: day, requests_per_unit: 100, algorithm: fixed_window, settle_on_stream_done: true}
`

// TestSettleAcrossAFleet: two sluice rls servers sharing one Redis, as a
// fleet behind Envoy's cluster, where the request path may reach one and
// the stream-done call the other. The handle carries all a settle needs,
// so the other settles it: its refund lets in a request that the same
// server refused (from the record it had seen) before the settle.
func TestSettleAcrossAFleet(t *testing.T) {
	srv := redistest.Start(t)
	d, err := rlsfile.ParseFile("llm.yaml", []byte(llmDay))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := envoyrls.NewConfig(d)
	if err != nil {
		t.Fatal(err)
	}
	server := func() *envoyrls.Server {
		c := goredis.NewClient(&goredis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
		t.Cleanup(func() { c.Close() })
		st, err := redis.New(c, &redis.Options{KeyPrefix: "fleet:", Timeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		e, err := engine.New(st, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { e.Close() })
		s, err := envoyrls.NewServer(cfg, envoyrls.Options{Engine: e})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	a, b := server(), server()
	ask := func(s *envoyrls.Server, cost uint64, extra ...*rlv3.RateLimitDescriptor_Entry) *rlspb.RateLimitResponse {
		t.Helper()
		entries := append([]*rlv3.RateLimitDescriptor_Entry{{Key: "api_key", Value: "k"}}, extra...)
		r, err := s.ShouldRateLimit(context.Background(), &rlspb.RateLimitRequest{Domain: "llm",
			Descriptors: []*rlv3.RateLimitDescriptor{{Entries: entries, HitsAddend: wrapperspb.UInt64(cost)}}})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	r := ask(a, 80)
	h := stringFields(r.GetDynamicMetadata())[envoyrls.SettleKey]
	if r.OverallCode != rlspb.RateLimitResponse_OK || h == "" {
		t.Fatalf("estimate 80 on a: %s, handle %q", codesOf(r), h)
	}
	if r := ask(b, 30); r.OverallCode != rlspb.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("estimate 30 on b with 20 left: %s", codesOf(r))
	}
	if r := ask(b, 10, &rlv3.RateLimitDescriptor_Entry{Key: envoyrls.SettleKey, Value: h}); r.Statuses[0].LimitRemaining != 90 {
		t.Fatalf("a's stream settled on b, 10 used: %s remaining %d, want 90", codesOf(r), r.Statuses[0].LimitRemaining)
	}
	if r := ask(b, 30); r.OverallCode != rlspb.RateLimitResponse_OK || r.Statuses[0].LimitRemaining != 60 {
		t.Fatalf("estimate 30 on b after the refund: %s remaining %d, want OK 60", codesOf(r), r.Statuses[0].LimitRemaining)
	}
}
