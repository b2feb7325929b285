// Command rlsbench measures `sluice rls`, Envoy's external rate-limit
// service, as Envoy sees it: decisions per second and the p50 and p99 of a
// ShouldRateLimit call, made through go-control-plane's generated client
// over loopback gRPC by 1, 16 and 64 concurrent callers, on the memory
// store and on Pebble.
//
// It builds the sluice binary, writes an envoyproxy/ratelimit
// configuration (domain bench: a per-user limit nested under a tenant, and
// the tenant's own), and for each store starts one `sluice rls` process.
// Each call is one request of two descriptors, (tenant, user) and
// (tenant), decided as one; users are taken in turn from -keys, and the
// limits are high enough that every call is allowed, so the figures are
// those of the decision path, not of refusals. Stores are interleaved
// within a round and rounds repeated (-rounds); the table gives each
// figure's median over the rounds. The load generator runs on the same
// machine as the server. Run it from bench/:
//
//	go run ./cmd/rlsbench -out out/rls.md
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

const configYAML = `domain: bench
descriptors:
  - key: tenant
    rate_limit:
      unit: day
      requests_per_unit: 1000000000
    descriptors:
      - key: user
        rate_limit:
          unit: day
          requests_per_unit: 1000000000
`

func main() {
	out := flag.String("out", "", "write the markdown report to this `file` (and stdout)")
	duration := flag.Duration("duration", 3*time.Second, "how long each measurement runs")
	rounds := flag.Int("rounds", 3, "rounds; the report gives medians")
	keys := flag.Int("keys", 100000, "distinct users")
	callersFlag := flag.String("callers", "1,16,64", "concurrent callers, comma-separated")
	storesFlag := flag.String("stores", "memory,pebble", "stores, comma-separated")
	flag.Parse()
	var callers []int
	for _, s := range strings.Split(*callersFlag, ",") {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			fatalf("-callers: %q", s)
		}
		callers = append(callers, n)
	}
	stores := strings.Split(*storesFlag, ",")

	work, err := os.MkdirTemp("", "rlsbench")
	if err != nil {
		fatalf("%v", err)
	}
	defer os.RemoveAll(work)
	bin := filepath.Join(work, "sluice")
	build := exec.Command("go", "build", "-C", "..", "-o", bin, "./cmd/sluice")
	build.Stderr = os.Stderr
	if err := build.Run(); err != nil {
		fatalf("building sluice: %v", err)
	}
	cfgDir := filepath.Join(work, "config")
	os.Mkdir(cfgDir, 0o755)
	if err := os.WriteFile(filepath.Join(cfgDir, "bench.yaml"), []byte(configYAML), 0o644); err != nil {
		fatalf("%v", err)
	}

	procs := map[string]*server{}
	for _, s := range stores {
		args := []string{"rls", "--config", cfgDir, "--grpc", "127.0.0.1:0"}
		if s != "memory" {
			args = append(args, "--backend", s, "--dir", filepath.Join(work, s))
		}
		p, err := start(bin, args)
		if err != nil {
			fatalf("starting %s: %v", s, err)
		}
		defer p.stop()
		procs[s] = p
	}

	type cell struct{ rate, p50, p99 []float64 }
	results := map[string]map[int]*cell{}
	for _, s := range stores {
		results[s] = map[int]*cell{}
		for _, c := range callers {
			results[s][c] = &cell{}
		}
	}
	var next atomic.Uint64
	for r := 0; r < *rounds; r++ {
		for _, c := range callers {
			for _, s := range stores {
				rate, p50, p99 := measure(procs[s].client, c, *duration, *keys, &next)
				fmt.Fprintf(os.Stderr, "round %d %s %d callers: %.0f/s p50 %.0fµs p99 %.0fµs\n", r+1, s, c, rate, p50, p99)
				x := results[s][c]
				x.rate, x.p50, x.p99 = append(x.rate, rate), append(x.p50, p50), append(x.p99, p99)
			}
		}
	}

	var b strings.Builder
	fmt.Fprintf(&b, "# `sluice rls`: decisions over loopback gRPC\n\n")
	fmt.Fprintf(&b, "Measured %s on %s/%s, %d CPUs, %s; `go run ./cmd/rlsbench` (bench/cmd/rlsbench).\n",
		time.Now().UTC().Format("2006-01-02 15:04 UTC"), runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), runtime.Version())
	fmt.Fprintf(&b, "Each call is one ShouldRateLimit request of two descriptors, (tenant, user) and (tenant), decided as one\n")
	fmt.Fprintf(&b, "(engine ApplyAll), through go-control-plane's client; %d users in turn; every call allowed.\n", *keys)
	fmt.Fprintf(&b, "Closed loop of %s per cell, %d rounds interleaving the stores, medians; the load generator shares the machine.\n", *duration, *rounds)
	fmt.Fprintf(&b, "Pebble in the default interval durability (flushed every 50ms).\n\n")
	fmt.Fprintf(&b, "| store | callers | decisions/s | p50 | p99 |\n|---|---:|---:|---:|---:|\n")
	for _, s := range stores {
		for _, c := range callers {
			x := results[s][c]
			fmt.Fprintf(&b, "| %s | %d | %.0f | %.0f µs | %.0f µs |\n", s, c, median(x.rate), median(x.p50), median(x.p99))
		}
	}
	fmt.Print(b.String())
	if *out != "" {
		os.MkdirAll(filepath.Dir(*out), 0o755)
		if err := os.WriteFile(*out, []byte(b.String()), 0o644); err != nil {
			fatalf("%v", err)
		}
	}
}

