//go:build unix

package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-go/sluice/backend/redis/redistest"
	"github.com/sluice-go/sluice/internal/loadgen/serveproc"
)

// These tests run real `sluice serve` processes with a concurrency rule
// (algorithm: concurrency) in front of an upstream that counts the
// requests in flight at it.

// slotsConfig is a serve configuration of store (the store section's
// lines) with a concurrency rule of limit slots per scope on /chat, held
// at most hold, and a rate rule of 1000 a minute beside it (match: all).
func slotsConfig(store, scope string, limit int, hold time.Duration) string {
	return fmt.Sprintf(`store:
%s
identity:
  user_header: X-User-ID
on_store_error: closed
match: all
rules:
  - name: chat-slots
    path_prefix: /chat
    scope: %s
    algorithm: concurrency
    limit: %d
    max_hold: %s
    retry_after: 2s
  - name: chat-rate
    path_prefix: /chat
    scope: %s
    algorithm: token_bucket
    limit: 1000
    window: 1m
`, store, scope, limit, hold, scope)
}

// slotUpstream is an upstream whose /chat/slow requests wait until
// released (or their client goes away), and that counts the requests in
// flight at it, and the most there ever were.
type slotUpstream struct {
	URL            string
	entered        chan struct{}
	release        chan struct{}
	inFlight, most atomic.Int64
	total          atomic.Int64
	hold           time.Duration // how long every other request takes
	releaseOnce    sync.Once
	closeFn        func() error
}

func startSlotUpstream(t *testing.T, hold time.Duration) *slotUpstream {
	t.Helper()
	u := &slotUpstream{entered: make(chan struct{}, 64), release: make(chan struct{}), hold: hold}
	url, closeFn, err := serveproc.Upstream(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := u.inFlight.Add(1)
		defer u.inFlight.Add(-1)
		u.total.Add(1)
		for m := u.most.Load(); n > m && !u.most.CompareAndSwap(m, n); m = u.most.Load() {
		}
		if r.URL.Path == "/chat/slow" {
			u.entered <- struct{}{}
			select {
			case <-u.release:
			case <-r.Context().Done():
				return
			}
		} else if u.hold > 0 {
			time.Sleep(u.hold)
		}
		io.WriteString(w, "upstream "+r.URL.Path)
	}))
	if err != nil {
		t.Fatal(err)
	}
	u.URL, u.closeFn = url, closeFn
	t.Cleanup(func() { u.releaseAll(); closeFn() })
	return u
}

// releaseAll lets every waiting /chat/slow request answer.
func (u *slotUpstream) releaseAll() { u.releaseOnce.Do(func() { close(u.release) }) }

// waitEntered waits for n /chat/slow requests to reach the upstream.
func (u *slotUpstream) waitEntered(t *testing.T, n int) {
	t.Helper()
	for range n {
		select {
		case <-u.entered:
		case <-time.After(20 * time.Second):
			t.Fatal("a slow request did not reach the upstream")
		}
	}
}

// slowRequest sends GET /chat/slow as user to listen from a goroutine and
// reports its status on the returned channel (-1 when it failed, as when
// ctx ended).
func slowRequest(ctx context.Context, listen, user string) chan int {
	ch := make(chan int, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+listen+"/chat/slow", nil)
		req.Header.Set("X-User-ID", user)
		resp, err := testClient.Do(req)
		if err != nil {
			ch <- -1
			return
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		ch <- resp.StatusCode
	}()
	return ch
}

// startSlotServe starts bin serve on cfg in front of up, stopped when the test
// ends unless it has exited already.
func startSlotServe(t *testing.T, bin, cfg, upURL string) *serveproc.Process {
	t.Helper()
	p, err := serveproc.Start(bin, cfg, upURL, filepath.Join(t.TempDir(), "serve.log"), processTimeout)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if !p.Exited() {
			p.Stop(10 * time.Second)
		}
	})
	return p
}

