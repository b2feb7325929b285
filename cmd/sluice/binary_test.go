package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-go/sluice/internal/loadgen/serveproc"
)

// sluiceBin is the sluice binary the process tests share, built once per
// run of the package (one link of the whole tree, not one per test) and
// removed by TestMain.
var sluiceBin struct {
	once sync.Once
	dir  string // the temporary directory holding it
	path string
	skip string // why the binary cannot be built here
	err  error
}

// parallelPerCPU is how many of the package's parallel tests run at once,
// per CPU, where the command line does not say (-parallel): most of them
// spend their time waiting on real processes (a server starting, a reload
// being picked up, a deadline running out, Redis refusing a dial) rather
// than on a CPU, so go test's default of one per CPU leaves the machine
// idle for most of the package's run. Two, not more: at four, a machine
// loaded besides (a load average of 10 to 20 on two CPUs) starved the
// heaviest tests past their bounds on waits. Tests that judge a deadline
// against the machine's load are not parallel: they run before all of
// these.
const parallelPerCPU = 2

// raiseParallel sets -test.parallel to parallelPerCPU per CPU unless the
// command line set it. It runs in TestMain, after flag.Parse and before
// m.Run reads the flag.
func raiseParallel() {
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if !set {
		flag.Set("test.parallel", strconv.Itoa(parallelPerCPU*runtime.GOMAXPROCS(0)))
	}
}

// testCommit is the commit stamped into the shared binary, as `make build`
// stamps the real one (-ldflags -X main.stampedCommit).
const testCommit = "abc"

// buildBinary returns the path of the shared sluice binary, building it on
// first use (or waiting for TestMain's build of it, see startBinaryBuild)
// as `make build` builds it (go build, no race detector, the commit
// stamped with -X main.stampedCommit) where the environment leaves the
// version control information out (-buildvcs=false): a normal build whose
// `sluice version` names testCommit, so that one link serves both the
// process tests and TestVersionNamesStampedCommit.
func buildBinary(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds the binary")
	}
	buildSluiceBin()
	if sluiceBin.skip != "" {
		t.Skip(sluiceBin.skip)
	}
	if sluiceBin.err != nil {
		t.Fatal(sluiceBin.err)
	}
	return sluiceBin.path
}

// buildSluiceBin builds the shared binary once; callers after the first
// wait for its build to end.
func buildSluiceBin() {
	sluiceBin.once.Do(func() {
		if path := os.Getenv(serveproc.TestBinaryEnv); path != "" {
			// Built by make test as buildSluiceBin builds it (see the
			// Makefile's test-bins: a link of the whole tree is about 8
			// CPU-seconds, and one into bin/test that is up to date is
			// skipped); TestVersionNamesStampedCommit fails if it was
			// built otherwise.
			if _, err := os.Stat(path); err != nil {
				sluiceBin.err = fmt.Errorf("%s: %w", serveproc.TestBinaryEnv, err)
				return
			}
			sluiceBin.path = path
			return
		}
		goTool, err := exec.LookPath("go")
		if err != nil {
			sluiceBin.skip = "no go command on PATH to build the binary with"
			return
		}
		dir, err := os.MkdirTemp("", "sluice-test-bin-")
		if err != nil {
			sluiceBin.err = err
			return
		}
		sluiceBin.dir = dir
		path := filepath.Join(dir, "sluice")
		if out, err := exec.Command(goTool, "build", "-buildvcs=false", "-ldflags", "-X main.stampedCommit="+testCommit, "-o", path, ".").CombinedOutput(); err != nil {
			sluiceBin.err = fmt.Errorf("go build: %v\n%s", err, out)
			return
		}
		sluiceBin.path = path
	})
}

// startBinaryBuild starts building the shared binary at once, beside the
// tests, when the whole package runs (no -run, not -short, not -list):
// then most tests use it, and its link, about ten seconds of one CPU,
// overlaps the sequential tests before the first process test
// (TestDocsGoBlocksCompile's compiles among them) instead of holding up
// that test alone. It reports whether it started the build, which
// TestMain then waits for before removing it.
func startBinaryBuild() bool {
	for _, name := range []string{"test.run", "test.list"} {
		if f := flag.Lookup(name); f != nil && f.Value.String() != "" {
			return false
		}
	}
	if testing.Short() {
		return false
	}
	go buildSluiceBin()
	return true
}

