package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-go/sluice/algo"
	"github.com/sluice-go/sluice/backend/redis"
	"github.com/sluice-go/sluice/backend/redis/redistest"
	"github.com/sluice-go/sluice/engine"
)

// The package's Redis tests share one standalone redis-server, started on
// first use and killed by TestMain; each test keeps to keys under a prefix
// of its own.
var sharedRedis struct {
	once   sync.Once
	server *redistest.Server
	err    error
}

// redisServer returns the shared redis-server, skipping the test when
// redis-server is not installed.
func redisServer(t *testing.T) *redistest.Server {
	t.Helper()
	redistest.Skip(t)
	sharedRedis.once.Do(func() { sharedRedis.server, sharedRedis.err = redistest.NewServer() })
	if sharedRedis.err != nil {
		t.Fatal(sharedRedis.err)
	}
	return sharedRedis.server
}

// testPrefixes holds the prefix each running test was given, and how many
// runs of each test name this process has seen.
var testPrefixes struct {
	sync.Mutex
	of   map[*testing.T]string
	runs map[string]int
}

// testPrefix is a Redis key prefix of the test's own: its name, and past
// the test's first run in this process (go test -count) the run's number,
// so that a run never meets the budgets an earlier one spent on the
// shared server. The same test gets the same prefix each call.
func testPrefix(t *testing.T) string {
	testPrefixes.Lock()
	defer testPrefixes.Unlock()
	if p, ok := testPrefixes.of[t]; ok {
		return p
	}
	if testPrefixes.of == nil {
		testPrefixes.of, testPrefixes.runs = map[*testing.T]string{}, map[string]int{}
	}
	name := strings.NewReplacer("/", ":", " ", "_").Replace(t.Name())
	p := "test:" + name + ":"
	if n := testPrefixes.runs[name]; n > 0 {
		p = fmt.Sprintf("test:%s:run%d:", name, n+1)
	}
	testPrefixes.runs[name]++
	testPrefixes.of[t] = p
	t.Cleanup(func() {
		testPrefixes.Lock()
		defer testPrefixes.Unlock()
		delete(testPrefixes.of, t)
	})
	return p
}

// redisKeys lists the keys under prefix on s.
func redisKeys(t *testing.T, s *redistest.Server, prefix string) []string {
	t.Helper()
	return strings.Fields(s.Do(t, "--scan", "--pattern", prefix+"*"))
}

// simTrace is a trace of n requests over a few keys: times that mostly move
// forward (by less than a window, by several windows, sometimes not at all
// and sometimes backwards), costs from 0 to past the capacity.
func simTrace(seed uint64, n int, window time.Duration, capacity int64) string {
	r := rand.New(rand.NewPCG(seed, 7))
	t := int64(1_700_000_000) * int64(time.Second)
	var b strings.Builder
	for range n {
		switch p := r.IntN(100); {
		case p < 50:
			t += r.Int64N(int64(window) / 4)
		case p < 60:
			t += int64(window) * (1 + r.Int64N(3))
		case p < 65:
			t -= r.Int64N(int64(window) / 2) // the clock steps back
		}
		cost := int64(1)
		switch p := r.IntN(100); {
		case p < 5:
			cost = 0
		case p < 10:
			cost = capacity + 1
		case p < 40:
			cost = 1 + r.Int64N(capacity)
		}
		fmt.Fprintf(&b, `{"t": %d.%09d, "key": "u-%d", "cost": %d}`+"\n", t/1e9, t%1e9, r.IntN(4), cost)
	}
	return b.String()
}

