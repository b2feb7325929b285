package envoyrls_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluice-go/sluice/backend"
	"github.com/sluice-go/sluice/backend/memory"
	"github.com/sluice-go/sluice/envoyrls"
)

const usersConfig = `domain: api
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 5}
`

// users returns a request of n descriptors, (user, i) each.
func users(n int) *rlspb.RateLimitRequest {
	req := &rlspb.RateLimitRequest{Domain: "api"}
	for i := range n {
		req.Descriptors = append(req.Descriptors, desc("user", strconv.Itoa(i)))
	}
	return req
}

// wantInvalid checks that err is an InvalidArgument whose message says
// want, in at most a few hundred bytes.
func wantInvalid(t *testing.T, what string, err error, want string) {
	t.Helper()
	st, _ := status.FromError(err)
	if st.Code() != codes.InvalidArgument {
		t.Fatalf("%s: %v, want InvalidArgument", what, err)
	}
	if msg := st.Message(); !strings.Contains(msg, want) || len(msg) > 300 {
		t.Fatalf("%s: message %q (%d bytes), want one naming %q, under 300 bytes", what, msg, len(msg), want)
	}
}

// A request past the bounds is refused InvalidArgument, naming the bound
// and deciding nothing: too many descriptors (100,000 by default; one over
// a bound raised), too many entries, a value or a domain too long. With the
// bound raised a request of 20,000 descriptors is decided.
func TestRequestBounds(t *testing.T) {
	f := newFixture(t, envoyrls.Options{}, usersConfig)
	_, err := f.srv.ShouldRateLimit(context.Background(), users(100_000))
	wantInvalid(t, "100,000 descriptors", err, "100000 descriptors, over the 64 allowed")
	_, err = f.srv.ShouldRateLimit(context.Background(), users(envoyrls.DefaultMaxDescriptors+1))
	wantInvalid(t, "65 descriptors", err, "65 descriptors, over the 64 allowed")
	f.ask(t, "api", 0, users(envoyrls.DefaultMaxDescriptors).Descriptors...)

	long := desc()
	for i := range envoyrls.DefaultMaxEntries + 1 {
		long.Entries = append(long.Entries, &rlv3.RateLimitDescriptor_Entry{Key: "k" + strconv.Itoa(i), Value: "v"})
	}
	_, err = f.srv.ShouldRateLimit(context.Background(), &rlspb.RateLimitRequest{Domain: "api", Descriptors: []*rlv3.RateLimitDescriptor{desc("user", "a"), long}})
	wantInvalid(t, "33 entries", err, "descriptor 1 has 33 entries, over the 32 allowed")

	big := strings.Repeat("x", envoyrls.DefaultMaxValueBytes+1)
	_, err = f.srv.ShouldRateLimit(context.Background(), &rlspb.RateLimitRequest{Domain: "api", Descriptors: []*rlv3.RateLimitDescriptor{desc("user", big)}})
	wantInvalid(t, "a long value", err, "its value is 65537 bytes, over the 65536 allowed")
	_, err = f.srv.ShouldRateLimit(context.Background(), &rlspb.RateLimitRequest{Domain: "api", Descriptors: []*rlv3.RateLimitDescriptor{desc(big, "v")}})
	wantInvalid(t, "a long key", err, "its key is 65537 bytes")
	_, err = f.srv.ShouldRateLimit(context.Background(), &rlspb.RateLimitRequest{Domain: big, Descriptors: []*rlv3.RateLimitDescriptor{desc("user", "a")}})
	wantInvalid(t, "a long domain", err, "domain is 65537 bytes")

	// Nothing above was spent: user 0 (in the 64) has 4 of 5 left.
	if r := f.ask(t, "api", 0, desc("user", "0")); r.Statuses[0].LimitRemaining != 3 {
		t.Errorf("user 0 after the refused requests: %d remaining, want 3", r.Statuses[0].LimitRemaining)
	}

	raised := newFixture(t, envoyrls.Options{MaxDescriptors: 20_000}, usersConfig)
	resp, err := raised.srv.ShouldRateLimit(context.Background(), users(20_000))
	if err != nil || resp.OverallCode != rlspb.RateLimitResponse_OK || len(resp.Statuses) != 20_000 {
		t.Fatalf("20,000 descriptors under MaxDescriptors 20,000: %v, %v", resp.GetOverallCode(), err)
	}
	_, err = raised.srv.ShouldRateLimit(context.Background(), users(20_001))
	wantInvalid(t, "20,001 descriptors", err, "20001 descriptors, over the 20000 allowed")

	if _, err := envoyrls.NewServer(nil, envoyrls.Options{Engine: nil}); err == nil {
		t.Fatal("NewServer without an engine: no error")
	}
}

