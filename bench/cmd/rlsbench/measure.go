package main

import (
	"context"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluice-go/sluice/bench"
)

// callTimeout bounds one ShouldRateLimit call; one that takes longer
// counts as an error (DEADLINE_EXCEEDED).
const callTimeout = 5 * time.Second

// requestFunc returns the request of the i-th call of a run.
type requestFunc func(i uint64) *rlspb.RateLimitRequest

func entries(kv ...string) *rlv3.RateLimitDescriptor {
	d := &rlv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &rlv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

// tenantUser is the first table's request: (tenant, user) and (tenant) in
// domain bench, users in turn from keys.
func tenantUser(keys int) requestFunc {
	return func(i uint64) *rlspb.RateLimitRequest {
		u := strconv.FormatUint(i%uint64(keys), 10)
		return &rlspb.RateLimitRequest{Domain: "bench", Descriptors: []*rlv3.RateLimitDescriptor{
			entries("tenant", "t", "user", u),
			entries("tenant", "t"),
		}}
	}
}

// hotKey is one descriptor, the same on every call, limited to 500/s.
func hotKey(uint64) *rlspb.RateLimitRequest {
	return &rlspb.RateLimitRequest{Domain: "fleet", Descriptors: []*rlv3.RateLimitDescriptor{entries("hot", "h")}}
}

// fleetUsers is one user descriptor, users in turn from n, each limited
// to 100/s.
func fleetUsers(n int) requestFunc {
	return func(i uint64) *rlspb.RateLimitRequest {
		u := strconv.FormatUint(i%uint64(n), 10)
		return &rlspb.RateLimitRequest{Domain: "fleet", Descriptors: []*rlv3.RateLimitDescriptor{entries("user", u)}}
	}
}

// burstKey is the burst descriptor of value v, limited to 100/min.
func burstKey(v string) requestFunc {
	return func(uint64) *rlspb.RateLimitRequest {
		return &rlspb.RateLimitRequest{Domain: "fleet", Descriptors: []*rlv3.RateLimitDescriptor{entries("burst", v)}}
	}
}

// result is one measurement.
type result struct {
	calls          int64
	rate, p50, p99 float64 // calls per second; microseconds
	ok, over, errs int64
	firstErr       error
	redis          *bench.ServerDelta // nil when the store is not Redis
}

// run makes calls through c from n concurrent callers, each calling again
// as soon as its last call returned, until d has passed or, when limit is
// positive, limit calls have begun. The callers start together.
func run(c rlspb.RateLimitServiceClient, n int, d time.Duration, limit int64, req requestFunc, next *atomic.Uint64) result {
	var wg sync.WaitGroup
	lat := make([][]time.Duration, n)
	var ok, over, errs, begun atomic.Int64
	var errOnce sync.Once
	var firstErr error
	startGate := make(chan struct{})
	var stop time.Time
	for g := 0; g < n; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-startGate
			for time.Now().Before(stop) {
				if limit > 0 && begun.Add(1) > limit {
					return
				}
				r := req(next.Add(1))
				ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
				t0 := time.Now()
				resp, err := c.ShouldRateLimit(ctx, r)
				lat[g] = append(lat[g], time.Since(t0))
				cancel()
				switch {
				case err != nil:
					errs.Add(1)
					errOnce.Do(func() { firstErr = err })
				case resp.OverallCode == rlspb.RateLimitResponse_OK:
					ok.Add(1)
				case resp.OverallCode == rlspb.RateLimitResponse_OVER_LIMIT:
					over.Add(1)
				default:
					errs.Add(1)
					errOnce.Do(func() { firstErr = unknownCode(resp.OverallCode) })
				}
			}
		}()
	}
	start := time.Now()
	stop = start.Add(d)
	close(startGate)
	wg.Wait()
	elapsed := time.Since(start)
	var all []time.Duration
	for _, l := range lat {
		all = append(all, l...)
	}
	slices.Sort(all)
	res := result{calls: int64(len(all)), ok: ok.Load(), over: over.Load(), errs: errs.Load(), firstErr: firstErr}
	if len(all) > 0 {
		q := func(p float64) float64 { return float64(all[int(p*float64(len(all)-1))]) / 1e3 }
		res.rate, res.p50, res.p99 = float64(len(all))/elapsed.Seconds(), q(0.50), q(0.99)
	}
	return res
}

type unknownCode rlspb.RateLimitResponse_Code

func (u unknownCode) Error() string {
	return "overall code " + rlspb.RateLimitResponse_Code(u).String()
}
