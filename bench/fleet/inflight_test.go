//go:build unix

package fleet

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2/client"

	"github.com/sluice-go/sluice/backend/redis/redistest"
	"github.com/sluice-go/sluice/internal/loadgen/serveproc"
)

// In-flight limits across a fleet, under load and faults: 3 gateways in
// front of one slow upstream (50-200 ms a request) that counts the
// requests in flight at it, 64 callers on one API key spread over the 3,
// beside 2 CPU burners. A concurrency rule of 10 per key on 3 `sluice
// serve` processes sharing a redis-server, against 3 nginx instances with
// limit_conn 10 per key, each on its own. Then the sluice fleet through
// toxiproxy to Redis, under reset connections, latency with jitter and a
// black hole, for each on_store_error policy.
//
// Checked, because it is deterministic: under on_store_error: closed the
// upstream never counts more than 10 requests in flight, faults or not,
// and every answer is 200, 429 or 503. The rest (nginx's count, open's
// and local's, the statuses, the latencies, how soon the fleet is back at
// 10 in flight) is measured and logged: `make inflight` prints it, and
// bench/INFLIGHT.md keeps a run's figures.

const (
	inflightLimit   = 10
	inflightCallers = 64
	inflightHold    = 2 * time.Second // the rule's max_hold
	inflightKey     = "k-fleet"
)

// inflightUpstream answers every request after 50 to 200 ms (or when its
// client goes away) and counts the requests in flight at it, and the most
// there were since the last peak.
type inflightUpstream struct {
	URL            string
	inFlight, most atomic.Int64
	after          atomic.Int64 // a time (UnixNano) after which requests count in fresh too; none when 0
	fresh          atomic.Int64 // the requests in flight that entered after after
}

func startInflightUpstream(t *testing.T) *inflightUpstream {
	t.Helper()
	u := &inflightUpstream{}
	url, closeFn, err := serveproc.Upstream(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := u.inFlight.Add(1)
		defer u.inFlight.Add(-1)
		for m := u.most.Load(); n > m && !u.most.CompareAndSwap(m, n); m = u.most.Load() {
		}
		if a := u.after.Load(); a != 0 && time.Now().UnixNano() > a {
			u.fresh.Add(1)
			defer u.fresh.Add(-1)
		}
		select {
		case <-time.After(50*time.Millisecond + rand.N(150*time.Millisecond)):
		case <-r.Context().Done():
			return
		}
		io.WriteString(w, "ok")
	}))
	if err != nil {
		t.Fatal(err)
	}
	u.URL = url
	t.Cleanup(func() { closeFn() })
	return u
}

// peak returns the most requests in flight at once since the last peak,
// and starts the next count from those in flight now.
func (u *inflightUpstream) peak() int64 { return u.most.Swap(u.inFlight.Load()) }

// inflightCall is one request's answer: its phase, status (-1 for a
// transport error) and how long it took.
type inflightCall struct {
	phase  int
	status int
	took   time.Duration
}

// phaseFigures is what a phase of a run measured.
type phaseFigures struct {
	name     string
	statuses map[int]int
	p50, p99 time.Duration
	most     int64 // the most requests in flight at the upstream at once
}

func (f phaseFigures) String() string {
	return fmt.Sprintf("%-22s most in flight %3d  200=%-5d 429=%-5d 503=%-5d other=%-3d p50 %-8v p99 %v",
		f.name, f.most, f.statuses[200], f.statuses[429], f.statuses[503],
		f.statuses[-1]+otherStatuses(f.statuses), f.p50.Round(100*time.Microsecond), f.p99.Round(100*time.Microsecond))
}

func otherStatuses(m map[int]int) int {
	n := 0
	for s, c := range m {
		if s != 200 && s != 429 && s != 503 && s != -1 {
			n += c
		}
	}
	return n
}

// phase is a step of a run: what starts it, and how long it lasts.
type phase struct {
	name  string
	start func()
	lasts time.Duration
}

