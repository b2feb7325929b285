package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-go/sluice/backend/redis"
	"github.com/sluice-go/sluice/backend/redis/redistest"
)

// redisGateway is a configuration with one rule, fixed_window limit per
// day per user on POST /api/orders, over a redis store section (addrs
// empty: none in the file) and the given policy.
func redisGateway(addr, prefix, policy string, limit, fleet int) string {
	addrs := ""
	if addr != "" {
		addrs = fmt.Sprintf("    addrs: [%s]\n", addr)
	}
	return fmt.Sprintf(`store:
  backend: redis
  redis:
%s    key_prefix: %q
    timeout: 1s
    fleet_size: %d
on_store_error: %s
rules:
  - name: orders
    method: POST
    path_prefix: /api/orders
    scope: user
    algorithm: fixed_window
    limit: %d
    window: 24h
`, addrs, prefix, fleet, policy, limit)
}

// Two in-process gateways on one Redis share each user's budget: the
// store section of the file, or the store flags over a memory file.
func TestServeRedisSharesTheBudget(t *testing.T) {
	t.Parallel()
	s := redisServer(t)
	waitAwayFromDayBoundary(t)
	up := upstream(t)
	dir := t.TempDir()

	t.Run("from the file", func(t *testing.T) {
		cfg := filepath.Join(dir, "file.yaml")
		writeFile(t, cfg, redisGateway(s.Addr, testPrefix(t), "closed", 5, 2))
		a := startServe(t, "--config", cfg, "--listen", "127.0.0.1:0", "--upstream", up.URL)
		b := startServe(t, "--config", cfg, "--listen", "127.0.0.1:0", "--upstream", up.URL)
		got := fmt.Sprint(statuses(t, a, "ann", 3), statuses(t, b, "ann", 3))
		if got != "[200 200 200] [200 200 429]" {
			t.Errorf("ann on two gateways: %s, want 5 allowed in all", got)
		}
		if !strings.Contains(a.stderr.String(), "store=redis redis="+s.Addr) {
			t.Errorf("the start line does not name the store:\n%s", a.stderr)
		}
	})
	t.Run("from the flags", func(t *testing.T) {
		cfg := filepath.Join(dir, "flags.yaml")
		writeFile(t, cfg, serveConfig(memoryStore, 4)) // the file says memory
		args := []string{"--config", cfg, "--listen", "127.0.0.1:0", "--upstream", up.URL,
			"--backend", "redis", "--redis-addr", s.Addr, "--redis-prefix", testPrefix(t)}
		a := startServe(t, args...)
		b := startServe(t, args...)
		got := fmt.Sprint(statuses(t, a, "bo", 2), statuses(t, b, "bo", 3))
		if got != "[200 200] [200 200 429]" {
			t.Errorf("bo on two gateways: %s, want 4 allowed in all", got)
		}
	})
	t.Run("through a Sentinel", func(t *testing.T) {
		primary := redistest.Start(t)
		sentinel := redistest.StartSentinel(t, primary, "sluice-primary")
		cfg := filepath.Join(dir, "sentinel.yaml")
		writeFile(t, cfg, strings.Replace(redisGateway(sentinel.Addr, testPrefix(t), "closed", 3, 1),
			"  redis:\n", "  redis:\n    master_name: sluice-primary\n", 1))
		a := startServe(t, "--config", cfg, "--listen", "127.0.0.1:0", "--upstream", up.URL)
		b := startServe(t, "--config", cfg, "--listen", "127.0.0.1:0", "--upstream", up.URL)
		if got := fmt.Sprint(statuses(t, a, "di", 2), statuses(t, b, "di", 2)); got != "[200 200] [200 429]" {
			t.Errorf("di on two gateways through a Sentinel: %s, want 3 allowed in all", got)
		}
		if keys := redisKeys(t, primary, testPrefix(t)); len(keys) != 1 {
			t.Errorf("the primary holds %v under the prefix, want di's one record", keys)
		}
	})
	t.Run("address flag over the file", func(t *testing.T) {
		cfg := filepath.Join(dir, "over.yaml")
		writeFile(t, cfg, redisGateway(closedAddr(t), testPrefix(t), "closed", 2, 1))
		a := startServe(t, "--config", cfg, "--listen", "127.0.0.1:0", "--upstream", up.URL, "--redis-addr", s.Addr)
		if got := fmt.Sprint(statuses(t, a, "cy", 3)); got != "[200 200 429]" {
			t.Errorf("cy: %s", got)
		}
	})
}

