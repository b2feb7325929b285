package bolt

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-go/sluice/backend"
)

// helperEnv tells a re-executed test binary to act as TestHelperProcess.
const helperEnv = "SLUICE_BOLT_HELPER"

// TestHelperProcess is not a test: it is the child process of the crash and
// lock tests. It opens the store in $SLUICE_DIR (with Options.NoSync when
// $SLUICE_NOSYNC is 1), runs $SLUICE_BOLT_HELPER, prints
// "ok" and then blocks until its stdin closes or it is killed.
func TestHelperProcess(t *testing.T) {
	mode := os.Getenv(helperEnv)
	if mode == "" {
		t.Skip("helper process for the crash and lock tests")
	}
	fail := func(err error) {
		fmt.Println("error:", err)
		os.Exit(2)
	}
	s, err := Open(os.Getenv("SLUICE_DIR"), &Options{SweepInterval: -1, NoSync: os.Getenv("SLUICE_NOSYNC") == "1"})
	if err != nil {
		fail(err)
	}
	n, _ := strconv.Atoi(os.Getenv("SLUICE_N"))
	switch mode {
	case "hold":
	case "put":
		for _, w := range crashWrites(n) {
			if err := s.Put(w.Key, w.Value, w.ExpiresAt); err != nil {
				fail(err)
			}
		}
	case "batch-sync", "batch-nosync":
		if err := s.WriteBatch(crashWrites(n), mode == "batch-sync"); err != nil {
			fail(err)
		}
	default:
		fail(fmt.Errorf("unknown mode %q", mode))
	}
	fmt.Println("ok")
	io.Copy(io.Discard, os.Stdin)
	os.Exit(0)
}

// crashWrites is the batch the child writes before it is killed.
func crashWrites(n int) []backend.Write {
	w := make([]backend.Write, n)
	for i := range w {
		w[i] = backend.Write{Key: fmt.Appendf(nil, "user:%06d", i), Value: fmt.Appendf(nil, "record-%d", i), ExpiresAt: t0 + 1 + int64(i)}
	}
	return w
}

// startHelper runs TestHelperProcess in a child process in mode and waits for
// its "ok". The child is killed at cleanup if still running.
func startHelper(t *testing.T, mode, dir string, n int, noSync bool) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), helperEnv+"="+mode, "SLUICE_DIR="+dir, "SLUICE_N="+strconv.Itoa(n))
	if noSync {
		cmd.Env = append(cmd.Env, "SLUICE_NOSYNC=1")
	}
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close()
		cmd.Process.Kill()
		cmd.Wait()
	})
	line := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if l := sc.Text(); l == "ok" || strings.HasPrefix(l, "error:") {
				line <- l
				break
			}
		}
		close(line)
		io.Copy(io.Discard, stdout)
	}()
	select {
	case l := <-line:
		if l != "ok" {
			t.Fatalf("helper %s: %q, want ok", mode, l)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("helper %s: no answer after 30s", mode)
	}
	return cmd
}

// kill sends SIGKILL to the child and waits for it to die.
func kill(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	err := cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("child exited with %v, want killed by SIGKILL", err)
	}
}

// TestWriteBatchSurvivesKill writes in a child process, kills the child with
// SIGKILL as soon as the writes have returned, and finds every record on
// re-open. backend.Batcher promises this for a synced batch, and for an
// unsynced one on a crash of the process; with Options.NoSync bbolt keeps
// it too, since its commits reach the page cache through write(2).
func TestWriteBatchSurvivesKill(t *testing.T) {
	if testing.Short() {
		t.Skip("starts child processes")
	}
	const n = 500
	tests := []struct {
		mode   string
		noSync bool
	}{
		{"batch-sync", false},
		{"batch-nosync", false},
		{"batch-sync", true},
		{"batch-nosync", true},
		{"put", true},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s/NoSync=%t", tt.mode, tt.noSync), func(t *testing.T) {
			dir := t.TempDir()
			kill(t, startHelper(t, tt.mode, dir, n, tt.noSync))
			s := open(t, dir)
			for _, w := range crashWrites(n) {
				got, err := s.Get(w.Key, t0)
				if err != nil || string(got) != string(w.Value) {
					t.Fatalf("after SIGKILL: Get(%q) = %q, %v, want %q", w.Key, got, err, w.Value)
				}
				if got, _ := s.Get(w.Key, w.ExpiresAt); got != nil {
					t.Fatalf("after SIGKILL: Get(%q) at its expiry = %q, want absent", w.Key, got)
				}
			}
		})
	}
}

// TestOpenLockedByOtherProcess opens a directory a child process holds.
func TestOpenLockedByOtherProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a child process")
	}
	dir := t.TempDir()
	cmd := startHelper(t, "hold", dir, 0, false)
	s, err := Open(dir, nil)
	if err == nil {
		s.Close()
		t.Fatal("Open of a directory another process holds succeeded")
	}
	if !errors.Is(err, backend.ErrLocked) || !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), "another process holds its lock") {
		t.Fatalf("Open = %v, want ErrLocked naming %q and another process", err, dir)
	}
	t.Logf("Open error: %v", err)
	kill(t, cmd)
	open(t, dir) // the lock dies with its process
}