// driveInflight sends requests on inflightKey from inflightCallers callers,
// each to the gateways in turn, through the phases, and returns each
// phase's figures. The upstream's peak is read at each phase's end.
func driveInflight(t *testing.T, up *inflightUpstream, gateways []string, phases []phase) []phaseFigures {
	t.Helper()
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: inflightCallers, MaxConnsPerHost: inflightCallers}}
	defer client.CloseIdleConnections()
	var (
		current atomic.Int64
		stop    atomic.Bool
		mu      sync.Mutex
		calls   []inflightCall
		wg      sync.WaitGroup
	)
	for c := range inflightCallers {
		wg.Go(func() {
			var mine []inflightCall
			for k := c; !stop.Load(); k++ {
				p := int(current.Load())
				req, _ := http.NewRequest(http.MethodGet, "http://"+gateways[k%len(gateways)]+"/v1/chat", nil)
				req.Header.Set("X-API-Key", inflightKey)
				start := time.Now()
				status := -1
				if resp, err := client.Do(req); err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					status = resp.StatusCode
				}
				mine = append(mine, inflightCall{phase: p, status: status, took: time.Since(start)})
				if status != 200 {
					// A refusal is answered at once: a client backs off a
					// little rather than spin (and the refusals would
					// otherwise be most of the machine's work).
					time.Sleep(time.Duration(5+rand.N(10)) * time.Millisecond)
				}
			}
			mu.Lock()
			calls = append(calls, mine...)
			mu.Unlock()
		})
	}
	// A phase's start that fails t ends this goroutine: the callers stop
	// with it.
	defer func() { stop.Store(true); wg.Wait() }()
	most := make([]int64, len(phases))
	up.peak()
	for i, ph := range phases {
		if ph.start != nil {
			ph.start()
		}
		current.Store(int64(i))
		time.Sleep(ph.lasts)
		most[i] = up.peak()
	}
	stop.Store(true)
	wg.Wait()
	if m := up.peak(); m > most[len(most)-1] {
		most[len(most)-1] = m // the last requests' ends
	}
	figures := make([]phaseFigures, len(phases))
	for i, ph := range phases {
		f := phaseFigures{name: ph.name, statuses: map[int]int{}, most: most[i]}
		var took []time.Duration
		for _, c := range calls {
			if c.phase == i {
				f.statuses[c.status]++
				took = append(took, c.took)
			}
		}
		if len(took) > 0 {
			slices.Sort(took)
			f.p50, f.p99 = took[len(took)/2], took[len(took)*99/100]
		}
		figures[i] = f
	}
	return figures
}

// inflightConfig is a serve configuration on Redis at addr with the
// concurrency rule of inflightLimit per API key and policy as its
// on_store_error.
func inflightConfig(t *testing.T, addr, prefix, policy string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "sluice.yaml")
	cfg := fmt.Sprintf(`store:
  backend: redis
  redis:
    addrs: [%s]
    key_prefix: %q
    fleet_size: 3
identity:
  api_key_header: X-API-Key
on_store_error: %s
rules:
  - name: in-flight
    path_prefix: /
    scope: api_key
    algorithm: concurrency
    limit: %d
    max_hold: %s
    retry_after: 1s
`, addr, prefix, policy, inflightLimit, inflightHold)
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// startServeFleet starts 3 serve processes of bin on cfg in front of up
// and returns their proxy addresses.
func startServeFleet(t *testing.T, bin, cfg, upURL string) []string {
	t.Helper()
	var addrs []string
	for i := range 3 {
		p, err := serveproc.Start(bin, cfg, upURL, filepath.Join(t.TempDir(), fmt.Sprintf("serve%d.log", i)), 60*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if !p.Exited() {
				p.Stop(10 * time.Second)
			}
		})
		addrs = append(addrs, p.Listen)
	}
	return addrs
}

// startNginx starts an nginx in front of upURL with limit_conn
// inflightLimit per X-API-Key, and returns its address.
func startNginx(t *testing.T, upURL string) string {
	t.Helper()
	dir := t.TempDir()
	addr, err := freeAddr()
	if err != nil {
		t.Fatal(err)
	}
	conf := fmt.Sprintf(`daemon off;
master_process off;
worker_processes 1;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log warn;
events { worker_connections 4096; }
http {
    access_log off;
    client_body_temp_path %[1]s/body;
    proxy_temp_path %[1]s/proxy;
    fastcgi_temp_path %[1]s/fastcgi;
    uwsgi_temp_path %[1]s/uwsgi;
    scgi_temp_path %[1]s/scgi;
    limit_conn_zone $http_x_api_key zone=perkey:1m;
    upstream app {
        server %[2]s;
        keepalive 64;
    }
    server {
        listen %[3]s;
        location / {
            limit_conn perkey %[4]d;
            limit_conn_status 429;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_pass http://app;
        }
    }
}
`, dir, strings.TrimPrefix(upURL, "http://"), addr, inflightLimit)
	path := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(nginxBin, "-p", dir, "-c", path, "-e", filepath.Join(dir, "error.log"))
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() { cmd.Process.Kill(); <-exited })
	for start := time.Now(); ; time.Sleep(20 * time.Millisecond) {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return addr
		}
		select {
		case <-exited:
			log, _ := os.ReadFile(filepath.Join(dir, "error.log"))
			t.Fatalf("nginx exited: %s\n%s", out.String(), log)
		default:
		}
		if time.Since(start) > 20*time.Second {
			t.Fatalf("nginx did not listen on %s within 20s", addr)
		}
	}
}

// startProxyNamed is startProxy with a proxy name of its own (toxiproxy's
// names are path segments of its API: a subtest's name has a slash).
func startProxyNamed(t *testing.T, name, upstream string) *proxy {
	t.Helper()
	p, err := toxics.CreateProxy(name, "127.0.0.1:0", upstream)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Delete() })
	return &proxy{p: p, Addr: p.Listen}
}