// Store flags that do not fit the store are usage errors naming the flag;
// a broken redis section is a configuration error naming the line.
func TestServeRedisUsageErrors(t *testing.T) {
	dir := t.TempDir()
	memCfg := filepath.Join(dir, "memory.yaml")
	writeFile(t, memCfg, serveConfig(memoryStore, 5))
	redisCfg := filepath.Join(dir, "redis.yaml")
	writeFile(t, redisCfg, redisGateway("127.0.0.1:1", "p:", "local", 5, 3))
	noAddr := filepath.Join(dir, "noaddr.yaml")
	writeFile(t, noAddr, redisGateway("", "p:", "local", 5, 3))
	broken := filepath.Join(dir, "broken.yaml")
	writeFile(t, broken, strings.Replace(redisGateway("127.0.0.1:6379", "p:", "local", 5, 3), "timeout: 1s", "timeout: fast", 1))
	base := []string{"--listen", "127.0.0.1:0", "--upstream", "http://127.0.0.1:1"}
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--config", memCfg, "--redis-addr", "127.0.0.1:6379"}, 2, "--redis-addr: only with --backend redis (the store is memory, from " + memCfg + ")"},
		{[]string{"--config", memCfg, "--redis-prefix", "x:"}, 2, "--redis-prefix: only with --backend redis (the store is memory, from " + memCfg + ")"},
		{[]string{"--config", redisCfg, "--backend", "memory", "--redis-addr", "127.0.0.1:6379"}, 2, "--redis-addr: only with --backend redis (the store is memory)\n"},
		{[]string{"--config", memCfg, "--backend", "redis"}, 2, "--redis-addr: required with --backend redis"},
		{[]string{"--config", memCfg, "--backend", "redis", "--redis-addr", "127.0.0.1:6379", "--dir", dir}, 2, "--dir: the redis backend keeps nothing on disk"},
		{[]string{"--config", memCfg, "--backend", "etcd"}, 2, "--backend etcd: unknown backend (want memory, pebble, bolt or redis)"},
		{[]string{"--config", memCfg, "--backend", "redis", "--redis-addr", "localhost"}, 2, `invalid value "localhost" for flag -redis-addr`},
		{[]string{"--config", redisCfg, "--dir", dir}, 2, "--dir: the redis backend keeps nothing on disk"},
		{[]string{"--config", noAddr}, 2, noAddr + ":2: store.redis.addrs: required for the redis backend"},
		{[]string{"--config", broken}, 2, broken + ":6: store.redis.timeout: want a duration such as 1m or 500ms, got \"fast\""},
	} {
		var stderr bytes.Buffer
		code := runServe(context.Background(), append(c.args, base...), io.Discard, &stderr, func(string, string) { t.Errorf("serve %q listened", c.args) })
		if code != c.code || !strings.Contains(stderr.String(), c.want) {
			t.Errorf("serve %q: exit %d, stderr %q; want %d and %q", c.args, code, stderr.String(), c.code, c.want)
		}
	}
}

// A Redis that does not answer at start stops serve at once with exit
// status 1 and a line naming the address; it never listens.
func TestServeRedisDownAtStart(t *testing.T) {
	t.Parallel()
	redisServer(t) // skips without redis-server, as every Redis test
	addr := closedAddr(t)
	cfg := filepath.Join(t.TempDir(), "down.yaml")
	writeFile(t, cfg, redisGateway(addr, "p:", "local", 5, 3))
	var stderr bytes.Buffer
	code := runServe(context.Background(), []string{"--config", cfg, "--listen", "127.0.0.1:0", "--upstream", "http://127.0.0.1:1"},
		io.Discard, &stderr, func(string, string) { t.Error("serve listened with Redis down") })
	if code != 1 {
		t.Errorf("exit %d, want 1", code)
	}
	// The cause is the refused connection, or, on a loaded machine where
	// the dial's deadline passed before the refusal was read, a timeout:
	// either way Redis is unreachable, and the message says where to look.
	want := "sluice serve: opening the redis store: Redis at " + addr + ": "
	unreachable := regexp.MustCompile(`connection refused|i/o timeout|deadline exceeded`)
	if !strings.Contains(stderr.String(), want) || !unreachable.MatchString(stderr.String()) ||
		!strings.Contains(stderr.String(), "store.redis.addrs, or --redis-addr") {
		t.Errorf("stderr %q, want it to contain %q and the cause (%s)", stderr.String(), want, unreachable)
	}
}

// waitAwayFromDayBoundary waits, when the next UTC midnight is less than
// a minute away, until it has passed, so that a test counting exactly a
// day window's budget never straddles two windows.
func waitAwayFromDayBoundary(t *testing.T) {
	t.Helper()
	next := time.Now().UTC().Truncate(24 * time.Hour).Add(24 * time.Hour)
	if left := time.Until(next); left < time.Minute {
		t.Logf("waiting %v for the day window to turn", left)
		time.Sleep(left + time.Second)
	}
}