// A slow upstream at the limit: the request past it is answered 429 at
// once, with the rule's Retry-After, while the two slow ones still wait
// (nothing queues, and it never reaches the upstream). A client that
// hangs up frees its slot at once: the slot is back long before its
// max_hold of an hour, and the next request is admitted.
func TestServeSlotsSlowUpstreamAndHangUp(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	t.Parallel()
	bin := buildBinary(t)
	up := startSlotUpstream(t, 0)
	cfg := filepath.Join(t.TempDir(), "sluice.yaml")
	writeFile(t, cfg, slotsConfig("  backend: memory", "user", 2, time.Hour))
	p := startSlotServe(t, bin, cfg, up.URL)

	hangUp, cancel := context.WithCancel(context.Background())
	defer cancel()
	first := slowRequest(hangUp, p.Listen, "alice")
	second := slowRequest(context.Background(), p.Listen, "alice")
	up.waitEntered(t, 2)
	code, h := send(t, "GET", "http://"+p.Listen+"/chat/fast", "X-User-ID", "alice")
	if code != 429 || h.Get("Retry-After") != "2" || h.Get("X-RateLimit-Remaining") != "0" || h.Get("X-RateLimit-Limit") != "2" {
		t.Fatalf("third request at the limit: %d, Retry-After %q, remaining %q, limit %q; want 429, 2, 0, 2", code, h.Get("Retry-After"), h.Get("X-RateLimit-Remaining"), h.Get("X-RateLimit-Limit"))
	}
	if n := up.total.Load(); n != 2 {
		t.Errorf("the upstream saw %d requests, want the 2 slow ones (the refused one never reached it)", n)
	}
	if code, _ := send(t, "GET", "http://"+p.Listen+"/chat/fast", "X-User-ID", "bob"); code != 200 {
		t.Errorf("bob while alice is at her limit: %d, want 200", code)
	}
	waitSlots(t, p.Admin, 2) // alice's two, once bob's has come back

	cancel()
	if code := <-first; code != -1 {
		t.Errorf("the request whose client hung up: %d", code)
	}
	waitSlots(t, p.Admin, 1)
	if code, _ := send(t, "GET", "http://"+p.Listen+"/chat/fast", "X-User-ID", "alice"); code != 200 {
		t.Errorf("alice after one client hung up: %d, want 200 (its slot is free)", code)
	}
	up.releaseAll()
	if code := <-second; code != 200 {
		t.Errorf("the second slow request: %d, want 200", code)
	}
	waitSlots(t, p.Admin, 0)
	if n := metricValue(t, p.Admin, `sluice_leases_expired_total{rule="chat-slots"}`); n != 0 {
		t.Errorf("leases expired: %v, want 0 (every slot was given back)", n)
	}
}

