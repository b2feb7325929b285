package envoyrls_test

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluice-go/sluice/backend"
	"github.com/sluice-go/sluice/backend/memory"
	"github.com/sluice-go/sluice/engine"
	"github.com/sluice-go/sluice/envoyrls"
	"github.com/sluice-go/sluice/envoyrls/rlsfile"
)

// t0 is the start of a day, of an hour and of a minute: fixed windows
// align to it.
var t0 = time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC)

type fixture struct {
	srv     *envoyrls.Server
	eng     *engine.Engine
	clock   *engine.FakeClock
	metrics *envoyrls.Metrics
}

// newFixture serves the YAML files given (one domain each) on a memory
// engine driven by a fake clock at t0.
func newFixture(t testing.TB, opts envoyrls.Options, files ...string) *fixture {
	t.Helper()
	return newFixtureOn(t, memory.New(&memory.Options{SweepInterval: -1}), opts, files...)
}

// newFixtureOn is newFixture on the store b.
func newFixtureOn(t testing.TB, b backend.Backend, opts envoyrls.Options, files ...string) *fixture {
	t.Helper()
	var ds []*envoyrls.Domain
	for i, f := range files {
		d, err := rlsfile.ParseFile("f"+string(rune('0'+i))+".yaml", []byte(f))
		if err != nil {
			t.Fatal(err)
		}
		ds = append(ds, d)
	}
	cfg, err := envoyrls.NewConfig(ds...)
	if err != nil {
		t.Fatal(err)
	}
	clock := engine.NewFakeClock(t0)
	eng, err := engine.New(b, &engine.Options{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close() })
	m := envoyrls.NewMetrics()
	opts.Engine, opts.Metrics = eng, m
	srv, err := envoyrls.NewServer(cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{srv: srv, eng: eng, clock: clock, metrics: m}
}

// desc builds a descriptor from key, value pairs.
func desc(kv ...string) *rlv3.RateLimitDescriptor {
	d := &rlv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &rlv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

func (f *fixture) ask(t *testing.T, domain string, hits uint32, ds ...*rlv3.RateLimitDescriptor) *rlspb.RateLimitResponse {
	t.Helper()
	resp, err := f.srv.ShouldRateLimit(context.Background(), &rlspb.RateLimitRequest{Domain: domain, Descriptors: ds, HitsAddend: hits})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Statuses) != len(ds) {
		t.Fatalf("%d statuses for %d descriptors", len(resp.Statuses), len(ds))
	}
	return resp
}

// codesOf renders a response as "OVERALL: status status ...".
func codesOf(r *rlspb.RateLimitResponse) string {
	var b strings.Builder
	b.WriteString(r.OverallCode.String() + ":")
	for _, s := range r.Statuses {
		b.WriteString(" " + s.Code.String())
	}
	return b.String()
}

const messaging = `domain: messaging
descriptors:
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        rate_limit:
          unit: day
          requests_per_unit: 5
  - key: to_number
    rate_limit:
      unit: day
      requests_per_unit: 100
`

// Example 2's request: both descriptors are decided as one. The sixth
// marketing message is refused, and the refusal spends nothing of the
// number's 100 a day.
func TestAllOrNothing(t *testing.T) {
	f := newFixture(t, envoyrls.Options{}, messaging)
	marketing := desc("message_type", "marketing", "to_number", "2061111111")
	number := desc("to_number", "2061111111")
	for i := 1; i <= 5; i++ {
		r := f.ask(t, "messaging", 0, marketing, number)
		if got := codesOf(r); got != "OK: OK OK" {
			t.Fatalf("request %d: %s", i, got)
		}
		if got, want := r.Statuses[0].LimitRemaining, uint32(5-i); got != want {
			t.Errorf("request %d: marketing remaining %d, want %d", i, got, want)
		}
		if got, want := r.Statuses[1].LimitRemaining, uint32(100-i); got != want {
			t.Errorf("request %d: number remaining %d, want %d", i, got, want)
		}
	}
	for i := 0; i < 3; i++ {
		r := f.ask(t, "messaging", 0, marketing, number)
		if got := codesOf(r); got != "OVER_LIMIT: OVER_LIMIT OK" {
			t.Fatalf("refused request %d: %s", i, got)
		}
		// The number's descriptor, unspent by the refused request, has
		// what it had: 95 (envoyproxy/ratelimit with
		// STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT reports the count it
		// did not increment); the refused one has 0, as its OVER_LIMIT
		// status does there.
		if got := r.Statuses[1].LimitRemaining; got != 95 {
			t.Errorf("refused request %d: number remaining %d, want 95", i, got)
		}
		if got := r.Statuses[0].LimitRemaining; got != 0 {
			t.Errorf("refused request %d: the OVER_LIMIT descriptor's remaining %d, want 0", i, got)
		}
	}
	// The number alone: five spent, not eight.
	r := f.ask(t, "messaging", 0, number)
	if got := r.Statuses[0].LimitRemaining; got != 94 {
		t.Errorf("after the refusals the number has %d left, want 94 (refused requests spent nothing)", got)
	}
	if got, want := r.Statuses[0].CurrentLimit.GetRequestsPerUnit(), uint32(100); got != want {
		t.Errorf("current_limit %d, want %d", got, want)
	}
	if got, want := r.Statuses[0].DurationUntilReset.AsDuration(), 24*time.Hour; got != want {
		t.Errorf("duration_until_reset %v at the start of the day, want %v", got, want)
	}
	hits, over, _, within, _ := f.metrics.Snapshot("messaging", "message_type_marketing.to_number")
	if hits != 8 || over != 3 || within != 5 {
		t.Errorf("marketing metrics: hits %d over %d within %d, want 8 3 5", hits, over, within)
	}
	// The next day starts afresh: fixed windows align to the day.
	f.clock.Advance(24 * time.Hour)
	if got := codesOf(f.ask(t, "messaging", 0, marketing, number)); got != "OK: OK OK" {
		t.Errorf("the next day: %s", got)
	}
}

const example6 = `domain: example6
descriptors:
  - key: service
    descriptors:
      - key: user
        value: user-a
        rate_limit:
          requests_per_unit: 10
          unit: second
        shadow_mode: true
      - key: user
        value: user-b
        rate_limit:
          requests_per_unit: 20
          unit: second
`

// A shadow_mode limit over its budget answers OK, counts the would-be
// denial, and adds no headers; the request's other limits spend as usual.
func TestShadowMode(t *testing.T) {
	f := newFixture(t, envoyrls.Options{}, example6)
	a := desc("service", "auth-service", "user", "user-a")
	b := desc("service", "auth-service", "user", "user-b")
	for i := 0; i < 10; i++ {
		f.ask(t, "example6", 0, a)
	}
	for i := 0; i < 5; i++ {
		r := f.ask(t, "example6", 0, a, b)
		if got := codesOf(r); got != "OK: OK OK" {
			t.Fatalf("over the shadow limit %d: %s", i, got)
		}
		if got, want := r.Statuses[1].LimitRemaining, uint32(19-i); got != want {
			t.Errorf("request %d: user-b remaining %d, want %d (spent though user-a's shadow limit is over)", i, got, want)
		}
		for _, h := range r.ResponseHeadersToAdd {
			if h.Key == "RateLimit" && !strings.Contains(h.Value, "user-b") {
				t.Errorf("RateLimit %q names the shadow limit", h.Value)
			}
		}
	}
	r := f.ask(t, "example6", 0, a)
	if len(r.ResponseHeadersToAdd) != 0 {
		t.Errorf("a shadow limit alone added headers %v", r.ResponseHeadersToAdd)
	}
	if got := r.Statuses[0].LimitRemaining; got != 0 {
		t.Errorf("the shadow limit's remaining %d, want 0", got)
	}
	hits, over, _, within, shadow := f.metrics.Snapshot("example6", "service.user_user-a")
	if hits != 16 || over != 6 || shadow != 6 || within != 10 {
		t.Errorf("user-a: hits %d over %d shadow %d within %d, want 16 6 6 10", hits, over, shadow, within)
	}
	// With ShadowHeaders the shadow limit shows.
	f2 := newFixture(t, envoyrls.Options{ShadowHeaders: true}, example6)
	if r := f2.ask(t, "example6", 0, a); len(r.ResponseHeadersToAdd) == 0 {
		t.Error("ShadowHeaders: no headers")
	}
	// Global shadow mode: user-b's real limit never denies either.
	f3 := newFixture(t, envoyrls.Options{ShadowMode: true}, example6)
	for i := 0; i < 25; i++ {
		if r := f3.ask(t, "example6", 0, b); r.OverallCode != rlspb.RateLimitResponse_OK {
			t.Fatalf("ShadowMode: request %d: %s", i, codesOf(r))
		}
	}
	if _, _, _, _, shadow := f3.metrics.Snapshot("example6", "service.user_user-b"); shadow != 5 {
		t.Errorf("ShadowMode: %d shadow denials counted, want 5", shadow)
	}
}

const internal = `domain: internal
descriptors:
  - key: ldap
    rate_limit:
      unlimited: true
  - key: azure
    rate_limit:
      unit: minute
      requests_per_unit: 100
`

func TestUnlimitedAndUnmatched(t *testing.T) {
	f := newFixture(t, envoyrls.Options{}, internal)
	for i := 0; i < 200; i++ {
		r := f.ask(t, "internal", 0, desc("ldap", "x"), desc("nope", "y"))
		if got := codesOf(r); got != "OK: OK OK" {
			t.Fatalf("%d: %s", i, got)
		}
		if r.Statuses[0].LimitRemaining != math.MaxUint32 || r.Statuses[0].CurrentLimit != nil {
			t.Fatalf("unlimited status %v, want remaining MaxUint32 and no current_limit", r.Statuses[0])
		}
		if r.Statuses[1].CurrentLimit != nil {
			t.Fatalf("unmatched status %v has a limit", r.Statuses[1])
		}
	}
	// An unknown domain is OK too, as in envoyproxy/ratelimit.
	if got := codesOf(f.ask(t, "elsewhere", 0, desc("azure", "1"))); got != "OK: OK" {
		t.Errorf("unknown domain: %s", got)
	}
	if _, err := f.srv.ShouldRateLimit(context.Background(), &rlspb.RateLimitRequest{Domain: "internal"}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("no descriptors: %v, want InvalidArgument", err)
	}
}

// hits_addend is the cost: the request's, or the descriptor's own, where
// zero checks without spending; a cost over the limit is refused whole.
func TestHitsAddend(t *testing.T) {
	f := newFixture(t, envoyrls.Options{}, internal)
	az := desc("azure", "sub-1")
	if r := f.ask(t, "internal", 30, az); r.Statuses[0].LimitRemaining != 70 {
		t.Fatalf("after 30 hits: remaining %d, want 70", r.Statuses[0].LimitRemaining)
	}
	own := desc("azure", "sub-1")
	own.HitsAddend = wrapperspb.UInt64(60)
	if r := f.ask(t, "internal", 30, own); r.Statuses[0].LimitRemaining != 10 {
		t.Fatalf("the descriptor's own 60 hits: remaining %d, want 10", r.Statuses[0].LimitRemaining)
	}
	check := desc("azure", "sub-1")
	check.HitsAddend = wrapperspb.UInt64(0)
	for i := 0; i < 3; i++ {
		if r := f.ask(t, "internal", 0, check); codesOf(r) != "OK: OK" || r.Statuses[0].LimitRemaining != 10 {
			t.Fatalf("a check (hits 0): %s remaining %d, want OK 10", codesOf(r), r.Statuses[0].LimitRemaining)
		}
	}
	if r := f.ask(t, "internal", 11, az); codesOf(r) != "OVER_LIMIT: OVER_LIMIT" {
		t.Fatalf("11 hits with 10 left: %s", codesOf(r))
	}
	if r := f.ask(t, "internal", 101, az); codesOf(r) != "OVER_LIMIT: OVER_LIMIT" {
		t.Fatalf("101 hits on a limit of 100: %s", codesOf(r))
	}
	if r := f.ask(t, "internal", 10, az); codesOf(r) != "OK: OK" || r.Statuses[0].LimitRemaining != 0 {
		t.Fatalf("the last 10: %s remaining %d (refusals must not have spent)", codesOf(r), r.Statuses[0].LimitRemaining)
	}
}

const example7 = `domain: example7
descriptors:
  - key: key_1
    value: value_1
    descriptors:
      - key: user
        value: bkthomps
        rate_limit:
          name: specific_limit
          requests_per_unit: 5
          unit: hour
  - key: key_2
    value: value_2
    descriptors:
      - key: user
        value: bkthomps
        rate_limit:
          replaces:
            - name: specific_limit
          requests_per_unit: 10
          unit: hour
`

// Example 7: with both descriptors, the replacing limit alone applies and
// the replaced one's budget is untouched.
func TestReplaces(t *testing.T) {
	f := newFixture(t, envoyrls.Options{}, example7)
	one := desc("key_1", "value_1", "user", "bkthomps")
	two := desc("key_2", "value_2", "user", "bkthomps")
	for i := 0; i < 10; i++ {
		r := f.ask(t, "example7", 0, one, two)
		if got := codesOf(r); got != "OK: OK OK" {
			t.Fatalf("request %d: %s", i, got)
		}
		if r.Statuses[0].CurrentLimit != nil {
			t.Fatalf("the replaced descriptor reports a limit: %v", r.Statuses[0])
		}
	}
	if got := codesOf(f.ask(t, "example7", 0, one, two)); got != "OVER_LIMIT: OK OVER_LIMIT" {
		t.Errorf("the 11th: %s", got)
	}
	if r := f.ask(t, "example7", 0, one); r.Statuses[0].LimitRemaining != 4 {
		t.Errorf("specific_limit alone after being replaced: remaining %d, want 4 (untouched)", r.Statuses[0].LimitRemaining)
	}
}

const quota = `domain: rl
descriptors:
  - key: service
    value: service_1
    quota_mode: true
    rate_limit:
      unit: minute
      requests_per_unit: 1
  - key: service
    value: service_2
    quota_mode: true
    rate_limit:
      unit: minute
      requests_per_unit: 2
`

// quota_mode, as envoyproxy/ratelimit's service tests expect it
// (TestServiceQuotaModeOnly, TestServicePerDescriptorQuotaMode): a
// quota_mode limit past its quota never refuses the request, and its
// status is OK with 0 remaining; a non-quota limit over refuses it. The
// request spends where it is allowed.
func TestQuotaMode(t *testing.T) {
	f := newFixture(t, envoyrls.Options{}, quota)
	s1, s2 := desc("service", "service_1"), desc("service", "service_2")
	for i, want := range []string{"OK: OK OK", "OK: OK OK", "OK: OK OK"} {
		r := f.ask(t, "rl", 0, s1, s2)
		if got := codesOf(r); got != want {
			t.Errorf("request %d: %s, want %s", i, got, want)
		}
		if i == 2 && (r.Statuses[0].LimitRemaining != 0 || r.Statuses[1].LimitRemaining != 0) {
			t.Errorf("request 3, both quotas spent: remaining %d, %d; want 0, 0", r.Statuses[0].LimitRemaining, r.Statuses[1].LimitRemaining)
		}
	}
	// A quota_mode limit beside an enforced one that is over: the
	// request is refused by the enforced one, the quota one OK.
	g := newFixture(t, envoyrls.Options{}, quota+`  - key: user
    rate_limit: {unit: minute, requests_per_unit: 1}
`)
	u := desc("user", "u")
	g.ask(t, "rl", 0, u, s1)
	if got := codesOf(g.ask(t, "rl", 0, u, s1)); got != "OVER_LIMIT: OVER_LIMIT OK" {
		t.Errorf("an enforced limit over beside a quota one over: %s, want OVER_LIMIT: OVER_LIMIT OK", got)
	}
}

// Sluice's additions: algorithm and burst.
func TestAlgorithmAndBurst(t *testing.T) {
	f := newFixture(t, envoyrls.Options{}, `domain: api
descriptors:
  - key: user
    rate_limit:
      unit: minute
      requests_per_unit: 60
      algorithm: token_bucket
      burst: 3
`)
	u := desc("user", "alice")
	for i := 0; i < 3; i++ {
		if got := codesOf(f.ask(t, "api", 0, u)); got != "OK: OK" {
			t.Fatalf("burst %d: %s", i, got)
		}
	}
	r := f.ask(t, "api", 0, u)
	if got := codesOf(r); got != "OVER_LIMIT: OVER_LIMIT" {
		t.Fatalf("past the burst: %s", got)
	}
	if got := r.Statuses[0].DurationUntilReset.AsDuration(); got != time.Second {
		t.Errorf("retry in %v, want 1s (one token a second)", got)
	}
	headers := map[string]string{}
	for _, h := range r.ResponseHeadersToAdd {
		headers[h.Key] = h.Value
	}
	for k, v := range map[string]string{
		// A burst of 3 at one a second: the whole quota is back in 3 s.
		"RateLimit-Policy":  `"api.user";q=3;w=3`,
		"RateLimit":         `"api.user";r=0;t=1`,
		"X-RateLimit-Limit": "3",
		"Retry-After":       "1",
	} {
		if headers[k] != v {
			t.Errorf("header %s = %q, want %q (all: %v)", k, headers[k], v, headers)
		}
	}
	f.clock.Advance(time.Second)
	if got := codesOf(f.ask(t, "api", 0, u)); got != "OK: OK" {
		t.Errorf("a second later: %s", got)
	}
}

// A limit that keeps its path keeps what callers spent across SetConfig;
// a changed rate applies at once.
func TestSetConfigKeepsBudgets(t *testing.T) {
	f := newFixture(t, envoyrls.Options{}, internal)
	az := desc("azure", "s")
	f.ask(t, "internal", 40, az)
	d, err := rlsfile.ParseFile("new.yaml", []byte(strings.Replace(internal, "100", "50", 1)))
	if err != nil {
		t.Fatal(err)
	}
	cfg, _ := envoyrls.NewConfig(d)
	f.srv.SetConfig(cfg)
	if r := f.ask(t, "internal", 0, az); r.Statuses[0].LimitRemaining != 9 {
		t.Errorf("after the limit went from 100 to 50 with 40 spent: remaining %d, want 9", r.Statuses[0].LimitRemaining)
	}
}

// Example 3: a requests_per_unit of 0 refuses everything.
func TestBlockList(t *testing.T) {
	f := newFixture(t, envoyrls.Options{}, `domain: edge_proxy_per_ip
descriptors:
  - key: remote_address
    rate_limit:
      unit: second
      requests_per_unit: 10
  - key: remote_address
    value: 50.0.0.5
    rate_limit:
      unit: second
      requests_per_unit: 0
`)
	if got := codesOf(f.ask(t, "edge_proxy_per_ip", 0, desc("remote_address", "50.0.0.5"))); got != "OVER_LIMIT: OVER_LIMIT" {
		t.Errorf("the blocked address: %s", got)
	}
	if got := codesOf(f.ask(t, "edge_proxy_per_ip", 0, desc("remote_address", "50.0.0.1"))); got != "OK: OK" {
		t.Errorf("another address: %s", got)
	}
}

// A descriptor carrying its own limit (Envoy's limit override) is decided
// under it.
func TestLimitOverride(t *testing.T) {
	f := newFixture(t, envoyrls.Options{}, internal)
	d := desc("azure", "x")
	d.Limit = &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 2, Unit: 3 /* hour */}
	want := []string{"OK: OK", "OK: OK", "OVER_LIMIT: OVER_LIMIT"}
	for i, w := range want {
		if got := codesOf(f.ask(t, "internal", 0, d)); got != w {
			t.Errorf("override request %d: %s, want %s", i, got, w)
		}
	}
	if r := f.ask(t, "internal", 0, desc("azure", "x")); r.Statuses[0].LimitRemaining != 99 {
		t.Errorf("the configured limit after overrides: remaining %d, want 99 (its own budget)", r.Statuses[0].LimitRemaining)
	}
}

