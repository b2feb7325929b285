package redis_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-go/sluice/algo"
	"github.com/sluice-go/sluice/backend/redis"
	"github.com/sluice-go/sluice/engine"
)

// fleetEnv carries, to a gateway process of TestLeasesFleetOfProcesses,
// the Redis address, the key prefix and the upstream's URL.
const fleetEnv = "SLUICE_TEST_LEASE_GATEWAY"

// TestLeasesFleetOfProcesses: three gateway processes on one real
// redis-server share a concurrency limit of 10 for one tenant; each runs
// 8 callers that take a slot, call the upstream (an HTTP server of this
// process, which counts the requests in flight) and give the slot back.
// The upstream never sees more than 10 at once.
func TestLeasesFleetOfProcesses(t *testing.T) {
	if v := os.Getenv(fleetEnv); v != "" {
		runGateway(t, strings.Split(v, "|"))
		return
	}
	if testing.Short() {
		t.Skip("runs three gateway processes")
	}
	addr := server(t).Addr
	var inFlight, peak, served atomic.Int64
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c := inFlight.Add(1)
		for p := peak.Load(); c > p && !peak.CompareAndSwap(p, c); p = peak.Load() {
		}
		time.Sleep(5 * time.Millisecond) // the request's work, long enough to overlap others
		served.Add(1)
		inFlight.Add(-1)
	}))
	defer upstream.Close()
	pfx := fmt.Sprintf("%s%d:", prefix(t), time.Now().UnixNano())
	var wg sync.WaitGroup
	errs := make(chan error, 3)
	for i := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmd := exec.Command(os.Args[0], "-test.run=^TestLeasesFleetOfProcesses$", "-test.count=1", "-test.v")
			cmd.Env = append(os.Environ(), fleetEnv+"="+addr+"|"+pfx+"|"+upstream.URL)
			out, err := cmd.CombinedOutput()
			if err != nil {
				errs <- fmt.Errorf("gateway %d: %v\n%s", i, err, out)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	t.Logf("the upstream served %d requests, at most %d at once", served.Load(), peak.Load())
	if peak.Load() > 10 || served.Load() < 10 {
		t.Fatalf("the upstream saw %d in flight (limit 10), served %d", peak.Load(), served.Load())
	}
}

// runGateway is one gateway process: 8 callers, 25 requests each.
func runGateway(t *testing.T, args []string) {
	addr, pfx, upstream := args[0], args[1], args[2]
	s, err := redis.Open(redis.ClientOptions{Addrs: []string{addr}}, &redis.Options{KeyPrefix: pfx, Timeout: testTimeout})
	if err != nil {
		t.Fatal(err)
	}
	// The default retries, as in TestLeasesFleetWide: every request
	// writes the key twice.
	e, err := engine.New(s, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	l := engine.Limit{Namespace: "inflight", Algorithm: algo.MustNew(algo.ConcurrencyName, algo.Params{Limit: 10, Window: time.Minute})}
	ctx := context.Background()
	var wg sync.WaitGroup
	var failed atomic.Value
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 25 {
				ls, err := e.Acquire(ctx, l, "tenant")
				if err != nil {
					failed.Store(err)
					return
				}
				if !ls.Decision.Allowed {
					continue
				}
				resp, err := http.Get(upstream)
				if err == nil {
					resp.Body.Close()
				}
				if _, err := ls.Release(ctx); err != nil {
					failed.Store(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		t.Fatal(err)
	}
}
