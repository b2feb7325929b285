package main

import (
	"context"
	"fmt"
	"io/fs"
	"net/http"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	grpccodes "google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/sluice-go/sluice/backend/backendtest/fulldisk"
)

// A real serve process whose store's disk fills up (a tmpfs mounted for
// the test) keeps running: the requests whose decision cannot be written
// are store errors, answered by on_store_error (closed: 503); /healthz
// answers 503 naming the store's directory and /metrics has
// sluice_store_healthy 0; the log says so once. Once the disk has room the
// process writes again by itself: /healthz answers ok, the log says so
// once, a caller's spending made during the failure still counts, and
// after a restart too.
func TestServeProcessFullDisk(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	t.Parallel()
	bin := buildBinary(t)
	for _, backendName := range []string{"pebble", "bolt"} {
		t.Run(backendName, func(t *testing.T) {
			root := fulldisk.Mount(t, fulldisk.Size)
			state := filepath.Join(root, "state")
			up := upstream(t)
			cfgPath := filepath.Join(t.TempDir(), "sluice.yaml")
			store := fmt.Sprintf("  backend: %s\n  dir: %s\n  durability: interval\n  flush_interval: 20ms", backendName, state)
			cfg := strings.Replace(gatewayConfig(store, "10.0.0.0/8", 100000), "on_store_error: open", "on_store_error: closed", 1)
			writeFile(t, cfgPath, cfg)
			args := []string{"--config", cfgPath, "--listen", "127.0.0.1:0", "--upstream", up.URL, "--admin", "127.0.0.1:0"}
			p := startServeProcess(t, bin, args...)
			m := adminRE.FindStringSubmatch(p.stderr.String())
			if m == nil {
				t.Fatalf("no admin address in the log:\n%s", p.stderr)
			}
			admin := m[1]
			base := "http://" + p.listen
			order := func(user string) int {
				code, _ := send(t, "POST", base+"/api/orders", "X-User-ID", user)
				return code
			}
			pad := strings.Repeat("x", 200)
			if got := order("alice"); got != 200 {
				t.Fatalf("alice's first order: %d", got)
			}
			waitHealthz(t, admin, http.StatusOK)

			filler := fulldisk.Fill(t, root)
			// New callers until one is refused: the flushes fail. How many
			// records fit first depends on the store (Pebble writes into
			// log space it set aside before the disk filled) and on how
			// the flushes batch them, so the bound is generous, in count
			// and time, and a pause every 20 orders lets the flusher meet
			// the full disk as a busier machine would.
			refused, i := 0, 0
			for stop := time.Now().Add(90 * time.Second); i < 100000 && refused == 0 && time.Now().Before(stop); i++ {
				if got := order(fmt.Sprintf("u%d-%s", i, pad)); got == 503 {
					refused++
				} else if got != 200 {
					t.Fatalf("a new caller's order on a full disk: %d", got)
				}
				if i%20 == 19 {
					time.Sleep(20 * time.Millisecond) // one flush interval
					fulldisk.Fill(t, root)            // keep the disk full (see TestRLSProcessFullDisk)
				}
			}
			if refused == 0 {
				t.Fatalf("%d orders on a full disk, none refused", i)
			}
			t.Logf("the first order refused was new caller %d", i)
			// bob orders three times while the disk is full: refused
			// (closed), but spent.
			for range 3 {
				if got := order("bob"); got != 503 {
					t.Fatalf("bob's order on a full disk: %d, want 503", got)
				}
			}
			code, body := get(t, "http://"+admin+"/healthz")
			if code != http.StatusServiceUnavailable || !strings.Contains(body, state) || !strings.Contains(body, "disk is full") {
				t.Fatalf("/healthz on a full disk: %d %q; want 503 naming %s and a full disk", code, body, state)
			}
			if got := metricValue(t, admin, "sluice_store_healthy"); got != 0 {
				t.Fatalf("sluice_store_healthy on a full disk = %v, want 0", got)
			}
			if got := metricValue(t, admin, "sluice_flush_errors_total"); got == 0 {
				t.Fatal("sluice_flush_errors_total on a full disk = 0")
			}
			time.Sleep(100 * time.Millisecond) // five flush intervals more of failing
			if n := strings.Count(p.stderr.String(), "the durable store fails to write"); n != 1 {
				t.Fatalf("the log says %d times that the store fails to write, want once:\n%s", n, tail(p.stderr.String()))
			}

			fulldisk.Free(t, filler)
			freed := time.Now()
			waitHealthz(t, admin, http.StatusOK)
			t.Logf("/healthz ok %v after the disk had room", time.Since(freed).Round(time.Millisecond))
			if got := metricValue(t, admin, "sluice_store_healthy"); got != 1 {
				t.Fatalf("sluice_store_healthy once the disk has room = %v, want 1", got)
			}
			log := p.stderr.String()
			if n := strings.Count(log, "the durable store writes again"); n != 1 {
				t.Fatalf("the log says %d times that the store writes again, want once:\n%s", n, tail(log))
			}
			for _, line := range strings.Split(log, "\n") {
				if strings.Contains(line, "the durable store") {
					t.Log(line)
				}
			}
			if strings.Contains(log, "panic") || strings.Contains(log, "damaged") {
				t.Fatalf("the log:\n%s", tail(log))
			}
			// bob spent 3 of 5 while the disk was full.
			if got := []int{order("bob"), order("bob"), order("bob")}; fmt.Sprint(got) != "[200 200 429]" {
				t.Fatalf("bob's orders once the disk has room: %v, want [200 200 429]", got)
			}

			// And after a restart.
			if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			if err := p.wait(t, 30*time.Second); err != nil {
				t.Fatalf("serve exited with %v:\n%s", err, tail(p.stderr.String()))
			}
			p = startServeProcess(t, bin, args...)
			base = "http://" + p.listen
			if got := order("bob"); got != 429 {
				t.Fatalf("bob's order after a restart: %d, want 429", got)
			}
		})
	}
}

