// Package rlsproc runs the rate-limit services the bench programs call
// over loopback gRPC as child processes: `sluice rls`, envoyproxy/ratelimit
// (built from the module proxy into a temporary directory) and the
// redis-server the latter needs, each on free loopback ports, stopped with
// SIGINT and killed when they do not finish.
package rlsproc

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
	"slices"
	"strconv"
	"strings"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	goredis "github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluice-go/sluice/bench"
)

// EnvoyModule and EnvoyVersion name the envoyproxy/ratelimit build that
// is the peer: its main package and a pseudo-version known to build with
// the toolchain the bench module asks for.
const (
	EnvoyModule  = "github.com/envoyproxy/ratelimit"
	EnvoyVersion = "v1.4.1-0.20260122083618-3fb702589d36"
)

// Server is one rate-limit service the load generator calls.
type Server struct {
	Name   string
	Cmd    *exec.Cmd
	Exited chan struct{} // closed when the process has exited
	Conn   *grpc.ClientConn
	Client rlspb.RateLimitServiceClient
	Log    string // the file holding its output, when it has one
}

// Probe is the call Ready makes: one descriptor of one entry in a domain
// whose configuration limits it.
type Probe struct {
	Domain, Key, Value string
}

var listening = regexp.MustCompile(`msg="sluice rls: listening" grpc=(\S+)`)

// StartSluice starts `bin` with args (an rls command line) and connects to
// it once it logs its listener. What it writes before that goes to
// standard error; what it writes after goes to rest (discarded when nil).
func StartSluice(name, bin string, args []string, rest io.Writer) (*Server, error) {
	cmd := exec.Command(bin, args...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	sc := bufio.NewScanner(stderr)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	addr := ""
	var said []string // the last lines it wrote, for the error
	for sc.Scan() {
		if m := listening.FindStringSubmatch(sc.Text()); m != nil {
			addr = m[1]
			break
		}
		fmt.Fprintln(os.Stderr, sc.Text())
		said = append(said, sc.Text())
		if len(said) > 10 {
			said = said[1:]
		}
	}
	if addr == "" {
		cmd.Process.Kill()
		cmd.Wait()
		return nil, fmt.Errorf("%s %s exited before listening; it wrote: %s", bin, strings.Join(args, " "), strings.Join(said, "\n"))
	}
	if rest == nil {
		rest = io.Discard
	}
	copied := make(chan struct{})
	go func() { io.Copy(rest, stderr); close(copied) }()
	s := &Server{Name: name, Cmd: cmd, Exited: make(chan struct{})}
	go func() { <-copied; cmd.Wait(); close(s.Exited) }()
	if err := s.Dial(addr); err != nil {
		s.Stop()
		return nil, err
	}
	return s, nil
}

// Dial connects the server's client to addr.
func (s *Server) Dial(addr string) error {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	s.Conn, s.Client = conn, rlspb.NewRateLimitServiceClient(conn)
	return nil
}

// Stop asks the process to finish, and kills it after 10s.
func (s *Server) Stop() {
	if s.Conn != nil {
		s.Conn.Close()
	}
	Interrupt(s.Cmd, s.Exited)
}

// Kill kills the process at once and waits for it.
func (s *Server) Kill() {
	if s.Conn != nil {
		s.Conn.Close()
	}
	s.Cmd.Process.Kill()
	<-s.Exited
}

// Interrupt asks cmd's process to finish (SIGINT) and waits for exited to
// close, killing the process if it has not finished after 10s.
func Interrupt(cmd *exec.Cmd, exited <-chan struct{}) {
	cmd.Process.Signal(os.Interrupt)
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		cmd.Process.Kill()
		<-exited
	}
}

