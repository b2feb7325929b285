// Package redistest starts real redis-server processes for tests: a
// standalone server or a Cluster of several nodes, each on free loopback
// ports in a temporary directory, stopped when the test ends. When
// redis-server is not on PATH, every helper skips the test, saying how to
// install it.
package redistest

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Install is the command that brings redis-server on a Debian machine.
const Install = "apt-get install -y redis-server"

// Available reports whether redis-server and redis-cli are on PATH.
func Available() bool {
	_, err1 := exec.LookPath("redis-server")
	_, err2 := exec.LookPath("redis-cli")
	return err1 == nil && err2 == nil
}

// Skip skips tb when redis-server is not available.
func Skip(tb testing.TB) {
	tb.Helper()
	if !Available() {
		tb.Skipf("redis-server not on PATH: the Redis tests are skipped (%s)", Install)
	}
}

// Server is one redis-server process.
type Server struct {
	// Addr is the server's host:port on loopback.
	Addr string
	port int
	dir  string
	args []string
	conf string // a Sentinel's configuration file

	mu  sync.Mutex // guards cmd
	cmd *exec.Cmd
}

// Start starts a standalone redis-server on a free loopback port and stops
// it when tb ends. args are extra configuration directives, such as
// "--maxmemory", "10mb".
func Start(tb testing.TB, args ...string) *Server {
	tb.Helper()
	Skip(tb)
	s, err := NewServer(args...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(s.Kill)
	return s
}

// NewServer is Start for a caller with no testing.TB (a TestMain): the
// caller must Kill the server, which also removes its directory.
func NewServer(args ...string) (*Server, error) {
	if !Available() {
		return nil, fmt.Errorf("sluice/backend/redis/redistest: redis-server not on PATH (%s)", Install)
	}
	// A port found free can be taken before the server binds it (by
	// another test's server on this machine): then another port.
	for try := 1; ; try++ {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		dir, err := os.MkdirTemp("", "redistest-")
		if err != nil {
			return nil, err
		}
		s := &Server{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), port: port, dir: dir, args: args}
		err = s.Start()
		if err == nil {
			return s, nil
		}
		s.Kill()
		if !errors.Is(err, errPortTaken) || try == 5 {
			return nil, err
		}
	}
}

// errPortTaken is Start's error when redis-server could not bind its
// port: another process took it after freePort found it free.
var errPortTaken = errors.New("port taken")

// Start starts the server again after Stop or Kill, on the same port and
// directory (with no persistence, the records are gone). It waits until
// the server answers PING.
func (s *Server) Start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		return fmt.Errorf("sluice/backend/redis/redistest: %s already running", s.Addr)
	}
	if _, err := os.Stat(s.dir); err != nil {
		return fmt.Errorf("sluice/backend/redis/redistest: %s was killed and cannot start again", s.Addr)
	}
	args := append([]string{}, []string{
		"--port", strconv.Itoa(s.port), "--bind", "127.0.0.1",
		"--dir", s.dir, "--save", "", "--appendonly", "no",
		"--protected-mode", "no", "--daemonize", "no",
		"--logfile", filepath.Join(s.dir, "redis.log"),
	}...)
	args = append(args, s.args...)
	cmd := exec.Command("redis-server", args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("sluice/backend/redis/redistest: starting redis-server: %w", err)
	}
	s.cmd = cmd
	deadline := time.Now().Add(10 * time.Second)
	for {
		if out, err := cli(s.Addr, "PING"); err == nil && strings.TrimSpace(out) == "PONG" {
			// The server answering must be this one, not another
			// process' that took the port first (then this one exits).
			info, _ := cli(s.Addr, "INFO", "server")
			if strings.Contains(info, fmt.Sprintf("process_id:%d\r", cmd.Process.Pid)) || strings.Contains(info, fmt.Sprintf("process_id:%d\n", cmd.Process.Pid)) {
				return nil
			}
			log, _ := os.ReadFile(filepath.Join(s.dir, "redis.log"))
			return fmt.Errorf("sluice/backend/redis/redistest: redis-server on %s: %w by another server; its log:\n%s", s.Addr, errPortTaken, log)
		}
		log, _ := os.ReadFile(filepath.Join(s.dir, "redis.log"))
		if bytes.Contains(log, []byte("Address already in use")) {
			return fmt.Errorf("sluice/backend/redis/redistest: redis-server on %s: %w; its log:\n%s", s.Addr, errPortTaken, log)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("sluice/backend/redis/redistest: redis-server on %s did not answer PING in 10s; its log:\n%s", s.Addr, log)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Kill stops the server at once with SIGKILL, waits for it to exit and
// removes its directory: it cannot be started again.
func (s *Server) Kill() {
	s.stop(syscall.SIGKILL)
	os.RemoveAll(s.dir)
}

// Crash stops the server at once with SIGKILL and waits for it to exit;
// Start starts it again.
func (s *Server) Crash() { s.stop(syscall.SIGKILL) }

// Stop stops the server with SIGTERM and waits for it to exit.
func (s *Server) Stop() { s.stop(syscall.SIGTERM) }

func (s *Server) stop(sig syscall.Signal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGCONT) // a paused server must run to handle SIGTERM
	_ = s.cmd.Process.Signal(sig)
	_ = s.cmd.Wait()
	s.cmd = nil
}

// Pause stops the server's process with SIGSTOP, so that it holds its
// connections open and answers nothing, until Resume.
func (s *Server) Pause() { s.signal(syscall.SIGSTOP) }

// Resume continues a paused server.
func (s *Server) Resume() { s.signal(syscall.SIGCONT) }

func (s *Server) signal(sig syscall.Signal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		_ = s.cmd.Process.Signal(sig)
	}
}