// As envoyproxy/ratelimit answers (its base_limiter: an over-limit status
// carries LimitRemaining 0): a hits_addend above what is left is
// OVER_LIMIT with 0 remaining, not with what is left, which Envoy would
// turn into x-ratelimit-remaining on a 429; what is left stays for the
// next request.
func TestOverLimitRemainingIsZero(t *testing.T) {
	f := newFixture(t, envoyrls.Options{}, `domain: d
descriptors:
  - key: k
    rate_limit: {unit: day, requests_per_unit: 50}
`)
	r := f.ask(t, "d", 51, desc("k", "v"))
	if got := codesOf(r); got != "OVER_LIMIT: OVER_LIMIT" || r.Statuses[0].LimitRemaining != 0 {
		t.Errorf("hits 51 of 50: %s, remaining %d; want OVER_LIMIT, 0", got, r.Statuses[0].LimitRemaining)
	}
	r = f.ask(t, "d", 47, desc("k", "v"))
	if got := codesOf(r); got != "OK: OK" || r.Statuses[0].LimitRemaining != 3 {
		t.Fatalf("hits 47: %s, remaining %d; want OK, 3", got, r.Statuses[0].LimitRemaining)
	}
	r = f.ask(t, "d", 4, desc("k", "v"))
	if got := codesOf(r); got != "OVER_LIMIT: OVER_LIMIT" || r.Statuses[0].LimitRemaining != 0 {
		t.Errorf("hits 4 of 3 left: %s, remaining %d; want OVER_LIMIT, 0", got, r.Statuses[0].LimitRemaining)
	}
	if r = f.ask(t, "d", 3, desc("k", "v")); r.Statuses[0].LimitRemaining != 0 || codesOf(r) != "OK: OK" {
		t.Errorf("the 3 left: %s, remaining %d", codesOf(r), r.Statuses[0].LimitRemaining)
	}
}