// A real sluice simulate process answers each line before it sees the next:
// the test writes a line, then waits for its answer before writing another.
func TestSimulateProcessFlushesEachLine(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	t.Parallel()
	bin := buildBinary(t)
	cmd := exec.Command(bin, "simulate", "--algorithm", "token_bucket", "--limit", "2", "--window", "1s")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })

	answers := make(chan string)
	go func() {
		r := bufio.NewReader(stdout)
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				close(answers)
				return
			}
			answers <- line
		}
	}()
	steps := []struct{ in, want string }{
		{`{"t": 1700000000, "key": "u-1"}`, `{"allowed":true,"limit":2,"remaining":1,`},
		{`{"t": 1700000000, "key": "u-1"}`, `{"allowed":true,"limit":2,"remaining":0,`},
		{`{"t": 1700000000, "key": "u-1"}`, `{"allowed":false,"limit":2,"remaining":0,"retry_after":0.5,`},
		{`{"t": 1700000000, "key": "u-1", "cost": 3}`, `{"error":"sluice/algo: cost exceeds capacity`},
		{`{"t": 1700000000.5, "key": "u-1"}`, `{"allowed":true,"limit":2,"remaining":0,`},
	}
	for i, step := range steps {
		if _, err := io.WriteString(stdin, step.in+"\n"); err != nil {
			t.Fatalf("step %d: writing: %v", i, err)
		}
		select {
		case got, ok := <-answers:
			if !ok {
				t.Fatalf("step %d: output closed; stderr:\n%s", i, stderr.String())
			}
			if !strings.HasPrefix(got, step.want) {
				t.Errorf("step %d: answer %q, want it to start with %q", i, got, step.want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("step %d: no answer within 10s of writing %s: output is not flushed per line", i, step.in)
		}
	}
	stdin.Close()
	if _, ok := <-answers; ok {
		t.Error("an answer after the last line")
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("sluice simulate: %v; stderr:\n%s", err, stderr.String())
	}
}

// The process reports a bad line on stderr with exit status 2.
func TestSimulateProcessExitStatus(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	t.Parallel()
	bin := buildBinary(t)
	cmd := exec.Command(bin, "simulate", "--algorithm", "gcra", "--limit", "2", "--window", "1s")
	cmd.Stdin = strings.NewReader("{\"t\": 1, \"key\": \"a\"}\n{\"t\": oops}\n")
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	exit, ok := err.(*exec.ExitError)
	if !ok || exit.ExitCode() != 2 {
		t.Fatalf("sluice simulate: %v, want exit status 2", err)
	}
	if !strings.HasPrefix(stderr.String(), "sluice simulate: line 2: invalid JSON") || strings.Count(stdout.String(), "\n") != 1 {
		t.Errorf("stdout %q, stderr %q; want one answer, then line 2 reported", stdout.String(), stderr.String())
	}
}

// caseGroup runs a parallel test's cases as subtests, up to a fixed
// number at a time, from the moment the test itself runs. Parallel
// subtests (t.Parallel in each) would instead wait for the test's body to
// return and then queue for go test's slots behind every parallel test of
// the package still waiting, so that a test's long cases ran last, alone
// at the end of the package's run.
type caseGroup struct {
	t   *testing.T
	sem chan struct{}
	wg  sync.WaitGroup
}

// newCaseGroup returns a group running up to n of t's cases at a time.
func newCaseGroup(t *testing.T, n int) *caseGroup {
	return &caseGroup{t: t, sem: make(chan struct{}, n)}
}

// run starts the case f as the subtest name, once fewer than the group's
// limit run.
func (g *caseGroup) run(name string, f func(t *testing.T)) {
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		g.sem <- struct{}{}
		defer func() { <-g.sem }()
		g.t.Run(name, f)
	}()
}

// wait returns once every case has ended.
func (g *caseGroup) wait() { g.wg.Wait() }
