package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	goredis "github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluice-go/sluice/bench"
)

// envoyModule and envoyVersion name the envoyproxy/ratelimit build that
// is the peer: its main package and a pseudo-version known to build with
// the toolchain the bench module asks for.
const (
	envoyModule  = "github.com/envoyproxy/ratelimit"
	envoyVersion = "v1.4.1-0.20260122083618-3fb702589d36"
)

var (
	cleanupMu sync.Mutex
	cleanups  []func()
)

// atExit registers f to run when the program ends, normally or by fatalf,
// the last registered first, so that no child process outlives it.
func atExit(f func()) {
	cleanupMu.Lock()
	defer cleanupMu.Unlock()
	cleanups = append(cleanups, f)
}

func runCleanups() {
	cleanupMu.Lock()
	fs := cleanups
	cleanups = nil
	cleanupMu.Unlock()
	for i := len(fs) - 1; i >= 0; i-- {
		fs[i]()
	}
}

// server is one rate-limit service the load generator calls.
type server struct {
	name   string
	cmd    *exec.Cmd
	exited chan struct{}
	conn   *grpc.ClientConn
	client rlspb.RateLimitServiceClient
	log    string // the file holding its output, when it has one
}

var listening = regexp.MustCompile(`msg="sluice rls: listening" grpc=(\S+)`)

// startSluice starts `sluice rls` and connects to it once it logs its
// listener.
func startSluice(name, bin string, args []string) (*server, error) {
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
		cmd.Wait()
		return nil, fmt.Errorf("it exited before listening")
	}
	go io.Copy(io.Discard, stderr)
	s := &server{name: name, cmd: cmd, exited: make(chan struct{})}
	go func() { cmd.Wait(); close(s.exited) }()
	if err := s.dial(addr); err != nil {
		s.stop()
		return nil, err
	}
	return s, nil
}

func (s *server) dial(addr string) error {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	s.conn, s.client = conn, rlspb.NewRateLimitServiceClient(conn)
	return nil
}

// stop asks the process to finish, and kills it after 10s.
func (s *server) stop() {
	if s.conn != nil {
		s.conn.Close()
	}
	interrupt(s.cmd, s.exited)
}

// interrupt asks cmd's process to finish (SIGINT) and waits for exited to
// close, killing the process if it has not finished after 10s.
func interrupt(cmd *exec.Cmd, exited <-chan struct{}) {
	cmd.Process.Signal(os.Interrupt)
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		cmd.Process.Kill()
		<-exited
	}
}