// waitSlots waits until chat-slots' gauge falls to want: a release follows
// the response's end, which the client may see first.
func waitSlots(t *testing.T, admin string, want float64) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		got := metricValue(t, admin, `sluice_slots_in_use{rule="chat-slots"}`)
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("slots in use = %v after 20s, want %v", got, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// SIGKILL a serve holding slots on Pebble (durability sync): the slots are
// on disk, so a serve restarted on the same directory still counts them
// (a request is refused while less than max_hold has passed since they
// were taken, as measured here), and they come back by themselves once
// max_hold has passed: nothing leaks.
func TestServeSlotsSurviveSIGKILL(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	t.Parallel()
	bin := buildBinary(t)
	up := startSlotUpstream(t, 0)
	dir := t.TempDir()
	const hold = 4 * time.Second
	cfg := filepath.Join(dir, "sluice.yaml")
	writeFile(t, cfg, slotsConfig(fmt.Sprintf("  backend: pebble\n  dir: %s\n  durability: sync", filepath.Join(dir, "state")), "user", 2, hold))
	p := startSlotServe(t, bin, cfg, up.URL)

	taken := time.Now() // the slots are taken after this
	slowRequest(context.Background(), p.Listen, "alice")
	slowRequest(context.Background(), p.Listen, "alice")
	up.waitEntered(t, 2)
	held := time.Now() // and before this: both requests have reached the upstream
	if code, _ := send(t, "GET", "http://"+p.Listen+"/chat/fast", "X-User-ID", "alice"); code != 429 {
		t.Fatalf("a third request while two hold the slots: %d, want 429", code)
	}
	if err := p.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for !p.Exited() {
		time.Sleep(10 * time.Millisecond)
	}

	p = startSlotServe(t, bin, cfg, up.URL)
	code, _ := send(t, "GET", "http://"+p.Listen+"/chat/fast", "X-User-ID", "alice")
	if elapsed := time.Since(taken); elapsed < hold {
		// The leases were taken after taken: they are live still.
		if code != 429 {
			t.Errorf("right after the restart (%v after the slots were taken, max_hold %v): %d, want 429 (the killed process' slots still held)", elapsed.Round(time.Millisecond), hold, code)
		}
	} else {
		t.Logf("the restart took %v, past max_hold %v: the leases have ended already", elapsed.Round(time.Millisecond), hold)
	}
	if code, _ := send(t, "GET", "http://"+p.Listen+"/chat/fast", "X-User-ID", "bob"); code != 200 {
		t.Errorf("bob after the restart: %d, want 200", code)
	}
	// Once max_hold has passed since the slots were taken, at the latest,
	// they have come back: both may be taken again. They were taken before
	// held, perhaps well after taken on a loaded machine, so the wait
	// counts from held.
	time.Sleep(time.Until(held.Add(hold + 100*time.Millisecond)))
	second := time.Now()
	slowRequest(context.Background(), p.Listen, "alice")
	slowRequest(context.Background(), p.Listen, "alice")
	up.waitEntered(t, 2)
	if code, _ := send(t, "GET", "http://"+p.Listen+"/chat/fast", "X-User-ID", "alice"); code != 429 && time.Since(second) < hold {
		t.Errorf("a third request while the new two hold the slots: %d, want 429", code)
	}
	up.releaseAll()
}

// A fleet of 3 serve processes on one Redis, a concurrency rule of 10
// slots for everyone (scope global): however the load is spread, the
// upstream never counts more than 10 requests in flight at once, and every
// request is answered 200 or 429 (503 only where Redis was too slow).
func TestFleetSlotsNeverExceedTheLimit(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs a fleet")
	}
	t.Parallel()
	rs := redistest.Start(t)
	bin := buildBinary(t)
	up := startSlotUpstream(t, 20*time.Millisecond)
	cfg := filepath.Join(t.TempDir(), "fleet.yaml")
	writeFile(t, cfg, slotsConfig(fmt.Sprintf("  backend: redis\n  redis:\n    addrs: [%s]\n    key_prefix: %q", rs.Addr, testPrefix(t)), "global", 10, time.Minute))
	var procs []*serveproc.Process
	for range 3 {
		procs = append(procs, startSlotServe(t, bin, cfg, up.URL))
	}
	const clients, each = 30, 8
	var (
		mu     sync.Mutex
		counts = map[int]int{}
		wg     sync.WaitGroup
	)
	for c := range clients {
		wg.Go(func() {
			for k := range each {
				p := procs[(c+k)%len(procs)]
				req, _ := http.NewRequest("GET", "http://"+p.Listen+"/chat/x", nil)
				code := -1
				if resp, err := fleetClient.Do(req); err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					code = resp.StatusCode
				}
				mu.Lock()
				counts[code]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	t.Logf("statuses %v; at most %d in flight at the upstream", counts, up.most.Load())
	if most := up.most.Load(); most > 10 {
		t.Errorf("the upstream counted %d requests in flight at once, over the fleet's limit of 10", most)
	}
	if counts[200] < 10 || counts[200]+counts[429]+counts[503] != clients*each {
		t.Errorf("statuses %v over %d requests: want at least 10 × 200, and only 200, 429 or 503", counts, clients*each)
	}
	for i, p := range procs {
		waitSlotsOf(t, p.Admin, i)
	}
}

// waitSlotsOf waits until process i holds no slot.
func waitSlotsOf(t *testing.T, admin string, i int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for metricValue(t, admin, `sluice_slots_in_use{rule="chat-slots"}`) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("process %d still holds slots 20s after the load", i)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
