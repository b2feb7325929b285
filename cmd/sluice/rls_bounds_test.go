package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	grpccodes "google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// rssBytes reads a process's resident set from /proc; the test is skipped
// where there is none.
func rssBytes(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Skipf("no /proc to read a process's RSS: %v", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatalf("VmRSS %q: %v", v, err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmRSS in /proc status")
	return 0
}

// Hostile requests through the real process: 100 KiB of metadata is
// refused and the process serves on; 100,000 descriptors are
// refused INVALID_ARGUMENT by default, as is a value of 1 MB; with the
// value bound raised, 200 requests of distinct 1 MB values under a
// per-day limit (each a budget kept for the day) keep a bounded key each:
// the process's RSS grows by far less than the values' 200 MB.
func TestRLSProcessHostileRequests(t *testing.T) {
	t.Parallel()
	// Each call gets a minute, the whole test no bound of its own: on a
	// loaded machine the 220 MB the race-instrumented client marshals can
	// take longer than a minute in all.
	call := func() context.Context {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		t.Cleanup(cancel)
		return ctx
	}
	p := startRLS(t, "--config", "testdata/rls/sluice")
	many := &rlspb.RateLimitRequest{Domain: "api"}
	for i := range 100_000 {
		many.Descriptors = append(many.Descriptors, rd("tenant", strconv.Itoa(i)))
	}
	_, err := p.client.ShouldRateLimit(call(), many)
	if st, _ := status.FromError(err); st.Code() != grpccodes.InvalidArgument || !strings.Contains(st.Message(), "100000 descriptors, over the 64 allowed") {
		t.Fatalf("100,000 descriptors: %v, want INVALID_ARGUMENT naming the bound", err)
	}
	// Metadata past 64 KiB is refused; the process serves on.
	big := metadata.AppendToOutgoingContext(call(), "x-pad", strings.Repeat("m", 100<<10))
	if _, err := p.client.ShouldRateLimit(big, &rlspb.RateLimitRequest{Domain: "api", Descriptors: []*rlv3.RateLimitDescriptor{rd("tenant", "m")}}); err == nil {
		t.Fatal("a call with 100 KiB of metadata was answered")
	}
	p.ask(t, "api", 0, rd("tenant", "m"))
	mb := strings.Repeat("v", 1<<20)
	_, err = p.client.ShouldRateLimit(call(), &rlspb.RateLimitRequest{Domain: "api", Descriptors: []*rlv3.RateLimitDescriptor{rd("tenant", mb)}})
	if st, _ := status.FromError(err); st.Code() != grpccodes.InvalidArgument || len(st.Message()) > 300 {
		t.Fatalf("a 1 MB value: %v, want a short INVALID_ARGUMENT", err)
	}

	raised := startRLS(t, "--config", "testdata/rls/sluice", "--max-value-bytes", strconv.Itoa(2<<20))
	pid := raised.cmd.Process.Pid
	v := []byte(mb)
	flood := func(from, to int) {
		for i := from; i < to; i++ {
			copy(v, fmt.Sprintf("%08d", i))
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			_, err := raised.client.ShouldRateLimit(ctx, &rlspb.RateLimitRequest{Domain: "api", Descriptors: []*rlv3.RateLimitDescriptor{rd("tenant", string(v))}})
			cancel()
			if err != nil {
				t.Fatalf("value %d: %v", i, err)
			}
		}
	}
	// The first requests grow gRPC's buffers and the heap to what a 1 MB
	// request needs; the 200 after them must add no more than a few.
	flood(0, 20)
	before := rssBytes(t, pid)
	flood(20, 220)
	after := rssBytes(t, pid)
	keys := metricValue(t, raised.admin, "sluice_keys")
	t.Logf("RSS %d MB after 20 values of 1 MB, %d MB after 200 more; %v keys", before>>20, after>>20, keys)
	if keys != 220 {
		t.Errorf("%v keys held, want 220 (one per distinct value)", keys)
	}
	if grew := after - before; grew > 64<<20 {
		t.Errorf("200 distinct 1 MB values grew RSS by %d MB, want a bounded key each (under 64 MB in all)", grew>>20)
	}
}