// Ready waits until the server answers p with the probe's limit in force:
// its configuration is loaded and its store reached.
func (s *Server) Ready(timeout time.Duration, p Probe) error {
	deadline := time.Now().Add(timeout)
	req := &rlspb.RateLimitRequest{Domain: p.Domain, Descriptors: []*rlv3.RateLimitDescriptor{
		{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: p.Key, Value: p.Value}}},
	}}
	var last error
	for time.Now().Before(deadline) {
		select {
		case <-s.Exited:
			return fmt.Errorf("%s exited before answering%s", s.Name, s.LogTail())
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		resp, err := s.Client.ShouldRateLimit(ctx, req)
		cancel()
		switch {
		case err != nil:
			last = err
		case len(resp.Statuses) != 1 || resp.Statuses[0].CurrentLimit == nil:
			last = fmt.Errorf("answered without the %s limit: %v", p.Key, resp)
		case resp.OverallCode != rlspb.RateLimitResponse_OK:
			last = fmt.Errorf("answered %v", resp.OverallCode)
		default:
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("%s not ready after %s: %v%s", s.Name, timeout, last, s.LogTail())
}

// LogTail returns the last 4000 bytes of the server's log file, introduced,
// or "" when it has none.
func (s *Server) LogTail() string {
	if s.Log == "" {
		return ""
	}
	b, _ := os.ReadFile(s.Log)
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return "; its log ends:\n" + string(b)
}

// BuildEnvoy builds envoyproxy/ratelimit's service into dir, from a
// temporary directory outside any module, and returns the binary.
func BuildEnvoy(dir string) (string, error) {
	scratch, err := os.MkdirTemp("", "rlsbench-envoy-build")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(scratch)
	cmd := exec.Command("go", "install", EnvoyModule+"/src/service_cmd@"+EnvoyVersion)
	cmd.Dir = scratch
	cmd.Env = append(os.Environ(), "GOBIN="+dir, "GOFLAGS=-mod=mod", "GOWORK=off")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go install %s/src/service_cmd@%s: %v\n%s", EnvoyModule, EnvoyVersion, err, out)
	}
	return filepath.Join(dir, "service_cmd"), nil
}

// EnvoySettings are the environment of the envoyproxy/ratelimit process
// but for its ports and paths.
var EnvoySettings = []string{
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

// StartEnvoy starts envoyproxy/ratelimit on the Redis at redisAddr with
// the configuration under runtimeRoot/ratelimit/config, its output going
// to logFile, and waits until it answers p. Each of settings, NAME=VALUE,
// replaces EnvoySettings' (or the environment's) NAME.
func StartEnvoy(bin, redisAddr, runtimeRoot, logFile string, p Probe, settings ...string) (*Server, error) {
	ports, err := FreePorts(3)
	if err != nil {
		return nil, err
	}
	var env []string
	for _, kv := range append(os.Environ(), EnvoySettings...) {
		if !slices.ContainsFunc(settings, func(s string) bool {
			name, _, _ := strings.Cut(s, "=")
			return strings.HasPrefix(kv, name+"=")
		}) {
			env = append(env, kv)
		}
	}
	env = append(env, settings...)
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
	s := &Server{Name: "envoy", Cmd: cmd, Exited: make(chan struct{}), Log: logFile}
	go func() { cmd.Wait(); lf.Close(); close(s.Exited) }()
	if err := s.Dial(net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0]))); err != nil {
		s.Stop()
		return nil, err
	}
	if err := s.Ready(60*time.Second, p); err != nil {
		s.Stop()
		return nil, err
	}
	return s, nil
}

// Redis is a redis-server the program started.
type Redis struct {
	Addr   string
	Cmd    *exec.Cmd
	exited chan struct{}
	admin  *goredis.Client
}

// StartRedis starts redis-server on a free loopback port, with no
// persistence, its files in dir, and waits until it answers PING.
func StartRedis(dir string) (*Redis, error) {
	ports, err := FreePorts(1)
	if err != nil {
		return nil, err
	}
	port := strconv.Itoa(ports[0])
	cmd := exec.Command("redis-server", "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", dir, "--logfile", filepath.Join(dir, "redis.log"), "--daemonize", "no")
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	r := &Redis{Addr: net.JoinHostPort("127.0.0.1", port), Cmd: cmd, exited: make(chan struct{})}
	go func() { cmd.Wait(); close(r.exited) }()
	r.admin = goredis.NewClient(&goredis.Options{Addr: r.Addr})
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
			r.Stop()
			return nil, fmt.Errorf("redis-server on %s did not answer PING in 10s: %v", r.Addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Stop ends redis-server.
func (r *Redis) Stop() {
	r.admin.Close()
	Interrupt(r.Cmd, r.exited)
}

// Flush empties every database.
func (r *Redis) Flush() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := r.admin.Do(ctx, "FLUSHALL", "SYNC").Err(); err != nil {
		return fmt.Errorf("FLUSHALL: %w", err)
	}
	return nil
}

// Counters reads redis-server's calls per command and its reads from
// client sockets.
func (r *Redis) Counters() (bench.ServerCounters, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return bench.ReadServerCounters(ctx, r.admin)
}

// FreePorts returns n distinct loopback ports that were free a moment ago.
func FreePorts(n int) ([]int, error) {
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

// Command runs name with args and returns its output's first line, or
// "unknown".
func Command(name string, args ...string) string {
	out, err := exec.Command(name, args...).Output()
	if err != nil {
		return "unknown"
	}
	line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	return line
}
