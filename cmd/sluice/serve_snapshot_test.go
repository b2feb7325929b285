package main

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/config"
)

// snapshotConfig is a configuration whose every reloadable part shows in
// each answer: the default rule's limit (X-RateLimit-Limit), the identity
// section (trusting 127.0.0.1's X-Forwarded-For or not: the remaining
// budget is then a fresh caller's, limit-1, or 127.0.0.1's, which has
// spent more) and the response section (X-RateLimit-Reset in seconds or as
// a Unix time). Its exempt list of filler addresses, none of them a caller
// of the test, makes building the handler take a while, as a long list in
// production does.
func snapshotConfig(limit int, trustLoopback, resetUnix bool) string {
	trusted := "10.0.0.0/8"
	if trustLoopback {
		trusted = "127.0.0.1/32"
	}
	reset := "seconds"
	if resetUnix {
		reset = "unix"
	}
	var b strings.Builder
	fmt.Fprintf(&b, `store:
  backend: memory
identity:
  trusted_proxies: [%s]
response:
  reset: %s
exempt:
`, trusted, reset)
	for i := range 4000 {
		fmt.Fprintf(&b, "  - ip:100.64.%d.%d\n", i/250, i%250+1)
	}
	fmt.Fprintf(&b, `default:
  name: all
  scope: ip
  algorithm: fixed_window
  limit: %d
  window: 24h
`, limit)
	return b.String()
}

// A reload publishes the rules, the identity section and the response
// settings together: under load, through reloads back and forth between
// two configurations, no answer is decided under one configuration's rules
// and the other's identity or response settings, either way.
func TestServeReloadIsOneSnapshot(t *testing.T) {
	if testing.Short() {
		t.Skip("reloads a few dozen times under load")
	}
	t.Parallel()
	waitAwayFromDayBoundary(t) // the fixed window is a day
	const limitA, limitB = 1_000_000, 2_000_000
	confA, confB := snapshotConfig(limitA, true, true), snapshotConfig(limitB, false, false)
	up := upstream(t)
	cfgPath := filepath.Join(t.TempDir(), "sluice.yaml")
	writeFile(t, cfgPath, confA)
	s := startServe(t, "--config", cfgPath, "--listen", "127.0.0.1:0", "--upstream", up.URL,
		"--admin", "127.0.0.1:0", "--reload-settle", "1ms")
	url := "http://" + s.listen + "/x"
	// 127.0.0.1 spends twice on its own address (no X-Forwarded-For), so
	// that its remaining budget is never a fresh caller's.
	for range 2 {
		if code, _ := send(t, "GET", url); code != 200 {
			t.Fatalf("spending as 127.0.0.1: %d", code)
		}
	}

	// check asks once as a fresh forwarded caller and says what is wrong
	// with the answer: which configuration each part of it is under.
	var next atomic.Uint32
	check := func() (string, error) {
		n := next.Add(1)
		req, err := http.NewRequest("GET", url, nil)
		if err != nil {
			return "", err
		}
		req.Header.Set("X-Forwarded-For", fmt.Sprintf("198.18.%d.%d", n/250%250, n%250+1))
		resp, err := testClient.Do(req)
		if err != nil {
			return "", err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		h := resp.Header
		limit, _ := strconv.Atoi(h.Get("X-RateLimit-Limit"))
		remaining, _ := strconv.Atoi(h.Get("X-RateLimit-Remaining"))
		reset, _ := strconv.ParseInt(h.Get("X-RateLimit-Reset"), 10, 64)
		rules, id, response := "B", "B", "B"
		if limit == limitA {
			rules = "A"
		}
		if remaining == limit-1 { // a fresh caller: the forwarded address was trusted
			id = "A"
		}
		if reset > 86400 { // a Unix time, not seconds of a day's window
			response = "A"
		}
		if resp.StatusCode != 200 || (limit != limitA && limit != limitB) || rules != id || rules != response {
			return fmt.Sprintf("%d %s: rules %s, identity %s, response %s (limit %d, remaining %d, reset %d)",
				resp.StatusCode, req.Header.Get("X-Forwarded-For"), rules, id, response, limit, remaining, reset), nil
		}
		return "", nil
	}

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	var mixed []string
	var asked atomic.Int64
	var reqErr error
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				bad, err := check()
				asked.Add(1)
				if err != nil || bad != "" {
					mu.Lock()
					if err != nil && reqErr == nil {
						reqErr = err
					}
					if bad != "" {
						mixed = append(mixed, bad)
					}
					mu.Unlock()
				}
			}
		}()
	}
	const reloads = 30
	ok := `sluice_config_reloads_total{result="ok"}`
	for i := 1; i <= reloads; i++ {
		conf := confB
		if i%2 == 0 {
			conf = confA
		}
		replaceFile(t, cfgPath, conf)
		waitMetric(t, s.admin, ok, float64(i))
	}
	close(stop)
	wg.Wait()
	if reqErr != nil {
		t.Fatalf("a request failed: %v", reqErr)
	}
	t.Logf("%d answers through %d reloads", asked.Load(), reloads)
	if len(mixed) > 0 {
		t.Errorf("%d of %d answers mixed two configurations; the first:\n%s", len(mixed), asked.Load(), strings.Join(mixed[:min(len(mixed), 5)], "\n"))
	}
}

// A reload the proxy cannot build publishes nothing: the rules, the
// identity section and the handler in force all stay. The parser refuses
// every such file first; a configuration it would refuse, handed straight
// to apply, stands for one where they disagree.
func TestServeRefusedReloadPublishesNothing(t *testing.T) {
	p := newProcess("sluice serve", io.Discard)
	if status, ok := p.openEngine(backendFlags{name: "memory"}, nil); !ok {
		t.Fatalf("openEngine: status %d", status)
	}
	defer p.close()
	load := func(limit int) (*config.Config, *sluice.Ruleset) {
		t.Helper()
		cfg, err := config.Parse("sluice.yaml", []byte(snapshotConfig(limit, true, true)))
		if err != nil {
			t.Fatal(err)
		}
		rs, err := cfg.Ruleset()
		if err != nil {
			t.Fatal(err)
		}
		return cfg, rs
	}
	cfg, rs := load(1000)
	up, _ := url.Parse("http://127.0.0.1:1")
	g, status, ok := newLimitedProxy(p, serveFlags{config: "sluice.yaml", upstream: up}, backendFlags{name: "memory"}, cfg, rs)
	if !ok {
		t.Fatalf("newLimitedProxy: status %d", status)
	}
	defer g.close()
	before := g.cur.Load()

	next, nextRS := load(2000)
	next.Exempt = append(next.Exempt, "nobody") // not a caller key: the build fails
	if err := g.apply(next, nextRS); err == nil {
		t.Fatal("apply of a configuration with a bad exempt entry: no error")
	}
	if g.cur.Load() != before {
		t.Error("a refused reload published a configuration")
	}
	if rs, _ := g.inForce(); rs.Default().Rule().Limit != 1000 {
		t.Errorf("after a refused reload the default's limit is %d, want 1000 (the rules were published)", rs.Default().Rule().Limit)
	}

	next, nextRS = load(3000)
	if err := g.apply(next, nextRS); err != nil {
		t.Fatal(err)
	}
	if rs, id := g.inForce(); rs.Default().Rule().Limit != 3000 || id == before.id {
		t.Errorf("after a reload: limit %d, identity replaced %t; want 3000, true", rs.Default().Rule().Limit, id != before.id)
	}
}
