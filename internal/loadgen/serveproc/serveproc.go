// Package serveproc runs `sluice serve` as a child process for load and
// soak runs: it builds the binary, starts it on loopback with ephemeral
// ports, learns the addresses it bound from its log, waits for /healthz,
// samples its memory from /proc, and stops it with SIGTERM, reporting the
// exit status.
//
// A Process's methods may be called from several goroutines (the soak
// signals it from one and samples its memory from another).
package serveproc

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// ModulePath is the import path of the module holding cmd/sluice.
const ModulePath = "github.com/sluice-go/sluice"

// ErrNotStarted is returned by Start when the process exits or stays silent
// before it logs the addresses it listens on.
var ErrNotStarted = errors.New("sluice/internal/loadgen/serveproc: sluice serve did not start")

// ModuleRoot returns the directory of the main module, found by walking up
// from dir to the go.mod that declares ModulePath (so that it works from
// the main module, from a directory inside it, and from the bench module,
// whose go.mod names another path).
func ModuleRoot(dir string) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	for d := abs; ; d = filepath.Dir(d) {
		data, err := os.ReadFile(filepath.Join(d, "go.mod"))
		if err == nil {
			for line := range strings.Lines(string(data)) {
				f := strings.Fields(line)
				if len(f) == 2 && f[0] == "module" && f[1] == ModulePath {
					return d, nil
				}
			}
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("sluice/internal/loadgen/serveproc: no go.mod of module %s in %s or above", ModulePath, abs)
		}
	}
}

// Build compiles cmd/sluice of the module at root into out with the go
// command, and returns go's output with the error when it fails.
func Build(ctx context.Context, root, out string) error {
	goTool, err := exec.LookPath("go")
	if err != nil {
		return fmt.Errorf("sluice/internal/loadgen/serveproc: building sluice: %w", err)
	}
	cmd := exec.CommandContext(ctx, goTool, "build", "-o", out, "./cmd/sluice")
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("sluice/internal/loadgen/serveproc: go build ./cmd/sluice in %s: %w\n%s", root, err, b)
	}
	return nil
}

// TestBinaryEnv names the environment variable through which make test
// gives the tests that run sluice the binary it built once for all of them
// (the Makefile's test-bins), in place of a link in each test package.
const TestBinaryEnv = "SLUICE_TEST_BINARY"

// Binary returns bin when it is set; otherwise it builds cmd/sluice of the
// main module found from dir (see ModuleRoot) into tmp and returns the
// path of the result.
func Binary(ctx context.Context, bin, dir, tmp string) (string, error) {
	if bin != "" {
		return bin, nil
	}
	root, err := ModuleRoot(dir)
	if err != nil {
		return "", err
	}
	out := filepath.Join(tmp, "sluice")
	if err := Build(ctx, root, out); err != nil {
		return "", err
	}
	return out, nil
}

// Upstream serves h on 127.0.0.1 at a port the system picks, for a serve
// process to proxy to. It returns the server's URL and a function that
// closes it.
func Upstream(h http.Handler) (url string, closeFn func() error, err error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	return "http://" + ln.Addr().String(), srv.Close, nil
}

// Process is a running `sluice serve`.
type Process struct {
	// Listen and Admin are the addresses the proxy and the admin listener
	// bound, such as 127.0.0.1:40123.
	Listen, Admin string
	// LogPath is the file the process's standard error goes to.
	LogPath string

	cmd     *exec.Cmd
	done    chan struct{} // closed when the process has exited
	waitErr error         // set before done is closed
	logDone chan struct{} // closed when the log is copied and closed
}

var listening = regexp.MustCompile(`msg="sluice serve: listening" listen=(\S+) admin=(\S+)`)

