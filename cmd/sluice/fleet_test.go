//go:build unix

package main

import (
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-go/sluice/backend/redis"
	"github.com/sluice-go/sluice/backend/redis/redistest"
	"github.com/sluice-go/sluice/internal/loadgen/serveproc"
)

// These tests run a fleet of real `sluice serve` processes on one real
// redis-server, each proxying to a real upstream over loopback HTTP, and
// spread a test's requests over them as a load balancer would.

// fleetClient is the HTTP client of the fleet tests: enough idle
// connections for every concurrent client of the contention test.
var fleetClient = &http.Client{
	Timeout:   10 * time.Second,
	Transport: &http.Transport{MaxIdleConnsPerHost: 64},
}

// fleet is a set of serve processes sharing one configuration file.
type fleet struct {
	procs []*serveproc.Process
	cfg   string
}

// startFleet starts n serve processes on the configuration file cfg,
// proxying to a trivial upstream, and stops them when the test ends.
func startFleet(t *testing.T, n int, cfg string) *fleet {
	t.Helper()
	bin := buildBinary(t)
	up := upstream(t)
	f := &fleet{cfg: cfg}
	dir := t.TempDir()
	for i := range n {
		p, err := serveproc.Start(bin, cfg, up.URL, filepath.Join(dir, fmt.Sprintf("serve-%d.log", i)), processTimeout)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if code, err := p.Stop(10 * time.Second); err != nil || code != 0 {
				t.Errorf("serve %d: exit %d, %v; log:\n%s", i, code, err, p.Log())
			}
		})
		f.procs = append(f.procs, p)
	}
	return f
}

