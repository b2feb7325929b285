package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluice-go/sluice/backend/redis/redistest"
	"github.com/sluice-go/sluice/bench"
	"github.com/sluice-go/sluice/internal/loadgen/serveproc"
)

// sluiceConfig is the gateways' configuration: the hierarchy organisation
// → user as one group on the Cluster, the organisation's header and the
// user's believed from the load generator, which stands for the
// authenticating proxy.
func sluiceConfig(o options, addrs []string, prefix, policy string) string {
	q := ""
	for i, a := range addrs {
		if i > 0 {
			q += ", "
		}
		q += a
	}
	return fmt.Sprintf(`store:
  backend: redis
  redis:
    addrs: [%s]
    key_prefix: %q
on_store_error: %s
identity:
  trusted_proxies: [127.0.0.1]
  user_header: X-User-ID
  headers_from_trusted_proxies_only: true
rules:
  - {name: org-day, group: org, path_prefix: /v1/, scope: "header:X-Org-ID", algorithm: fixed_window, limit: %d, calendar: day}
  - {name: user-day, group: org, path_prefix: /v1/, scope: user, algorithm: fixed_window, limit: %d, calendar: day}
`, q, prefix, policy, o.orgLimit, o.userLimit)
}

// upstream counts the requests that reached it per organisation and user.
type upstream struct {
	URL  string
	mu   sync.Mutex
	seen map[[2]string]int64
}

func startUpstream() (*upstream, func() error, error) {
	u := &upstream{seen: map[[2]string]int64{}}
	url, closeFn, err := serveproc.Upstream(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		k := [2]string{r.Header.Get("X-Org-ID"), r.Header.Get("X-User-ID")}
		u.mu.Lock()
		u.seen[k]++
		u.mu.Unlock()
		io.WriteString(w, "ok")
	}))
	u.URL = url
	return u, closeFn, err
}

func (u *upstream) reset() {
	u.mu.Lock()
	clear(u.seen)
	u.mu.Unlock()
}

func (u *upstream) count(org, user string) int64 {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.seen[[2]string{org, user}]
}

func orgName(o int) string  { return "org" + strconv.Itoa(o) }
func userName(u int) string { return "u" + strconv.Itoa(u) }

// fleet is the Cluster, the upstream and the sluice binary the runs share.
type fleet struct {
	bin     string
	work    string
	cluster *redistest.Cluster
	nodes   []*goredis.Client
	up      *upstream
	o       options
}

// sluiceRun is what one run of the sluice fleet measured.
type sluiceRun struct {
	name     string
	policy   string
	fault    string
	t        *tally
	took     time.Duration
	upstream [][]int64 // [org][user]: requests the upstream received
	orgSpent []int64   // the organisation level's count after the run, from /v1/usage
	userSpnt [][]int64 // each user level's count
	scripts  int64     // EVAL and EVALSHA on every node
	commands int64
	restart  time.Duration // how long the killed gateway took to serve again
}

