package envoyrls_test

import (
	"context"
	"strconv"
	"testing"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluice-go/sluice/envoyrls"
)

// maxShouldRateLimitAllocs is what BenchmarkShouldRateLimit's request
// (two descriptors decided as one, on the memory store, with the default
// headers and metrics) allocated per call when this test was written: a
// change that allocates more fails here, and one that allocates less
// should lower it.
const maxShouldRateLimitAllocs = 15

// ShouldRateLimit's allocations per call are pinned.
func TestShouldRateLimitAllocs(t *testing.T) {
	if testing.CoverMode() != "" || raceEnabled {
		t.Skip("coverage instrumentation allocates; under the race detector sync.Pool drops items")
	}
	f := newFixture(t, envoyrls.Options{}, benchConfig)
	reqs := make([]*rlspb.RateLimitRequest, 1000)
	for i := range reqs {
		reqs[i] = &rlspb.RateLimitRequest{Domain: "bench", Descriptors: []*rlv3.RateLimitDescriptor{
			desc("tenant", "t", "user", strconv.Itoa(i)), desc("tenant", "t"),
		}}
	}
	for _, r := range reqs { // every key has its record: the steady state
		if _, err := f.srv.ShouldRateLimit(context.Background(), r); err != nil {
			t.Fatal(err)
		}
	}
	i := 0
	got := testing.AllocsPerRun(2000, func() {
		if _, err := f.srv.ShouldRateLimit(context.Background(), reqs[i%len(reqs)]); err != nil {
			t.Fatal(err)
		}
		i++
	})
	if got > maxShouldRateLimitAllocs {
		t.Errorf("ShouldRateLimit allocates %v times per call, want at most %d", got, maxShouldRateLimitAllocs)
	}
	t.Logf("%v allocations per call", got)
}