// serveLoad posts n requests to s's /api/orders from 64 concurrent
// clients, the user of request i being user(i), and returns the answers'
// statuses by code, and the errors of requests that got none.
func serveLoad(s *serving, n int, user func(i int) string) (codes map[int]int, errs []error) {
	client := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	defer client.CloseIdleConnections()
	var (
		mu   sync.Mutex
		wg   sync.WaitGroup
		jobs = make(chan int, n)
	)
	codes = map[int]int{}
	for i := range n {
		jobs <- i
	}
	close(jobs)
	for range 64 {
		wg.Go(func() {
			for i := range jobs {
				req, err := http.NewRequest(http.MethodPost, "http://"+s.listen+"/api/orders", strings.NewReader("{}"))
				if err == nil {
					req.Header.Set("X-User-ID", user(i))
					var resp *http.Response
					if resp, err = client.Do(req); err == nil {
						io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
						mu.Lock()
						codes[resp.StatusCode]++
						mu.Unlock()
					}
				}
				if err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	return codes, errs
}

// The serve door on Redis, the store's defaults, 64 concurrent clients:
// 1,000 POSTs of one user admit exactly 100 with not one 503; once spent,
// that user's denials cost Redis at most one script per five decisions
// (they are answered from the last-seen record), and 1,000 distinct users
// at most one script each (counted from INFO commandstats).
//
// A machine too busy for the 50ms default deadline (this process' own
// scheduling lateness, measured in the same run, leaves it less than half
// the deadline, as bench/fleet judges) fails decisions of the gateway's
// own making, whatever Redis does: then the 503s are logged, not judged,
// and each answer must still be one the limit allows (never more than
// 100 admitted, every decision a 200, a 429 or a 503).
func TestServeRedisScriptsPerDecision(t *testing.T) {
	rs := redistest.Start(t)
	waitAwayFromDayBoundary(t)
	cfg := filepath.Join(t.TempDir(), "load.yaml")
	writeFile(t, cfg, strings.Replace(redisGateway(rs.Addr, testPrefix(t), "closed", 100, 1), "    timeout: 1s\n", "", 1))
	s := startServe(t, "--config", cfg, "--listen", "127.0.0.1:0", "--upstream", upstream(t).URL)
	// load is serveLoad, and whether its 503s are judged.
	load := func(what string, n int, user func(int) string) (map[int]int, []error) {
		stop := make(chan struct{})
		late := redistest.Lateness(stop)
		codes, errs := serveLoad(s, n, user)
		close(stop)
		worst := <-late
		if codes[503] > 0 && redis.DefaultTimeout/2+3*worst+redis.DefaultTimeout/4 > redis.DefaultTimeout {
			t.Logf("%s: %d × 503, not judged: this process' timers were up to %v late beside the %v deadline", what, codes[503], worst, redis.DefaultTimeout)
			codes[0] = codes[503] // the 503s a busy machine excuses
			delete(codes, 503)
		}
		return codes, errs
	}
	hot := func(int) string { return "hot" }
	if codes, errs := load("one user", 1000, hot); len(errs) > 0 || codes[200] > 100 || codes[200]+codes[0] < 100 || codes[200]+codes[429]+codes[0] != 1000 {
		t.Fatalf("1,000 POSTs of one user from 64 clients: %v, %d errors %v; want exactly 100 × 200 and 900 × 429", codes, len(errs), errs)
	}
	// Scripts run, as INFO commandstats counts them (the commands a script
	// runs are counted too, so a SET NX GET cannot be told from a
	// script's SET there: a key's first write is a native SET NX GET).
	scripts := func() int64 { c := rs.CommandCalls(t); return c["evalsha"] + c["eval"] }
	before := scripts()
	if codes, errs := load("the spent user", 1000, hot); len(errs) > 0 || codes[429]+codes[0] != 1000 {
		t.Fatalf("1,000 POSTs of the spent user: %v, %v; want 1,000 × 429", codes, errs)
	}
	spent := scripts() - before
	if spent > 200 {
		t.Errorf("1,000 decisions on the spent user ran %d scripts (%.2f per decision), want at most 0.2 per decision", spent, float64(spent)/1000)
	}
	before = scripts()
	if codes, errs := load("distinct users", 1000, func(i int) string { return "user-" + strconv.Itoa(i) }); len(errs) > 0 || codes[200]+codes[0] != 1000 {
		t.Fatalf("1,000 distinct users: %v, %v; want 1,000 × 200", codes, errs)
	}
	distinct := scripts() - before
	if distinct > 1000 {
		t.Errorf("1,000 distinct users ran %d scripts (%.2f per decision), want at most 1.0 per decision", distinct, float64(distinct)/1000)
	}
	t.Logf("scripts per decision: %.3f on the spent user, %.3f on distinct users", float64(spent)/1000, float64(distinct)/1000)
}