// order sends one POST /api/orders as user to process i and returns the
// status and headers.
func (f *fleet) order(t *testing.T, i int, user string) (int, http.Header) {
	t.Helper()
	req, err := http.NewRequest("POST", "http://"+f.procs[i].Listen+"/api/orders", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-User-ID", user)
	resp, err := fleetClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, resp.Header
}

// try sends one POST /api/orders as user to process i from a goroutine of
// its own, and returns the status, or -1 when the request failed.
func (f *fleet) try(i int, user string) int {
	req, _ := http.NewRequest("POST", "http://"+f.procs[i].Listen+"/api/orders", nil)
	req.Header.Set("X-User-ID", user)
	resp, err := fleetClient.Do(req)
	if err != nil {
		return -1
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// spread sends users × each orders from clients concurrent clients, order
// n as user-(n mod users) to process n mod the fleet's size, and returns
// each user's statuses.
func (f *fleet) spread(users, each, clients int) map[string]map[int]int {
	jobs := make(chan int, users*each)
	for n := range users * each {
		jobs <- n
	}
	close(jobs)
	var (
		mu     sync.Mutex
		counts = map[string]map[int]int{}
		wg     sync.WaitGroup
	)
	for range clients {
		wg.Go(func() {
			for n := range jobs {
				user := fmt.Sprintf("user-%d", n%users)
				code := f.try(n%len(f.procs), user)
				mu.Lock()
				if counts[user] == nil {
					counts[user] = map[int]int{}
				}
				counts[user][code]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return counts
}

// roundRobin sends n orders as user, the k-th to process (start+k) mod
// the fleet's size, and returns the statuses; every 429 must carry a
// Retry-After of at least a second.
func (f *fleet) roundRobin(t *testing.T, user string, start, n int) []int {
	t.Helper()
	var codes []int
	for k := range n {
		code, h := f.order(t, (start+k)%len(f.procs), user)
		if code == 429 {
			if ra, err := strconv.Atoi(h.Get("Retry-After")); err != nil || ra < 1 {
				t.Errorf("%s's 429 from process %d: Retry-After %q, want whole seconds, at least 1", user, (start+k)%len(f.procs), h.Get("Retry-After"))
			}
		}
		codes = append(codes, code)
	}
	return codes
}

// metric reads one series from process i's /metrics (0 when absent).
func (f *fleet) metric(t *testing.T, i int, series string) float64 {
	t.Helper()
	return metricValue(t, f.procs[i].Admin, series)
}

// waitEach waits until cond holds for every process, within a generous
// ceiling: conditions are the processes' own counters and answers, never
// the wall clock.
func (f *fleet) waitEach(t *testing.T, what string, cond func(i int) bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for i := range f.procs {
		for !cond(i) {
			if time.Now().After(deadline) {
				t.Fatalf("process %d: %s: not within 30s; log:\n%s", i, what, f.procs[i].Log())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// wantExactly checks that codes are limit 200s followed by 429s.
func wantExactly(t *testing.T, who string, codes []int, limit int) {
	t.Helper()
	for k, c := range codes {
		want := 200
		if k >= limit {
			want = 429
		}
		if c != want {
			t.Errorf("%s: %v, want exactly %d × 200 then 429s", who, codes, limit)
			return
		}
	}
}

// Three gateways on one Redis: each user gets exactly the limit across
// the three. With Redis stopped, on_store_error closed answers 503 and
// local limits each gateway to its share, ceil(10/3) = 4; with Redis back,
// a fresh user gets exactly the shared limit again.
func TestFleetSharesOneBudget(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs a fleet")
	}
	t.Parallel()
	rs := redistest.Start(t)
	waitAwayFromDayBoundary(t)
	cfg := filepath.Join(t.TempDir(), "fleet.yaml")
	prefix := testPrefix(t)
	writeFile(t, cfg, redisGateway(rs.Addr, prefix, "closed", 10, 3))
	f := startFleet(t, 3, cfg)

	// Several users, their requests interleaved and spread over the three.
	users := []string{"ann", "bob", "cy", "dee", "eve"}
	got := make(map[string][]int)
	for k := range 13 {
		for u, user := range users {
			code, h := f.order(t, (u+k)%3, user)
			if code == 429 && h.Get("Retry-After") == "" {
				t.Errorf("%s's 429 has no Retry-After", user)
			}
			got[user] = append(got[user], code)
		}
	}
	for _, user := range users {
		wantExactly(t, user+" across three gateways", got[user], 10)
	}

	// Redis stops: closed answers 503 on every gateway.
	rs.Stop()
	for i := range f.procs {
		if code, _ := f.order(t, i, "closed-user"); code != 503 {
			t.Errorf("process %d with Redis down under closed: %d, want 503", i, code)
		}
	}

	// The policy reloads to local: each gateway limits alone, to its
	// share of 4, and counts it.
	ok := `sluice_config_reloads_total{result="ok"}`
	replaceFile(t, cfg, redisGateway(rs.Addr, prefix, "local", 10, 3))
	f.waitEach(t, "the reload to local", func(i int) bool { return f.metric(t, i, ok) >= 1 })
	for i := range f.procs {
		var codes []int
		for range 6 {
			code, _ := f.order(t, i, "local-user")
			codes = append(codes, code)
		}
		wantExactly(t, fmt.Sprintf("local-user on process %d with Redis down", i), codes, 4)
		if a, d := f.metric(t, i, `sluice_local_decisions_total{decision="allowed",rule="orders"}`), f.metric(t, i, `sluice_local_decisions_total{decision="denied",rule="orders"}`); a != 4 || d != 2 {
			t.Errorf("process %d: local decisions %v allowed, %v denied; want 4 and 2", i, a, d)
		}
		if n := f.metric(t, i, `sluice_store_errors_total{policy="local",rule="orders"}`); n < 6 {
			t.Errorf("process %d: %v store errors under local, want at least 6", i, n)
		}
	}

	// Redis is back (empty: it keeps nothing on disk here). Each gateway
	// returns to it by itself: its next decision is Redis' (the limit
	// header is the rule's 10, not the share's 4) once the breaker lets a
	// probe through.
	if err := rs.Start(); err != nil {
		t.Fatal(err)
	}
	probe := 0
	f.waitEach(t, "a decision by Redis again", func(i int) bool {
		probe++
		code, h := f.order(t, i, fmt.Sprintf("probe-%d", probe))
		return code == 200 && h.Get("X-RateLimit-Limit") == "10"
	})
	for u, user := range []string{"back-1", "back-2"} {
		wantExactly(t, user+" across three gateways once Redis is back", f.roundRobin(t, user, u, 13), 10)
	}
}

// Four gateways × 16 concurrent clients on one user key under a fixed
// window of 100: exactly 100 allowed across the fleet, every other request
// denied, none failed.
func TestFleetContention(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs a fleet")
	}
	rs := redistest.Start(t)
	waitAwayFromDayBoundary(t)
	cfg := filepath.Join(t.TempDir(), "fleet.yaml")
	writeFile(t, cfg, redisGateway(rs.Addr, testPrefix(t), "closed", 100, 4))
	f := startFleet(t, 4, cfg)

	const clients, each = 16, 8 // 4 × 16 × 8 = 512 requests for a budget of 100
	var (
		mu     sync.Mutex
		counts = map[int]int{}
		wg     sync.WaitGroup
		start  = make(chan struct{})
	)
	for i := range f.procs {
		for range clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				for range each {
					code := f.try(i, "hot")
					mu.Lock()
					counts[code]++
					mu.Unlock()
				}
			}()
		}
	}
	close(start)
	wg.Wait()
	total := len(f.procs) * clients * each
	if counts[200] != 100 || counts[429] != total-100 {
		t.Errorf("statuses %v over %d requests, want exactly 100 × 200 and %d × 429", counts, total, total-100)
	}
	allowed := 0.0
	for i := range f.procs {
		allowed += f.metric(t, i, `sluice_decisions_total{decision="allowed",rule="orders"}`)
	}
	if allowed != 100 {
		t.Errorf("the processes counted %v allowed in all, want 100", allowed)
	}
}

// Three gateways with the store's defaults (the deadline, the breaker), on
// one Redis, while two busy loops take both cores: 24 concurrent clients
// send 5 users × 60 orders spread over the gateways. A healthy Redis
// behind busy gateways is never refused: each user gets exactly the limit,
// every other request a 429, none a 503. (Where this machine runs too late
// for the 50ms default deadline, as TestFleetAllModeSharedKey judges, the
// 503s are logged, not judged: then no user gets more than the limit, or
// fewer than the limit less one per 503, and the store errors the gateways
// count are those 503s.)
func TestFleetDefaultsOnABusyMachine(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs a fleet")
	}
	rs := redistest.Start(t)
	waitAwayFromDayBoundary(t)
	cfg := filepath.Join(t.TempDir(), "fleet.yaml")
	// The store's defaults: the file names no timeout.
	writeFile(t, cfg, strings.Replace(redisGateway(rs.Addr, testPrefix(t), "closed", 20, 3), "    timeout: 1s\n", "", 1))
	f := startFleet(t, 3, cfg)
	for range 2 {
		busy := exec.Command("sh", "-c", "while :; do :; done")
		if err := busy.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { busy.Process.Kill(); busy.Wait() })
	}

	const users, each, clients = 5, 60, 24
	stop := make(chan struct{})
	late := redistest.Lateness(stop)
	counts := f.spread(users, each, clients)
	close(stop)
	worst := <-late
	refused := 0
	for _, c := range counts {
		refused += c[503]
	}
	excused := refused > 0 && redis.DefaultTimeout/2+3*worst+redis.DefaultTimeout/4 > redis.DefaultTimeout
	if excused {
		t.Logf("%d × 503, not judged: this process' timers were up to %v late beside the %v deadline", refused, worst, redis.DefaultTimeout)
	}
	for u := range users {
		user := fmt.Sprintf("user-%d", u)
		c := counts[user]
		if !excused && (c[200] != 20 || c[429] != each-20) ||
			excused && (c[200] > 20 || c[200]+c[503] < 20 || c[200]+c[429]+c[503] != each) {
			t.Errorf("%s: statuses %v, want exactly 20 × 200 and %d × 429", user, c, each-20)
		}
	}
	storeErrs := 0.0
	for i := range f.procs {
		errs := f.metric(t, i, `sluice_store_errors_total{policy="closed",rule="orders"}`)
		storeErrs += errs
		if errs != 0 && !excused {
			t.Errorf("gateway %d counted %v store errors; log:\n%s", i, errs, f.procs[i].Log())
		}
		// The breaker's metrics: calls went to Redis, none failed, it
		// never opened.
		if calls := f.metric(t, i, "sluice_store_calls_total"); calls == 0 {
			t.Errorf("gateway %d: sluice_store_calls_total = 0 after %d requests", i, users*each/len(f.procs))
		}
		for _, series := range []string{"sluice_store_call_failures_total", "sluice_store_breaker_opened_total", "sluice_store_breaker_open"} {
			if excused && series == "sluice_store_call_failures_total" {
				continue // the late calls, counted as store errors above
			}
			if got := f.metric(t, i, series); got != 0 {
				t.Errorf("gateway %d: %s = %v, want 0", i, series, got)
			}
		}
	}
	if excused && storeErrs != float64(refused) {
		t.Errorf("the gateways counted %v store errors, want the %d answered 503", storeErrs, refused)
	}
}

// Three gateways on the store's defaults decide every order under two
// rules at once (match: all): the user's own limit and one global limit
// that every request names, so each gateway's calls queue on the global
// key and are committed together. 64 concurrent clients send 60 users × 5
// orders: the global limit admits exactly its 100 across the fleet, no
// user more than its 3, a refused order spends nothing, and no request
// is refused for the store. (Where this machine runs too late for the
// 50ms default deadline, as TestServeRedisScriptsPerDecision judges, the
// 503s are logged, not judged: then the global limit admits at most its
// 100, less at most one per 503.)
func TestFleetAllModeSharedKey(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs a fleet")
	}
	rs := redistest.Start(t)
	waitAwayFromDayBoundary(t)
	cfg := filepath.Join(t.TempDir(), "fleet.yaml")
	writeFile(t, cfg, fmt.Sprintf(`store:
  backend: redis
  redis:
    addrs: [%s]
    key_prefix: %q
on_store_error: closed
match: all
rules:
  - name: orders-user
    method: POST
    path_prefix: /api/orders
    scope: user
    algorithm: fixed_window
    limit: 3
    window: 24h
  - name: orders-global
    method: POST
    path_prefix: /api/orders
    scope: global
    algorithm: fixed_window
    limit: 100
    window: 24h
`, rs.Addr, testPrefix(t)))
	f := startFleet(t, 3, cfg)

	const users, each, clients = 60, 5, 64
	stop := make(chan struct{})
	late := redistest.Lateness(stop)
	byUser := f.spread(users, each, clients)
	close(stop)
	worst := <-late
	counts := map[int]int{}
	for _, c := range byUser {
		for code, n := range c {
			counts[code] += n
		}
	}
	excused := 0
	if counts[503] > 0 && redis.DefaultTimeout/2+3*worst+redis.DefaultTimeout/4 > redis.DefaultTimeout {
		t.Logf("%d × 503, not judged: this process' timers were up to %v late beside the %v deadline", counts[503], worst, redis.DefaultTimeout)
		excused = counts[503]
	}
	if counts[200] > 100 || counts[200]+excused < 100 || counts[200]+counts[429]+excused != users*each {
		t.Fatalf("statuses %v over %d orders, want exactly the global 100 × 200 and the rest 429 (no 503)", counts, users*each)
	}
	for user, c := range byUser {
		if c[200] > 3 {
			t.Errorf("%s admitted %d times, its limit is 3", user, c[200])
		}
	}
	allowed := 0.0
	for i := range f.procs {
		allowed += f.metric(t, i, `sluice_decisions_total{decision="allowed",rule="orders-global"}`)
	}
	if allowed != float64(counts[200]) {
		t.Errorf("the gateways counted %v allowed under orders-global, want the %d answered 200", allowed, counts[200])
	}
}