// measure runs n callers in a closed loop for d and returns the calls per
// second and the p50 and p99 latencies in microseconds.
func measure(c rlspb.RateLimitServiceClient, n int, d time.Duration, keys int, next *atomic.Uint64) (rate, p50, p99 float64) {
	var wg sync.WaitGroup
	lat := make([][]time.Duration, n)
	stop := time.Now().Add(d)
	start := time.Now()
	var failed atomic.Int64
	for g := 0; g < n; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(stop) {
				u := strconv.FormatUint(next.Add(1)%uint64(keys), 10)
				req := &rlspb.RateLimitRequest{Domain: "bench", Descriptors: []*rlv3.RateLimitDescriptor{
					{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "tenant", Value: "t"}, {Key: "user", Value: u}}},
					{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "tenant", Value: "t"}}},
				}}
				t0 := time.Now()
				resp, err := c.ShouldRateLimit(context.Background(), req)
				lat[g] = append(lat[g], time.Since(t0))
				if err != nil || resp.OverallCode != rlspb.RateLimitResponse_OK {
					failed.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if f := failed.Load(); f > 0 {
		fatalf("%d calls failed or were refused", f)
	}
	var all []time.Duration
	for _, l := range lat {
		all = append(all, l...)
	}
	slices.Sort(all)
	q := func(p float64) float64 { return float64(all[int(p*float64(len(all)-1))]) / 1e3 }
	return float64(len(all)) / elapsed.Seconds(), q(0.50), q(0.99)
}

type server struct {
	cmd    *exec.Cmd
	conn   *grpc.ClientConn
	client rlspb.RateLimitServiceClient
}

var listening = regexp.MustCompile(`msg="sluice rls: listening" grpc=(\S+)`)

func start(bin string, args []string) (*server, error) {
	cmd := exec.Command(bin, args...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	sc := bufio.NewScanner(stderr)
	addr := ""
	for sc.Scan() {
		if m := listening.FindStringSubmatch(sc.Text()); m != nil {
			addr = m[1]
			break
		}
		fmt.Fprintln(os.Stderr, sc.Text())
	}
	if addr == "" {
		cmd.Process.Kill()
		return nil, fmt.Errorf("it exited before listening")
	}
	go io.Copy(io.Discard, stderr)
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	return &server{cmd: cmd, conn: conn, client: rlspb.NewRateLimitServiceClient(conn)}, nil
}

func (s *server) stop() {
	s.conn.Close()
	s.cmd.Process.Signal(os.Interrupt)
	s.cmd.Wait()
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	return s[len(s)/2]
}

func fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "rlsbench: "+format+"\n", args...)
	os.Exit(1)
}