// waitHealthz polls the admin listener's /healthz until it answers want,
// for up to a minute.
func waitHealthz(t *testing.T, admin string, want int) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		code, body := get(t, "http://"+admin+"/healthz")
		if code == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("/healthz still %d %q after a minute, want %d", code, body, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// listFiles lists the files under dir with their sizes and the blocks
// they hold, for a failure's message.
func listFiles(dir string) string {
	var b strings.Builder
	var fsst syscall.Statfs_t
	if err := syscall.Statfs(dir, &fsst); err == nil {
		fmt.Fprintf(&b, "%s: a file system of %d bytes, %d free\n", dir, fsst.Blocks*uint64(fsst.Bsize), fsst.Bavail*uint64(fsst.Bsize))
	}
	filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		if fi, err := d.Info(); err == nil {
			blocks := int64(-1)
			if st, ok := fi.Sys().(*syscall.Stat_t); ok {
				blocks = st.Blocks * 512
			}
			fmt.Fprintf(&b, "%s: %d bytes, %d on disk\n", path, fi.Size(), blocks)
		}
		return nil
	})
	return b.String()
}

// tail returns the end of a long log.
func tail(s string) string { return lastBytes(s, 4000) }

// lastBytes returns the last n bytes of s, marked as cut where it was.
func lastBytes(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

// A real rls process whose Pebble store's disk fills up answers the
// requests it cannot record UNAVAILABLE, /healthz 503 naming the store's
// directory and the gRPC health service NOT_SERVING; once the disk has
// room, it serves again by itself, both health checks saying so.
func TestRLSProcessFullDisk(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	t.Parallel()
	root := fulldisk.Mount(t, fulldisk.Size)
	state := filepath.Join(root, "state")
	p := startRLS(t, "--config", "testdata/rls/sluice", "--backend", "pebble", "--dir", state)
	hc := healthpb.NewHealthClient(p.conn)
	grpcHealth := func() healthpb.HealthCheckResponse_ServingStatus {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		h, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: rlspb.RateLimitService_ServiceDesc.ServiceName})
		if err != nil {
			t.Fatal(err)
		}
		return h.Status
	}
	waitGRPCHealth := func(want healthpb.HealthCheckResponse_ServingStatus) {
		t.Helper()
		deadline := time.Now().Add(time.Minute)
		for grpcHealth() != want {
			if time.Now().After(deadline) {
				t.Fatalf("gRPC health not %v after a minute", want)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	if got := rlsAnswer(p.ask(t, "api", 0, rd("tenant", "t1", "user", "u"))); got != "OK: OK" {
		t.Fatalf("before the disk is full: %s", got)
	}
	waitGRPCHealth(healthpb.HealthCheckResponse_SERVING)

	filler := fulldisk.Fill(t, root)
	pad := strings.Repeat("x", 200)
	// The disk is kept full, as another writer would keep it, by filling
	// it again at every pause. Pebble reserves room for its log ahead of
	// the writes and, as far as the files show, gives back what a log did
	// not use when it moves to the next: where the store's first write
	// raced the fill, about 3 MB were held while the filler filled and
	// free again later, and the store wrote over 25,000 new callers into
	// room the test meant to be full, never refused within the bound (4
	// runs of 72, three test processes at once beside two CPU burners).
	//
	// New callers until one is refused, bounded in count and time as
	// serve's test is: how many records fit first depends on the log space
	// Pebble set aside before the disk filled and on how the flushes batch
	// them (5000 were not always enough on a loaded machine), and a pause
	// every 20 requests lets the flusher meet the full disk.
	unavailable, i := false, 0
	for stop := time.Now().Add(90 * time.Second); i < 100000 && !unavailable && time.Now().Before(stop); i++ {
		if i%20 == 19 {
			time.Sleep(50 * time.Millisecond) // the default flush interval
			fulldisk.Fill(t, root)            // keep the disk full: see above
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		_, err := p.client.ShouldRateLimit(ctx, &rlspb.RateLimitRequest{Domain: "api", Descriptors: []*rlv3.RateLimitDescriptor{rd("tenant", "t1", "user", fmt.Sprintf("u%d-%s", i, pad))}})
		cancel()
		switch {
		case status.Code(err) == grpccodes.Unavailable:
			unavailable = true
		case err != nil:
			t.Fatalf("a request on a full disk: %v", err)
		}
	}
	if !unavailable {
		code, body := get(t, "http://"+p.admin+"/healthz")
		t.Fatalf("%d requests on a full disk, none answered UNAVAILABLE; /healthz %d %q; the store's files:\n%s\nthe process' goroutines:\n%s",
			i, code, body, listFiles(root), p.goroutines())
	}
	t.Logf("the first request refused was new caller %d", i)
	code, body := get(t, "http://"+p.admin+"/healthz")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, state) {
		t.Fatalf("/healthz on a full disk: %d %q; want 503 naming %s", code, body, state)
	}
	waitGRPCHealth(healthpb.HealthCheckResponse_NOT_SERVING)

	fulldisk.Free(t, filler)
	waitHealthz(t, p.admin, http.StatusOK)
	waitGRPCHealth(healthpb.HealthCheckResponse_SERVING)
	if got := rlsAnswer(p.ask(t, "api", 0, rd("tenant", "t1", "user", "v"))); got != "OK: OK" {
		t.Fatalf("once the disk has room: %s", got)
	}
	if n := strings.Count(p.stderr.String(), "the durable store fails to write"); n != 1 {
		t.Fatalf("the log says %d times that the store fails to write, want once:\n%s", n, tail(p.stderr.String()))
	}
	p.stop(t)
}