// ready waits until the server answers a ShouldRateLimit on the fleet
// domain with the burst limit in force: its configuration is loaded and
// its store reached.
func (s *server) ready(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	req := &rlspb.RateLimitRequest{Domain: "fleet", Descriptors: []*rlv3.RateLimitDescriptor{
		{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "burst", Value: "ready"}}},
	}}
	var last error
	for time.Now().Before(deadline) {
		select {
		case <-s.exited:
			return fmt.Errorf("%s exited before answering%s", s.name, s.logTail())
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		resp, err := s.client.ShouldRateLimit(ctx, req)
		cancel()
		switch {
		case err != nil:
			last = err
		case len(resp.Statuses) != 1 || resp.Statuses[0].CurrentLimit == nil:
			last = fmt.Errorf("answered without the burst limit: %v", resp)
		case resp.OverallCode != rlspb.RateLimitResponse_OK:
			last = fmt.Errorf("answered %v", resp.OverallCode)
		default:
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("%s not ready after %s: %v%s", s.name, timeout, last, s.logTail())
}

func (s *server) logTail() string {
	if s.log == "" {
		return ""
	}
	b, _ := os.ReadFile(s.log)
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return "; its log ends:\n" + string(b)
}

// buildEnvoy builds envoyproxy/ratelimit's service into dir, from a
// temporary directory outside any module, and returns the binary.
func buildEnvoy(dir string) (string, error) {
	scratch, err := os.MkdirTemp("", "rlsbench-envoy-build")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(scratch)
	cmd := exec.Command("go", "install", envoyModule+"/src/service_cmd@"+envoyVersion)
	cmd.Dir = scratch
	cmd.Env = append(os.Environ(), "GOBIN="+dir, "GOFLAGS=-mod=mod", "GOWORK=off")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go install %s/src/service_cmd@%s: %v\n%s", envoyModule, envoyVersion, err, out)
	}
	return filepath.Join(dir, "service_cmd"), nil
}

// envoySettings are the environment of the envoyproxy/ratelimit process
// but for its ports and paths.
var envoySettings = []string{
	"USE_STATSD=false",
	"LOG_LEVEL=warn",
	"REDIS_SOCKET_TYPE=tcp",
	"RUNTIME_SUBDIRECTORY=ratelimit",
	"RUNTIME_WATCH_ROOT=false",
	"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true",
	"GRPC_HOST=127.0.0.1",
	"HOST=127.0.0.1",
	"DEBUG_HOST=127.0.0.1",
}

// startEnvoy starts envoyproxy/ratelimit on the Redis at redisAddr with
// the configuration under runtimeRoot/ratelimit/config, its output going
// to logFile, and waits until it answers.
func startEnvoy(bin, redisAddr, runtimeRoot, logFile string) (*server, error) {
	ports, err := freePorts(3)
	if err != nil {
		return nil, err
	}
	env := append(os.Environ(), envoySettings...)
	env = append(env,
		"REDIS_URL="+redisAddr,
		"RUNTIME_ROOT="+runtimeRoot,
		"GRPC_PORT="+strconv.Itoa(ports[0]),
		"PORT="+strconv.Itoa(ports[1]),
		"DEBUG_PORT="+strconv.Itoa(ports[2]),
	)
	lf, err := os.Create(logFile)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = lf, lf
	if err := cmd.Start(); err != nil {
		lf.Close()
		return nil, err
	}
	s := &server{name: "envoy", cmd: cmd, exited: make(chan struct{}), log: logFile}
	go func() { cmd.Wait(); lf.Close(); close(s.exited) }()
	if err := s.dial(net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0]))); err != nil {
		s.stop()
		return nil, err
	}
	if err := s.ready(60 * time.Second); err != nil {
		s.stop()
		return nil, err
	}
	return s, nil
}

// redisServer is the redis-server the program starts for both services.
type redisServer struct {
	addr   string
	cmd    *exec.Cmd
	exited chan struct{}
	admin  *goredis.Client
}

// startRedis starts redis-server on a free loopback port, with no
// persistence, its files in dir, and waits until it answers PING.
func startRedis(dir string) (*redisServer, error) {
	ports, err := freePorts(1)
	if err != nil {
		return nil, err
	}
	port := strconv.Itoa(ports[0])
	cmd := exec.Command("redis-server", "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", dir, "--logfile", filepath.Join(dir, "redis.log"), "--daemonize", "no")
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	r := &redisServer{addr: net.JoinHostPort("127.0.0.1", port), cmd: cmd, exited: make(chan struct{})}
	go func() { cmd.Wait(); close(r.exited) }()
	r.admin = goredis.NewClient(&goredis.Options{Addr: r.addr})
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := r.admin.Ping(ctx).Err()
		cancel()
		if err == nil {
			return r, nil
		}
		select {
		case <-r.exited:
			log, _ := os.ReadFile(filepath.Join(dir, "redis.log"))
			return nil, fmt.Errorf("redis-server exited: %s", log)
		default:
		}
		if time.Now().After(deadline) {
			r.stop()
			return nil, fmt.Errorf("redis-server on %s did not answer PING in 10s: %v", r.addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (r *redisServer) stop() {
	r.admin.Close()
	interrupt(r.cmd, r.exited)
}

func (r *redisServer) flush() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := r.admin.Do(ctx, "FLUSHALL", "SYNC").Err(); err != nil {
		return fmt.Errorf("FLUSHALL: %w", err)
	}
	return nil
}

// counters reads redis-server's calls per command and its reads from
// client sockets.
func (r *redisServer) counters() (bench.ServerCounters, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return bench.ReadServerCounters(ctx, r.admin)
}

// freePorts returns n distinct loopback ports that were free a moment ago.
func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	if len(ports) != n {
		return nil, errors.New("no free ports")
	}
	return ports, nil
}

// command runs name with args and returns its output's first line, or
// "unknown".
func command(name string, args ...string) string {
	out, err := exec.Command(name, args...).Output()
	if err != nil {
		return "unknown"
	}
	line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	return line
}