// Negative bounds are refused by NewServer, naming the field.
func TestRequestBoundsOptions(t *testing.T) {
	f := newFixture(t, envoyrls.Options{}, usersConfig)
	for _, o := range []envoyrls.Options{{MaxDescriptors: -1}, {MaxEntries: -1}, {MaxValueBytes: -1}} {
		o.Engine = f.eng
		if _, err := envoyrls.NewServer(nil, o); err == nil || !strings.Contains(err.Error(), "Options.Max") {
			t.Errorf("%+v: %v, want an error naming the field", o, err)
		}
	}
}

// A call whose context has ended is answered DeadlineExceeded or Canceled
// before anything is decided: nothing is spent.
func TestEndedContextSpendsNothing(t *testing.T) {
	f := newFixture(t, envoyrls.Options{}, usersConfig)
	expired, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	canceled, cancel2 := context.WithCancel(context.Background())
	cancel2()
	for _, tc := range []struct {
		ctx  context.Context
		code codes.Code
	}{{expired, codes.DeadlineExceeded}, {canceled, codes.Canceled}} {
		_, err := f.srv.ShouldRateLimit(tc.ctx, users(envoyrls.DefaultMaxDescriptors))
		if st, _ := status.FromError(err); st.Code() != tc.code {
			t.Fatalf("an ended context: %v, want %v", err, tc.code)
		}
	}
	// Every user still has its whole budget.
	r := f.ask(t, "api", 0, users(envoyrls.DefaultMaxDescriptors).Descriptors...)
	for i, st := range r.Statuses {
		if st.LimitRemaining != 4 {
			t.Fatalf("user %d after calls whose context had ended: %d remaining, want 4 (nothing spent)", i, st.LimitRemaining)
		}
	}
}

const replacingConfig = `domain: api
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 1000, name: per-user}
  - key: tenant
    rate_limit: {unit: hour, requests_per_unit: 1000, name: per-tenant, replaces: [{name: per-user}, {name: a}, {name: b}]}
`

// dropReplaced's work grows with the descriptors, not their square: the
// names compared stay a few per descriptor, counted, not timed; and the
// replaced limits are dropped as before.
func TestReplacesWorkIsLinear(t *testing.T) {
	for _, n := range []int{100, 5000} {
		f := newFixture(t, envoyrls.Options{MaxDescriptors: 2 * n}, replacingConfig)
		req := &rlspb.RateLimitRequest{Domain: "api"}
		for i := range n {
			req.Descriptors = append(req.Descriptors, desc("user", strconv.Itoa(i)), desc("tenant", strconv.Itoa(i)))
		}
		var resp *rlspb.RateLimitResponse
		var err error
		lookups := envoyrls.CountReplaceLookups(func() {
			resp, err = f.srv.ShouldRateLimit(context.Background(), req)
		})
		if err != nil {
			t.Fatal(err)
		}
		if limit := int64(8 * 2 * n); lookups > limit {
			t.Errorf("%d descriptors: %d names compared, want at most %d", 2*n, lookups, limit)
		}
		for i, st := range resp.Statuses {
			if replaced := i%2 == 0; replaced != (st.CurrentLimit == nil) {
				t.Fatalf("%d descriptors: status %d has limit %v, want the per-user limits replaced", 2*n, i, st.CurrentLimit)
			}
		}
	}
}

