package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/sluice-go/sluice/bench/internal/rlsproc"
)

// attackYAML is the rate-limit configuration both services read: a
// per-user limit a day long, as docs/rls.md's example, high enough that
// no call of the run is refused for being over it.
const attackYAML = `domain: attack
descriptors:
  - key: user
    rate_limit:
      unit: day
      requests_per_unit: 1000000000
`

var probe = rlsproc.Probe{Domain: "attack", Key: "user", Value: "ready"}

// rlsTarget is one rate-limit service under attack, started afresh for
// each flood.
type rlsTarget struct {
	name  string
	start func() (*rlsproc.Server, procGroup, func(), error)
}

// sluiceRLS returns the target `sluice rls` on its default store (memory)
// with the configuration in cfgDir and extra flags.
func sluiceRLS(bin, cfgDir, logDir string, extra []string) rlsTarget {
	n := 0
	return rlsTarget{name: "sluice rls", start: func() (*rlsproc.Server, procGroup, func(), error) {
		n++
		args := append([]string{"rls", "--config", cfgDir, "--grpc", "127.0.0.1:0"}, extra...)
		logPath := filepath.Join(logDir, fmt.Sprintf("sluice-rls-%d.log", n))
		lf, err := os.Create(logPath)
		if err != nil {
			return nil, procGroup{}, nil, err
		}
		s, err := rlsproc.StartSluice("sluice rls", bin, args, lf)
		if err != nil {
			lf.Close()
			return nil, procGroup{}, nil, err
		}
		s.Log = logPath
		if err := s.Ready(30*time.Second, probe); err != nil {
			s.Kill()
			return nil, procGroup{}, nil, err
		}
		return s, procGroup{pids: []int{s.Cmd.Process.Pid}}, s.Kill, nil
	}}
}

// envoyRLS returns the target envoyproxy/ratelimit on a redis-server of
// its own, started afresh with it (so that its peak memory is this
// flood's), reading the configuration under runtimeRoot.
func envoyRLS(bin, runtimeRoot, logDir string) rlsTarget {
	n := 0
	return rlsTarget{name: "envoyproxy/ratelimit + redis-server", start: func() (*rlsproc.Server, procGroup, func(), error) {
		n++
		dir := filepath.Join(logDir, fmt.Sprintf("redis-%d", n))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, procGroup{}, nil, err
		}
		rds, err := rlsproc.StartRedis(dir)
		if err != nil {
			return nil, procGroup{}, nil, fmt.Errorf("starting redis-server: %w", err)
		}
		s, err := rlsproc.StartEnvoy(bin, rds.Addr, runtimeRoot, filepath.Join(logDir, fmt.Sprintf("envoy-%d.log", n)), probe)
		if err != nil {
			rds.Stop()
			return nil, procGroup{}, nil, fmt.Errorf("starting envoyproxy/ratelimit: %w", err)
		}
		return s, procGroup{pids: []int{s.Cmd.Process.Pid, rds.Cmd.Process.Pid}}, func() { s.Kill(); rds.Stop() }, nil
	}}
}

// rlsCaller starts the normal caller against s, on a connection of its
// own: one call of one descriptor every 10 ms.
func rlsCaller(s *rlsproc.Server) (*normalCaller, func(), error) {
	conn, err := grpc.NewClient(s.Conn.Target(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, nil, err
	}
	client := rlspb.NewRateLimitServiceClient(conn)
	start := func() *normalCaller {
		return startCaller(10*time.Millisecond, 2*time.Second, func(ctx context.Context, seq int) error {
			resp, err := client.ShouldRateLimit(ctx, &rlspb.RateLimitRequest{Domain: "attack", Descriptors: []*rlv3.RateLimitDescriptor{
				{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "user", Value: fmt.Sprintf("normal-%d", seq%100)}}},
			}})
			if err != nil {
				return err
			}
			if resp.OverallCode != rlspb.RateLimitResponse_OK {
				return fmt.Errorf("answered %v", resp.OverallCode)
			}
			return nil
		})
	}
	// Warm the connection.
	start().finish()
	return start(), func() { conn.Close() }, nil
}

// baseline runs the normal caller alone for d.
func rlsBaseline(s *rlsproc.Server, d time.Duration) (callerStats, error) {
	c, closeConn, err := rlsCaller(s)
	if err != nil {
		return callerStats{}, err
	}
	defer closeConn()
	time.Sleep(d)
	return c.finish(), nil
}

// answer describes what a call returned: its gRPC code, or the overall
// code of the response.
func answer(resp *rlspb.RateLimitResponse, err error) string {
	if err != nil {
		st := status.Convert(err)
		switch st.Code() {
		case codes.DeadlineExceeded, codes.Canceled:
			return st.Code().String()
		}
		return st.Code().String() + " " + clip(st.Message(), 60)
	}
	return resp.OverallCode.String()
}

// descriptorsRow is one flood of item 2.
type descriptorsRow struct {
	target      string
	n           int
	answer      string
	took        time.Duration
	cpuDuring   float64 // CPU seconds from the call to its answer
	cpuAfter    float64 // CPU seconds after the answer, until idle or the cap
	busyAfter   time.Duration
	busy        bool    // still burning CPU when the wait was capped
	idleRate    float64 // CPU seconds a second that count as idle
	before, dur callerStats
	err         string
}