// Start runs bin serve with the configuration file config, proxying to
// upstream, both listeners on 127.0.0.1 with ports the system picks, and
// extra flags after those (such as "--backend", "redis"). The process's
// standard error is written to logPath. Start returns once the process has
// logged its addresses and answered /healthz, within timeout; otherwise it
// kills the process and returns an error wrapping ErrNotStarted with the
// log's tail.
func Start(bin, config, upstream, logPath string, timeout time.Duration, extra ...string) (*Process, error) {
	lf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	args := append([]string{"serve", "--config", config, "--listen", "127.0.0.1:0",
		"--upstream", upstream, "--admin", "127.0.0.1:0"}, extra...)
	cmd := exec.Command(bin, args...)
	pr, pw := io.Pipe()
	cmd.Stderr = pw
	cmd.Stdout = lf
	if err := cmd.Start(); err != nil {
		lf.Close()
		return nil, fmt.Errorf("sluice/internal/loadgen/serveproc: starting %s: %w", bin, err)
	}
	p := &Process{LogPath: logPath, cmd: cmd, done: make(chan struct{}), logDone: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		pw.Close()
		close(p.done)
	}()
	addrs := make(chan [2]string, 1)
	go func() {
		// Copy the log to the file, and report the addresses line.
		defer close(p.logDone)
		defer lf.Close()
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64*1024), 1024*1024)
		found := false
		for sc.Scan() {
			line := sc.Text()
			fmt.Fprintln(lf, line)
			if m := listening.FindStringSubmatch(line); !found && m != nil {
				found = true
				addrs <- [2]string{m[1], m[2]}
			}
		}
		io.Copy(lf, pr)
	}()
	deadline := time.Now().Add(timeout)
	select {
	case a := <-addrs:
		p.Listen, p.Admin = a[0], a[1]
	case <-p.done:
		<-p.logDone
		return nil, fmt.Errorf("%w: it exited (%v); log %s:\n%s", ErrNotStarted, p.waitErr, logPath, tail(logPath))
	case <-time.After(timeout):
		p.cmd.Process.Kill()
		<-p.done
		<-p.logDone
		return nil, fmt.Errorf("%w: no listening line within %v; log %s:\n%s", ErrNotStarted, timeout, logPath, tail(logPath))
	}
	client := &http.Client{Timeout: time.Second}
	for {
		resp, err := client.Get("http://" + p.Admin + "/healthz")
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK && string(body) == "ok" {
				return p, nil
			}
		}
		if time.Now().After(deadline) {
			p.cmd.Process.Kill()
			<-p.done
			<-p.logDone
			return nil, fmt.Errorf("%w: /healthz did not answer ok within %v; log %s:\n%s", ErrNotStarted, timeout, logPath, tail(logPath))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Pid returns the process id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Signal sends sig to the process.
func (p *Process) Signal(sig os.Signal) error { return p.cmd.Process.Signal(sig) }

// Exited reports whether the process has exited.
func (p *Process) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Stop sends SIGTERM and waits up to timeout for the process to exit; it
// returns the exit status (-1 for death by a signal). If the process is
// still running after timeout, Stop kills it and returns an error.
func (p *Process) Stop(timeout time.Duration) (int, error) {
	if !p.Exited() {
		if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
			return -1, fmt.Errorf("sluice/internal/loadgen/serveproc: SIGTERM: %w", err)
		}
	}
	select {
	case <-p.done:
	case <-time.After(timeout):
		p.cmd.Process.Kill()
		<-p.done
		<-p.logDone
		return -1, fmt.Errorf("sluice/internal/loadgen/serveproc: sluice serve still running %v after SIGTERM; killed", timeout)
	}
	<-p.logDone
	return p.cmd.ProcessState.ExitCode(), nil
}

// Log returns what the process has written to its standard error so far
// (the whole log once Stop has returned).
func (p *Process) Log() string {
	data, _ := os.ReadFile(p.LogPath)
	return string(data)
}

// Memory is a process's resident memory as /proc/PID/status reports it.
type Memory struct {
	// RSS is VmRSS, the resident set size now, in bytes.
	RSS int64
	// HWM is VmHWM, the peak resident set size so far, in bytes.
	HWM int64
}

// ReadMemory reads the resident memory of process pid from
// /proc/PID/status (Linux only).
func ReadMemory(pid int) (Memory, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return Memory{}, err
	}
	return ParseStatus(string(data))
}

// ParseStatus reads VmRSS and VmHWM from the text of a /proc/PID/status
// file; both must be present.
func ParseStatus(status string) (Memory, error) {
	var m Memory
	var haveRSS, haveHWM bool
	for line := range strings.Lines(status) {
		key, val, ok := strings.Cut(line, ":")
		if !ok || (key != "VmRSS" && key != "VmHWM") {
			continue
		}
		f := strings.Fields(val)
		if len(f) != 2 || f[1] != "kB" {
			return Memory{}, fmt.Errorf("sluice/internal/loadgen/serveproc: %s: want a size in kB, got %q", key, strings.TrimSpace(val))
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return Memory{}, fmt.Errorf("sluice/internal/loadgen/serveproc: %s: %w", key, err)
		}
		if key == "VmRSS" {
			m.RSS, haveRSS = kb*1024, true
		} else {
			m.HWM, haveHWM = kb*1024, true
		}
	}
	if !haveRSS || !haveHWM {
		return Memory{}, errors.New("sluice/internal/loadgen/serveproc: no VmRSS and VmHWM lines in the status")
	}
	return m, nil
}

// tail returns the last 2 KiB of the file at path.
func tail(path string) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return "(" + err.Error() + ")"
	}
	if len(data) > 2048 {
		data = data[len(data)-2048:]
	}
	return string(data)
}