const neverConfig = `domain: api
descriptors:
  - key: user
    rate_limit: {unit: day, requests_per_unit: 10}
  - key: tenant
    rate_limit: {unit: day, requests_per_unit: 100}
`

// A hits_addend above a limit's capacity can never pass: the request is
// OVER_LIMIT with no duration_until_reset on that descriptor and no reset
// or Retry-After header (a retry never helps), in every header set; the
// other descriptors spend nothing.
func TestCostThatNeverPasses(t *testing.T) {
	for _, h := range []envoyrls.Headers{envoyrls.HeadersBoth, envoyrls.HeadersEnvoy} {
		t.Run(string(h), func(t *testing.T) {
			f := newFixture(t, envoyrls.Options{Headers: h}, neverConfig)
			f.clock.Advance(17 * time.Minute) // a window part gone: no reset could read 0 or the whole day
			r := f.ask(t, "api", 11, desc("user", "a"), desc("tenant", "t"))
			if r.OverallCode != rlspb.RateLimitResponse_OVER_LIMIT {
				t.Fatalf("overall %v, want OVER_LIMIT", r.OverallCode)
			}
			if st := r.Statuses[0]; st.Code != rlspb.RateLimitResponse_OVER_LIMIT || st.DurationUntilReset != nil || st.LimitRemaining != 0 || st.CurrentLimit.GetRequestsPerUnit() != 10 {
				t.Fatalf("the never descriptor: %v", st)
			}
			for _, hv := range r.ResponseHeadersToAdd {
				switch strings.ToLower(hv.Key) {
				case "retry-after", "x-ratelimit-reset", "ratelimit-reset":
					t.Errorf("header %s: %s on a request that never passes", hv.Key, hv.Value)
				case "ratelimit":
					if strings.Contains(hv.Value, "t=") {
						t.Errorf("RateLimit: %s: a t= on a request that never passes", hv.Value)
					}
				}
			}
			if r := f.ask(t, "api", 1, desc("tenant", "t")); r.Statuses[0].LimitRemaining != 99 {
				t.Errorf("tenant after the refused request: %d remaining, want 99", r.Statuses[0].LimitRemaining)
			}
		})
	}
}

// A stored key costs a bounded size whatever the values: a value longer
// than MaxKeptValue is kept as KeptHashLen bytes, distinct values keep
// distinct keys, and a hashed value never shares a key with one kept as
// it is.
func TestLongValuesAreHashedInKeys(t *testing.T) {
	c := newFixture(t, envoyrls.Options{}, usersConfig).srv.Config()
	key := func(v string) string {
		return c.Match("api", desc("user", v).Entries).Key
	}
	short := strings.Repeat("s", envoyrls.MaxKeptValue)
	if k := key(short); !strings.Contains(k, short) {
		t.Errorf("a value of %d bytes: key %q, want it kept as it is", len(short), k)
	}
	seen := map[string]string{}
	for _, n := range []int{envoyrls.MaxKeptValue + 1, 1000, 1 << 20} {
		for _, c := range "ab" {
			v := strings.Repeat(string(c), n)
			k := key(v)
			if bound := len("4:user") + envoyrls.KeptHashLen; len(k) != bound {
				t.Errorf("a value of %d bytes: key of %d bytes, want %d", n, len(k), bound)
			}
			if o, dup := seen[k]; dup {
				t.Errorf("values of %d bytes %q… and %q… share key %q", n, o[:4], v[:4], k)
			}
			seen[k] = v
			// A value written as the hashed form is kept as it is: never
			// the same key.
			if k2 := key(strings.TrimPrefix(k, "4:user")); k2 == k {
				t.Errorf("the hashed form of a %d-byte value, sent as a value, has its key", n)
			}
		}
	}
}