// run starts 3 gateways with policy, sends the calls, applies fault at a
// third of them, and reads what was spent.
func (f *fleet) run(name, policy, fault string, calls []call) (*sluiceRun, error) {
	o := f.o
	prefix := fmt.Sprintf("qf:%s:%d:", name, time.Now().UnixNano())
	cfg := filepath.Join(f.work, name+".yaml")
	if err := os.WriteFile(cfg, []byte(sluiceConfig(o, f.cluster.Addrs(), prefix, policy)), 0o644); err != nil {
		return nil, err
	}
	gws := make([]*serveproc.Process, 3)
	addrs := make([]atomic.Pointer[string], 3)
	for i := range gws {
		p, err := serveproc.Start(f.bin, cfg, f.up.URL, filepath.Join(f.work, fmt.Sprintf("%s-serve%d.log", name, i)), 60*time.Second)
		if err != nil {
			stopAll(gws)
			return nil, err
		}
		gws[i] = p
		a := p.Listen
		addrs[i].Store(&a)
	}
	defer func() { stopAll(gws) }()
	f.up.reset()
	before, err := f.counters()
	if err != nil {
		return nil, err
	}
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: o.callers, MaxConnsPerHost: o.callers}}
	defer client.CloseIdleConnections()
	do := func(caller, i int, c call) outcome {
		req, _ := http.NewRequest(http.MethodGet, "http://"+*addrs[i%3].Load()+"/v1/q", nil)
		req.Header.Set("X-Org-ID", orgName(c.org))
		req.Header.Set("X-User-ID", userName(c.user))
		resp, err := client.Do(req)
		if err != nil {
			return failed
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		switch resp.StatusCode {
		case http.StatusOK:
			return admitted
		case http.StatusTooManyRequests:
			return denied
		case http.StatusServiceUnavailable:
			return unavailable
		}
		return failed
	}
	r := &sluiceRun{name: name, policy: policy, fault: fault}
	var at func()
	switch fault {
	case "":
	case "kill-gateway":
		// kill -9 the second gateway, and start it again at once on
		// the same configuration (a supervisor's restart); calls meant
		// for it fail until it listens again.
		at = func() {
			gws[1].Signal(syscall.SIGKILL)
			gws[1].Stop(5 * time.Second)
			t0 := time.Now()
			p, err := serveproc.Start(f.bin, cfg, f.up.URL, filepath.Join(f.work, name+"-serve1-again.log"), 60*time.Second)
			if err != nil {
				fmt.Fprintf(os.Stderr, "quotafleet: restarting the gateway: %v\n", err)
				return
			}
			r.restart = time.Since(t0)
			gws[1] = p
			a := p.Listen
			addrs[1].Store(&a)
		}
	case "crash-node":
		// kill -9 one Cluster node for 2s (less than the cluster's node
		// timeout, so that the others keep serving their slots) and
		// start it again: with no persistence it comes back empty.
		at = func() {
			n := f.cluster.Nodes[2]
			n.Crash()
			time.Sleep(2 * time.Second)
			if err := n.Start(); err != nil {
				fmt.Fprintf(os.Stderr, "quotafleet: restarting the node: %v\n", err)
			}
		}
	default:
		return nil, fmt.Errorf("unknown fault %q", fault)
	}
	r.t, r.took = drive(calls, o.callers, o.orgs, o.users, do, len(calls)/3, at)
	after, err := f.counters()
	if err != nil {
		return nil, err
	}
	d := after.Delta(before)
	r.scripts, r.commands = d.Scripts, d.Commands
	fmt.Fprintf(os.Stderr, "%s: Redis calls %v\n", name, d.Calls)
	r.upstream = make([][]int64, o.orgs)
	r.orgSpent = make([]int64, o.orgs)
	r.userSpnt = make([][]int64, o.orgs)
	for org := range o.orgs {
		r.upstream[org] = make([]int64, o.users)
		r.userSpnt[org] = make([]int64, o.users)
		for u := range o.users {
			r.upstream[org][u] = f.up.count(orgName(org), userName(u))
			lim, err := usage(gws[0].Admin, orgName(org), userName(u))
			if err != nil {
				return nil, err
			}
			r.orgSpent[org] = lim["org-day"]
			r.userSpnt[org][u] = lim["user-day"]
		}
	}
	return r, nil
}

// usage reads the counts spent on each rule for one user of an
// organisation, as /v1/usage reports them: a fixed window's limit less
// its remaining is its count.
func usage(admin, org, user string) (map[string]int64, error) {
	q := url.Values{"user": {user}, "header.X-Org-ID": {org}, "ip": {"127.0.0.1"}, "path": {"/v1/q"}}
	resp, err := http.Get("http://" + admin + "/v1/usage?" + q.Encode())
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("/v1/usage %s %s: %s %s", org, user, resp.Status, body)
	}
	var u struct {
		Limits []struct {
			Rule      string `json:"rule"`
			Limit     int64  `json:"limit"`
			Remaining int64  `json:"remaining"`
		} `json:"limits"`
	}
	if err := json.Unmarshal(body, &u); err != nil {
		return nil, fmt.Errorf("/v1/usage: %v: %s", err, body)
	}
	m := map[string]int64{}
	for _, l := range u.Limits {
		m[l.Rule] = l.Limit - l.Remaining
	}
	return m, nil
}

// counters reads every node's counters, summed.
func (f *fleet) counters() (bench.ServerCounters, error) {
	sum := bench.ServerCounters{Calls: map[string]int64{}}
	for _, c := range f.nodes {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		sc, err := bench.ReadServerCounters(ctx, c)
		cancel()
		if err != nil {
			return sum, err
		}
		for k, v := range sc.Calls {
			sum.Calls[k] += v
		}
		sum.Reads += sc.Reads
	}
	return sum, nil
}

func stopAll(ps []*serveproc.Process) {
	for _, p := range ps {
		if p != nil && !p.Exited() {
			p.Stop(10 * time.Second)
		}
	}
}