// simulate --backend redis prints exactly what --backend memory prints, for
// every algorithm, with and without a burst, on traces that step the clock
// every way; and it leaves nothing behind in Redis.
func TestSimulateRedisMatchesMemory(t *testing.T) {
	s := redisServer(t)
	prefix := testPrefix(t)
	type setup struct {
		algorithm, limit, window, burst string
		capacity                        int64
	}
	var setups []setup
	for _, name := range algo.Names {
		setups = append(setups, setup{string(name), "5", "1s", "", 5})
		if name == algo.TokenBucketName || name == algo.LeakyBucketName || name == algo.GCRAName {
			setups = append(setups, setup{string(name), "60", "1m", "10", 10})
		}
	}
	for _, c := range setups {
		name := c.algorithm
		if c.burst != "" {
			name += "-burst"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			window, _ := time.ParseDuration(c.window)
			args := []string{"simulate", "--algorithm", c.algorithm, "--limit", c.limit, "--window", c.window}
			if c.burst != "" {
				args = append(args, "--burst", c.burst)
			}
			for seed := uint64(1); seed <= 2; seed++ {
				trace := simTrace(seed, 200, window, c.capacity)
				code, want, stderr := runCmd(t, trace, args...)
				if code != 0 {
					t.Fatalf("memory: exit %d: %s", code, stderr)
				}
				code, got, stderr := runCmd(t, trace, append(args, "--backend", "redis", "--redis-addr", s.Addr, "--redis-prefix", prefix)...)
				if code != 0 {
					t.Fatalf("redis: exit %d: %s", code, stderr)
				}
				if got != want {
					gl, wl := strings.Split(got, "\n"), strings.Split(want, "\n")
					for i := range min(len(gl), len(wl)) {
						if gl[i] != wl[i] {
							t.Fatalf("seed %d: line %d differs:\nredis  %s\nmemory %s\n(trace line %s)", seed, i+1, gl[i], wl[i], strings.Split(trace, "\n")[i])
						}
					}
					t.Fatalf("seed %d: redis printed %d lines, memory %d", seed, len(gl), len(wl))
				}
				if !strings.Contains(want, `"allowed":false`) || !strings.Contains(want, `"error"`) {
					t.Fatalf("seed %d: the trace has no denial or no refused cost: it tests too little", seed)
				}
			}
		})
	}
	before := s.CommandCalls(t)["evalsha"]
	t.Cleanup(func() {
		if calls := s.CommandCalls(t)["evalsha"] - before; calls < int64(len(setups))*200 {
			t.Errorf("Redis ran %d compare-and-swaps for %d traces of 200 requests: the traces did not reach it", calls, 2*len(setups))
		}
		if keys := redisKeys(t, s, prefix); len(keys) != 0 {
			t.Errorf("simulate left %d keys in Redis, such as %s", len(keys), keys[0])
		}
	})
}

// With Redis unreachable, simulate fails at once, naming the address.
func TestSimulateRedisDown(t *testing.T) {
	t.Parallel()
	addr := closedAddr(t)
	code, stdout, stderr := runCmd(t, `{"t": 1, "key": "a"}`+"\n", "simulate", "--algorithm", "gcra", "--limit", "1", "--window", "1s", "--backend", "redis", "--redis-addr", addr)
	if code != 1 || stdout != "" || !strings.Contains(stderr, "Redis at "+addr) || !strings.Contains(stderr, "connection refused") {
		t.Errorf("exit %d, stdout %q, stderr %q; want 1 and an error naming %s", code, stdout, stderr, addr)
	}
}

