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
	"strings"
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
	faulted int   // the node the node faults strike: the first organisation's
	onNode  []int // the organisations whose tenant lies on it
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
		// kill -9 the node holding the first organisation's slot for 2s
		// (less than the cluster's node timeout, so that the others keep
		// serving their slots) and start it again: with no persistence
		// it comes back empty.
		at = func() {
			n := f.cluster.Nodes[f.faulted]
			n.Crash()
			time.Sleep(2 * time.Second)
			if err := n.Start(); err != nil {
				fmt.Fprintf(os.Stderr, "quotafleet: restarting the node: %v\n", err)
			}
		}
	case "pause-node":
		// SIGSTOP the node holding the first organisation's slot for 2s,
		// then SIGCONT: a node that hangs, its records intact.
		at = func() {
			n := f.cluster.Nodes[f.faulted]
			n.Pause()
			time.Sleep(2 * time.Second)
			n.Resume()
		}
	default:
		return nil, fmt.Errorf("unknown fault %q", fault)
	}
	r.t, r.took = drive(calls, o.callers, o.orgs, o.users, do, len(calls)/3, at)
	if err := f.clusterOK(30 * time.Second); err != nil {
		return nil, err
	}
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
			lim, err := usageRetry(gws[0].Admin, orgName(org), userName(u))
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

// usageRetry is usage, asked again for up to 15s while the store cannot
// be read (a node just back, a breaker not yet closed).
func usageRetry(admin, org, user string) (map[string]int64, error) {
	deadline := time.Now().Add(15 * time.Second)
	for {
		m, err := usage(admin, org, user)
		if err == nil || time.Now().After(deadline) {
			return m, err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// clusterOK waits until every node reports the cluster ok.
func (f *fleet) clusterOK(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for i, c := range f.nodes {
		for {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			info, err := c.ClusterInfo(ctx).Result()
			cancel()
			if err == nil && strings.Contains(info, "cluster_state:ok") {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("node %d not ok after %v: %v %s", i, timeout, err, info)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return nil
}

// nodeOf returns the index of the node serving the slot of the
// organisation's tenant (its records' hash tag).
func (f *fleet) nodeOf(org int) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	slot, err := f.nodes[0].ClusterKeySlot(ctx, "header:"+orgName(org)).Result()
	if err != nil {
		return 0, err
	}
	slots, err := f.nodes[0].ClusterSlots(ctx).Result()
	if err != nil {
		return 0, err
	}
	for _, s := range slots {
		if int64(s.Start) <= slot && slot <= int64(s.End) && len(s.Nodes) > 0 {
			for i, a := range f.cluster.Addrs() {
				if a == s.Nodes[0].Addr {
					return i, nil
				}
			}
		}
	}
	return 0, fmt.Errorf("no node serves slot %d", slot)
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