// A flood of distinct long values keeps each stored key to a bounded size:
// 200 requests of distinct 1 MB values (under a bound raised to take them)
// store 200 keys of at most the bound each, not 200 MB; with the default
// bound the same requests are refused, storing nothing.
func TestLongValueFloodKeysBounded(t *testing.T) {
	for _, tc := range []struct {
		name   string
		opts   envoyrls.Options
		stored bool
	}{{"raised", envoyrls.Options{MaxValueBytes: 2 << 20}, true}, {"default", envoyrls.Options{}, false}} {
		t.Run(tc.name, func(t *testing.T) {
			ms := newMeasuredStore()
			var store backend.Backend = plain{ms}
			f := newFixtureOn(t, store, tc.opts, usersConfig)
			v := []byte(strings.Repeat("v", 1<<20))
			for i := range 200 {
				copy(v, fmt.Sprintf("%08d", i))
				_, err := f.srv.ShouldRateLimit(context.Background(), &rlspb.RateLimitRequest{Domain: "api", Descriptors: []*rlv3.RateLimitDescriptor{desc("user", string(v))}})
				if st, _ := status.FromError(err); tc.stored && err != nil || !tc.stored && st.Code() != codes.InvalidArgument {
					t.Fatalf("request %d: %v", i, err)
				}
			}
			keys, maxKey, total := ms.stats()
			if !tc.stored {
				if keys != 0 {
					t.Fatalf("refused requests stored %d keys", keys)
				}
				return
			}
			// The key: the namespace's length, the limit's path, then
			// "4:user" and the hashed value.
			bound := 1 + len("api.user") + len("4:user") + envoyrls.KeptHashLen
			if keys != 200 || maxKey > bound || total > 200*bound {
				t.Fatalf("200 distinct 1 MB values: %d keys, the longest %d bytes, %d in all; want 200 keys of at most %d bytes", keys, maxKey, total, bound)
			}
		})
	}
}

// The metric labels that detailed_metric builds from request values are
// bounded in bytes: a long value is cut to its first bytes and a hash,
// and two long values sharing their first bytes keep two series.
func TestMetricLabelsBoundedInBytes(t *testing.T) {
	f := newFixture(t, envoyrls.Options{}, detailed)
	prefix := strings.Repeat("p", 100)
	f.ask(t, "api", 0, desc("user", prefix+"1"))
	f.ask(t, "api", 0, desc("user", prefix+"2"))
	f.ask(t, "api", 0, desc("user", strings.Repeat("é", 30_000)))
	n := 0
	for _, s := range f.metrics.Counts().Series {
		if len(s.Descriptor) > envoyrls.MaxLabel || len(s.Descriptor) > len("user_")+envoyrls.MaxLabelValue+33 {
			t.Errorf("label of %d bytes: %.80q…", len(s.Descriptor), s.Descriptor)
		}
		if !utf8Valid(s.Descriptor) {
			t.Errorf("label %q is not UTF-8", s.Descriptor)
		}
		if strings.HasPrefix(s.Descriptor, "user_") {
			n++
		}
	}
	if n != 3 {
		t.Errorf("%d series for three long values, want 3", n)
	}
}

// measuredStore is the memory store seen through backend.Backend alone,
// counting the bytes of the keys it holds.
type measuredStore struct {
	*memory.Store
	mu   sync.Mutex
	keys map[string]bool
}

func newMeasuredStore() *measuredStore {
	return &measuredStore{Store: memory.New(&memory.Options{SweepInterval: -1}), keys: map[string]bool{}}
}

// Put stores the record and notes its key.
func (m *measuredStore) Put(key, value []byte, expiresAt int64) error {
	m.mu.Lock()
	m.keys[string(key)] = true
	m.mu.Unlock()
	return m.Store.Put(key, value, expiresAt)
}

// stats returns the keys written, the longest's bytes, and their bytes in all.
func (m *measuredStore) stats() (keys, longest, total int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for k := range m.keys {
		keys++
		longest = max(longest, len(k))
		total += len(k)
	}
	return keys, longest, total
}

// plain hides every capability of a store but backend.Backend.
type plain struct{ backend.Backend }

func utf8Valid(s string) bool { return utf8.ValidString(s) }