// DynamicMetadata: the request, as envoyproxy/ratelimit's
// RESPONSE_DYNAMIC_METADATA returns it (ratelimitToMetadata): the domain,
// each descriptor's entries as key=value, the hits_addend, the quota_mode
// violations by index and whether quota mode is on.
func TestDynamicMetadata(t *testing.T) {
	f := newFixture(t, envoyrls.Options{DynamicMetadata: true}, `domain: q
descriptors:
  - key: plan
    quota_mode: true
    rate_limit: {unit: day, requests_per_unit: 1}
  - key: region
    quota_mode: true
    rate_limit: {unit: day, requests_per_unit: 100}
`)
	f.ask(t, "q", 0, desc("plan", "free"), desc("region", "eu"))
	r := f.ask(t, "q", 2, desc("plan", "free"), desc("region", "eu"))
	if codesOf(r) != "OK: OK OK" {
		t.Fatalf("quota mode past its limit: %s, want OK", codesOf(r))
	}
	m := r.GetDynamicMetadata().AsMap()
	descs, _ := m["descriptors"].([]any)
	first, _ := descs[0].(map[string]any)
	entries, _ := first["entries"].([]any)
	violations, _ := m["quotaModeViolations"].([]any)
	if m["domain"] != "q" || len(descs) != 2 || len(entries) != 1 || entries[0] != "plan=free" || m["hitsAddend"] != 2.0 ||
		m["quotaModeEnabled"] != true || len(violations) != 1 || violations[0] != 0.0 {
		t.Errorf("dynamic metadata %v", m)
	}
	if g := newFixture(t, envoyrls.Options{}, messaging).ask(t, "messaging", 0, desc("to_number", "1")); g.GetDynamicMetadata() != nil {
		t.Errorf("without DynamicMetadata: %v", g.GetDynamicMetadata())
	}
}

// QuotaMode, as envoyproxy/ratelimit's QUOTA_MODE (TestServiceGlobalQuotaMode
// there): every limit past its quota answers OK, the request passes.
func TestGlobalQuotaMode(t *testing.T) {
	f := newFixture(t, envoyrls.Options{QuotaMode: true, DynamicMetadata: true}, messaging)
	n := desc("to_number", "1")
	for range 100 {
		f.ask(t, "messaging", 0, n)
	}
	r := f.ask(t, "messaging", 0, n)
	if codesOf(r) != "OK: OK" || r.Statuses[0].LimitRemaining != 0 {
		t.Errorf("past the quota: %s, remaining %d; want OK, 0", codesOf(r), r.Statuses[0].LimitRemaining)
	}
	if v, _ := r.GetDynamicMetadata().AsMap()["quotaModeViolations"].([]any); len(v) != 1 {
		t.Errorf("metadata %v, want the violation named", r.GetDynamicMetadata().AsMap())
	}
}