// descriptorFlood sends one call of n descriptors with the deadline, and
// measures the CPU the server spends during and after it.
func descriptorFlood(t rlsTarget, n int, o *options) descriptorsRow {
	row := descriptorsRow{target: t.name, n: n}
	s, g, stop, err := t.start()
	if err != nil {
		row.err = err.Error()
		return row
	}
	defer stop()
	b0, err := g.read()
	if err != nil {
		row.err = err.Error()
		return row
	}
	if row.before, err = rlsBaseline(s, o.baseline); err != nil {
		row.err = err.Error()
		return row
	}
	b1, err := g.read()
	if err != nil {
		row.err = err.Error()
		return row
	}
	// The CPU the normal caller alone costs the server in a second: the
	// server is idle again when it spends no more than that (and 0.05 s).
	row.idleRate = (b1.cpu-b0.cpu)/o.baseline.Seconds() + 0.05
	req := &rlspb.RateLimitRequest{Domain: "attack", Descriptors: make([]*rlv3.RateLimitDescriptor, n)}
	for i := range req.Descriptors {
		req.Descriptors[i] = &rlv3.RateLimitDescriptor{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "user", Value: fmt.Sprintf("flood-%d", i)}}}
	}
	// Warm the flood's connection with a small call.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	_, err = s.Client.ShouldRateLimit(ctx, &rlspb.RateLimitRequest{Domain: "attack", Descriptors: req.Descriptors[:1]})
	cancel()
	if err != nil {
		row.err = "warm-up call: " + err.Error()
		return row
	}
	c, closeConn, err := rlsCaller(s)
	if err != nil {
		row.err = err.Error()
		return row
	}
	defer closeConn()
	u0, err := g.read()
	if err != nil {
		row.err = err.Error()
		return row
	}
	ctx, cancel = context.WithTimeout(context.Background(), o.floodDeadline)
	t0 := time.Now()
	resp, err := s.Client.ShouldRateLimit(ctx, req)
	row.took = time.Since(t0)
	cancel()
	row.answer = answer(resp, err)
	req = nil
	u1, err := g.read()
	if err != nil {
		row.err = err.Error()
		row.dur = c.finish()
		return row
	}
	row.cpuDuring = u1.cpu - u0.cpu
	// Wait until the server is idle or the cap.
	prev, last := u1, u1
	tAnswer := time.Now()
	row.busy = true
	for time.Since(tAnswer) < o.cpuWait {
		time.Sleep(time.Second)
		u, err := g.read()
		if err != nil {
			row.err = "server gone: " + err.Error()
			break
		}
		prev, last = last, u
		if last.cpu-prev.cpu <= row.idleRate {
			row.busy = false
			break
		}
	}
	row.busyAfter = time.Since(tAnswer)
	row.cpuAfter = last.cpu - u1.cpu
	row.dur = c.finish()
	select {
	case <-s.Exited:
		row.err = "the server exited" + s.LogTail()
	default:
	}
	return row
}

// valuesRow is one flood of item 3.
type valuesRow struct {
	target                    string
	size, requests            int
	answers                   map[string]int
	took                      time.Duration
	rssBefore, peak, rssAfter int64
	rssLater                  int64 // o.settle after the last answer
	before, dur               callerStats
	err                       string
}

// valueFlood sends o.valueRequests calls, 4 at a time, each of one
// descriptor whose value is size bytes and distinct.
func valueFlood(t rlsTarget, size int, o *options) valuesRow {
	row := valuesRow{target: t.name, size: size, requests: o.valueRequests, answers: map[string]int{}}
	s, g, stop, err := t.start()
	if err != nil {
		row.err = err.Error()
		return row
	}
	defer stop()
	if row.before, err = rlsBaseline(s, o.baseline); err != nil {
		row.err = err.Error()
		return row
	}
	pad := strings.Repeat("v", max(size-12, 0))
	smp := startSampler(g, 100*time.Millisecond)
	row.rssBefore = smp.now().rss
	c, closeConn, err := rlsCaller(s)
	if err != nil {
		smp.finish()
		row.err = err.Error()
		return row
	}
	defer closeConn()
	var mu sync.Mutex
	next := make(chan int)
	var wg sync.WaitGroup
	t0 := time.Now()
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				v := fmt.Sprintf("%012d", i) + pad
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				resp, err := s.Client.ShouldRateLimit(ctx, &rlspb.RateLimitRequest{Domain: "attack", Descriptors: []*rlv3.RateLimitDescriptor{
					{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "user", Value: v}}},
				}})
				cancel()
				a := answer(resp, err)
				mu.Lock()
				row.answers[a]++
				mu.Unlock()
			}
		}()
	}
	for i := range o.valueRequests {
		next <- i
	}
	close(next)
	wg.Wait()
	row.took = time.Since(t0)
	row.rssAfter = smp.now().rss
	time.Sleep(o.settle)
	row.dur = c.finish()
	row.rssLater = smp.now().rss
	row.peak, _ = smp.finish()
	select {
	case <-s.Exited:
		row.err = "the server exited" + s.LogTail()
	default:
	}
	return row
}

// writeRLSConfig writes the configuration where envoyproxy/ratelimit reads
// it (RUNTIME_ROOT/ratelimit/config) and returns that directory.
func writeRLSConfig(runtimeRoot string) (string, error) {
	dir := filepath.Join(runtimeRoot, "ratelimit", "config")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	return dir, os.WriteFile(filepath.Join(dir, "attack.yaml"), []byte(attackYAML), 0o644)
}