// StartSentinel starts a Sentinel on a free loopback port watching primary
// under the name master, and stops it when tb ends.
func StartSentinel(tb testing.TB, primary *Server, master string) *Server {
	tb.Helper()
	Skip(tb)
	port, err := freePort()
	if err != nil {
		tb.Fatal(err)
	}
	dir := tb.TempDir()
	conf := filepath.Join(dir, "sentinel.conf")
	host, pport, _ := net.SplitHostPort(primary.Addr)
	text := fmt.Sprintf("sentinel monitor %s %s %s 1\nsentinel down-after-milliseconds %s 1000\n", master, host, pport, master)
	if err := os.WriteFile(conf, []byte(text), 0o644); err != nil {
		tb.Fatal(err)
	}
	s := &Server{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), port: port, dir: dir, conf: conf}
	// A Sentinel has no --save or --appendonly; it rewrites its own file.
	if err := s.startSentinel(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(s.Kill)
	return s
}

func (s *Server) startSentinel() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	cmd := exec.Command("redis-server", s.conf, "--sentinel", "--port", strconv.Itoa(s.port), "--bind", "127.0.0.1",
		"--protected-mode", "no", "--daemonize", "no", "--logfile", filepath.Join(s.dir, "redis.log"))
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("sluice/backend/redis/redistest: starting a Sentinel: %w", err)
	}
	s.cmd = cmd
	deadline := time.Now().Add(10 * time.Second)
	for {
		if out, err := cli(s.Addr, "SENTINEL", "MASTERS"); err == nil && strings.Contains(out, "127.0.0.1") {
			return nil
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(s.dir, "redis.log"))
			return fmt.Errorf("sluice/backend/redis/redistest: the Sentinel on %s did not report its primary in 10s; its log:\n%s", s.Addr, log)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Do runs one command through redis-cli and returns its output.
func (s *Server) Do(tb testing.TB, args ...string) string {
	tb.Helper()
	out, err := cli(s.Addr, args...)
	if err != nil {
		tb.Fatalf("redis-cli -h %s %s: %v\n%s", s.Addr, strings.Join(args, " "), err, out)
	}
	return out
}

// CommandCalls returns how many times the server has run each command
// since it started or since CONFIG RESETSTAT, from INFO commandstats, by
// lower-case name ("evalsha", "get", ...).
func (s *Server) CommandCalls(tb testing.TB) map[string]int64 {
	tb.Helper()
	return parseCommandStats(s.Do(tb, "INFO", "commandstats"))
}

func parseCommandStats(info string) map[string]int64 {
	calls := map[string]int64{}
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		name, rest, ok := strings.Cut(line, ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		for _, f := range strings.Split(rest, ",") {
			if v, ok := strings.CutPrefix(f, "calls="); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				calls[strings.TrimPrefix(name, "cmdstat_")] = n
			}
		}
	}
	return calls
}

// Cluster is a Redis Cluster of primaries with no replicas, its slots
// spread evenly over them.
type Cluster struct {
	// Nodes are the cluster's servers.
	Nodes []*Server
}

// Addrs returns the nodes' addresses.
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		addrs[i] = n.Addr
	}
	return addrs
}

// StartCluster starts n redis-server nodes in cluster mode, joins them with
// redis-cli --cluster create, waits until every node reports the cluster
// ok, and stops them all when tb ends.
func StartCluster(tb testing.TB, n int) *Cluster {
	tb.Helper()
	Skip(tb)
	c, err := NewCluster(n)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(c.Kill)
	return c
}