const nginxBin = "/usr/sbin/nginx"

// wantWithinLimit fails t for a phase with more than inflightLimit in
// flight at the upstream, or an answer other than 200, 429 or 503.
func wantWithinLimit(t *testing.T, figures []phaseFigures) {
	t.Helper()
	for _, f := range figures {
		if f.most > inflightLimit {
			t.Errorf("%s: the upstream counted %d requests in flight at once, over the fleet's limit of %d", f.name, f.most, inflightLimit)
		}
		if n := f.statuses[-1] + otherStatuses(f.statuses); n > 0 {
			t.Errorf("%s: %d answers other than 200, 429 or 503 (%v)", f.name, n, f.statuses)
		}
	}
}

// TestInFlightFleet: see the comment at the top of the file.
func TestInFlightFleet(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs fleets of processes")
	}
	bin, err := serveproc.Binary(context.Background(), os.Getenv("SLUICE_BIN"), ".", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	busy(t, 2)

	t.Run("sluice", func(t *testing.T) {
		rs := redistest.Start(t)
		up := startInflightUpstream(t)
		gws := startServeFleet(t, bin, inflightConfig(t, rs.Addr, "inflight:steady:", "closed"), up.URL)
		figures := driveInflight(t, up, gws, []phase{{name: "steady", lasts: 4 * time.Second}})
		t.Logf("3 × sluice serve on one Redis, concurrency 10 per key:\n%s", figures[0])
		wantWithinLimit(t, figures)
		if figures[0].statuses[200] < inflightLimit {
			t.Errorf("%v: want at least %d admitted", figures[0], inflightLimit)
		}
	})

	t.Run("nginx", func(t *testing.T) {
		if _, err := os.Stat(nginxBin); err != nil {
			t.Skipf("*** %s not found: the nginx comparison is SKIPPED (apt-get install -y nginx) ***", nginxBin)
		}
		up := startInflightUpstream(t)
		var gws []string
		for range 3 {
			gws = append(gws, startNginx(t, up.URL))
		}
		figures := driveInflight(t, up, gws, []phase{{name: "steady", lasts: 4 * time.Second}})
		t.Logf("3 × nginx, limit_conn 10 per key each:\n%s", figures[0])
	})

	for _, policy := range []string{"closed", "open", "local"} {
		t.Run("faults/"+policy, func(t *testing.T) {
			rs := redistest.Start(t)
			px := startProxyNamed(t, "inflight-"+policy, rs.Addr)
			up := startInflightUpstream(t)
			gws := startServeFleet(t, bin, inflightConfig(t, px.Addr, "inflight:"+policy+":", policy), up.URL)
			var cleared time.Time
			back := make(chan time.Duration, 1)
			figures := driveInflight(t, up, gws, []phase{
				{name: "steady", lasts: 1500 * time.Millisecond},
				{name: "reset_peer", lasts: time.Second, start: func() {
					px.add(t, "reset", "reset_peer", "downstream", toxiproxy.Attributes{"timeout": 0})
				}},
				{name: "latency 13±7ms", lasts: 2 * time.Second, start: func() {
					px.remove(t, "reset")
					px.add(t, "down", "latency", "downstream", toxiproxy.Attributes{"latency": 10, "jitter": 5})
					px.add(t, "up", "latency", "upstream", toxiproxy.Attributes{"latency": 3, "jitter": 2})
				}},
				{name: "black hole", lasts: time.Second, start: func() {
					px.remove(t, "down")
					px.remove(t, "up")
					px.add(t, "hole", "timeout", "downstream", toxiproxy.Attributes{"timeout": 0})
				}},
				{name: "cleared", lasts: inflightHold + time.Second, start: func() {
					px.remove(t, "hole")
					cleared = time.Now()
					up.after.Store(cleared.UnixNano())
					// How soon the upstream counts the limit in flight
					// again, of requests that entered after the fault
					// cleared: the slots the black hole left taken
					// (their takes reached Redis, the answers did not)
					// come back when their leases end.
					go func() {
						for time.Since(cleared) < inflightHold+time.Second {
							if up.fresh.Load() >= inflightLimit {
								back <- time.Since(cleared)
								return
							}
							time.Sleep(time.Millisecond)
						}
						back <- -1
					}()
				}},
			})
			var b strings.Builder
			for _, f := range figures {
				fmt.Fprintln(&b, f)
			}
			full := <-back
			t.Logf("3 × sluice serve through toxiproxy to Redis, on_store_error: %s, max_hold %v:\n%sback at %d in flight %v after the fault cleared (-1ns: not within max_hold+1s)",
				policy, inflightHold, b.String(), inflightLimit, full.Round(time.Millisecond))
			if policy == "closed" {
				wantWithinLimit(t, figures)
			}
		})
	}
}