// inspect --backend redis lists the records under the prefix, decoded, with
// their namespace and caller key; --config reads the same store from a
// configuration's redis section.
func TestInspectRedis(t *testing.T) {
	t.Parallel()
	s := redisServer(t)
	prefix := testPrefix(t)
	store, err := redis.Open(redis.ClientOptions{Addrs: []string{s.Addr}}, &redis.Options{KeyPrefix: prefix, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	eng, err := engine.New(store, nil)
	if err != nil {
		store.Close()
		t.Fatal(err)
	}
	orders := engine.Limit{Namespace: "orders", Algorithm: algo.MustNew(algo.TokenBucketName, algo.Params{Limit: 5, Window: time.Minute})}
	search := engine.Limit{Namespace: "search", Algorithm: algo.MustNew(algo.FixedWindowName, algo.Params{Limit: 10, Window: time.Hour})}
	for _, a := range []struct {
		l    engine.Limit
		key  string
		cost int64
	}{{orders, "user:ann", 2}, {orders, "user:{odd}%key", 1}, {search, "user:ann", 3}} {
		if _, err := eng.Apply(context.Background(), a.l, a.key, a.cost); err != nil {
			t.Fatal(err)
		}
	}
	eng.Close()

	check := func(t *testing.T, views []recordView) {
		t.Helper()
		var got []string
		for _, v := range views {
			got = append(got, v.Namespace+"/"+v.Key+"/"+v.Algorithm)
			if v.State == nil || v.Corrupt || v.ExpiresAt == nil || v.Expired {
				t.Errorf("record %+v: want a decoded, unexpired record with an expiry", v)
			}
		}
		want := "[orders/user:ann/token_bucket orders/user:{odd}%key/token_bucket search/user:ann/fixed_window]"
		if fmt.Sprint(got) != want {
			t.Errorf("inspect listed %v, want %s", got, want)
		}
	}
	redisArgs := []string{"--backend", "redis", "--redis-addr", s.Addr, "--redis-prefix", prefix}
	now := time.Now().UTC().Format(time.RFC3339Nano)
	run := func(t *testing.T, args ...string) []recordView {
		t.Helper()
		code, stdout, stderr := runCmd(t, "", append([]string{"inspect", "--json", "--now", now}, args...)...)
		if code != 0 {
			t.Fatalf("inspect %q: exit %d; stderr:\n%s", args, code, stderr)
		}
		var views []recordView
		for _, line := range strings.Fields(stdout) {
			var v recordView
			if err := json.Unmarshal([]byte(line), &v); err != nil {
				t.Fatalf("inspect --json line %q: %v", line, err)
			}
			views = append(views, v)
		}
		return views
	}
	t.Run("flags", func(t *testing.T) { check(t, run(t, redisArgs...)) })
	t.Run("key filter", func(t *testing.T) {
		if v := run(t, append(redisArgs, "--key", "user:ann", "--namespace", "search")...); len(v) != 1 || v[0].Algorithm != "fixed_window" || v[0].State.get("count") != "3" {
			t.Errorf("--namespace search --key user:ann: %+v, want the one fixed window with a count of 3", v)
		}
	})
	t.Run("config", func(t *testing.T) {
		cfg := filepath.Join(t.TempDir(), "gateway.yaml")
		writeFile(t, cfg, fmt.Sprintf("store:\n  backend: redis\n  redis:\n    addrs: [%s]\n    key_prefix: %q\nrules: []\n", s.Addr, prefix))
		check(t, run(t, "--config", cfg))
		// A flag overrides the file: another prefix lists nothing.
		if v := run(t, "--config", cfg, "--redis-prefix", prefix+"none:"); len(v) != 0 {
			t.Errorf("--redis-prefix over the file's: %d records, want none", len(v))
		}
	})
	t.Run("table", func(t *testing.T) {
		code, stdout, stderr := runCmd(t, "", append([]string{"inspect"}, redisArgs...)...)
		if code != 0 || strings.Count(stdout, "\n") != 4 || !strings.Contains(stdout, "spent=2") {
			t.Errorf("inspect table: exit %d, stderr %q, stdout:\n%s", code, stderr, stdout)
		}
	})
	t.Run("down", func(t *testing.T) {
		addr := closedAddr(t)
		code, _, stderr := runCmd(t, "", "inspect", "--backend", "redis", "--redis-addr", addr)
		if code != 1 || !strings.Contains(stderr, "Redis at "+addr) {
			t.Errorf("inspect of a Redis that is down: exit %d, stderr %q; want 1 and the address", code, stderr)
		}
	})
}