// NewCluster is StartCluster for a caller with no testing.TB: the caller
// must Kill the cluster.
func NewCluster(n int) (*Cluster, error) {
	c := &Cluster{}
	for i := 0; i < n; i++ {
		s, err := NewServer("--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "5000")
		if err != nil {
			c.Kill()
			return nil, err
		}
		c.Nodes = append(c.Nodes, s)
	}
	args := append([]string{"--cluster", "create"}, c.Addrs()...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	if out, err := exec.Command("redis-cli", args...).CombinedOutput(); err != nil {
		c.Kill()
		return nil, fmt.Errorf("sluice/backend/redis/redistest: redis-cli %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	deadline := time.Now().Add(30 * time.Second)
	for _, s := range c.Nodes {
		for {
			out, _ := cli(s.Addr, "CLUSTER", "INFO")
			if strings.Contains(out, "cluster_state:ok") && strings.Contains(out, "cluster_slots_ok:16384") {
				break
			}
			if time.Now().After(deadline) {
				c.Kill()
				return nil, fmt.Errorf("sluice/backend/redis/redistest: cluster not ok after 30s; %s says:\n%s", s.Addr, out)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return c, nil
}

// Kill kills every node.
func (c *Cluster) Kill() {
	for _, s := range c.Nodes {
		s.Kill()
	}
}

// NodeOf returns the node that serves key's slot.
func (c *Cluster) NodeOf(tb testing.TB, key string) *Server {
	tb.Helper()
	slot := strings.TrimSpace(c.Nodes[0].Do(tb, "CLUSTER", "KEYSLOT", key))
	out := c.Nodes[0].Do(tb, "CLUSTER", "SLOTS")
	n, _ := strconv.Atoi(slot)
	// redis-cli prints CLUSTER SLOTS as lines: start, end, ip, port, id, ...
	lines := strings.Fields(out)
	for i := 0; i+3 < len(lines); i++ {
		lo, err1 := strconv.Atoi(lines[i])
		hi, err2 := strconv.Atoi(lines[i+1])
		if err1 != nil || err2 != nil || lines[i+2] != "127.0.0.1" || lo > hi {
			continue
		}
		if n >= lo && n <= hi {
			for _, s := range c.Nodes {
				if s.Addr == net.JoinHostPort(lines[i+2], lines[i+3]) {
					return s
				}
			}
		}
	}
	tb.Fatalf("sluice/backend/redis/redistest: no node serves slot %s of %q:\n%s", slot, key, out)
	return nil
}

func cli(addr string, args ...string) (string, error) {
	host, port, _ := net.SplitHostPort(addr)
	var out bytes.Buffer
	cmd := exec.Command("redis-cli", append([]string{"-h", host, "-p", port}, args...)...)
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// freePort returns a loopback port that is free, and whose cluster bus port
// (the port plus 10000) is free too. Both are below the kernel's range of
// ephemeral ports where it leaves room, so that no outgoing connection (of
// this process or another on the machine) takes one between this check
// and the server's bind.
func freePort() (int, error) {
	lo, n := 20000, 30000
	if first := ephemeralFrom(); first-10000 > 10000+4000 {
		lo, n = 10000, first-10000-10000
	}
	for range 200 {
		p := lo + rand.IntN(n)
		if portFree(p) && portFree(p+10000) {
			return p, nil
		}
	}
	return 0, errors.New("sluice/backend/redis/redistest: no free loopback port pair found")
}

// ephemeralFrom returns the first port of Linux's range of ephemeral
// ports, or 0 where it cannot be read.
func ephemeralFrom() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	p, _ := strconv.Atoi(f[0])
	return p
}

func portFree(p int) bool {
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
	if err != nil {
		return false
	}
	l.Close()
	return true
}

// Lateness measures the process' own scheduling delay until stop is
// closed, again and again: how late a timer of a millisecond fired, and
// how long a goroutine that yields waits for its turn again; it sends the
// most either took. A goroutine a timer wakes runs next, ahead of the
// goroutines waiting for their turn, so the timer alone misses the wait
// of a caller woken among many (64 callers beside busy loops ran up to
// four times the timer's lateness past their deadline); the yield waits
// behind them. A test allowing a call time past its deadline allows
// this, the process' own lateness in the same run, not the store's.
func Lateness(stop <-chan struct{}) <-chan time.Duration {
	out := make(chan time.Duration, 1)
	go func() {
		var worst time.Duration
		for {
			want := time.Now().Add(time.Millisecond)
			select {
			case <-stop:
				out <- worst
				return
			case <-time.After(time.Millisecond):
			}
			worst = max(worst, time.Since(want))
			yielded := time.Now()
			runtime.Gosched()
			worst = max(worst, time.Since(yielded))
		}
	}()
	return out
}
