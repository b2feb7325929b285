package pebble

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
const helperEnv = "SLUICE_PEBBLE_HELPER"

// TestHelperProcess is not a test: it is the child process of the crash and
// lock tests. It opens the store in $SLUICE_DIR, runs $SLUICE_PEBBLE_HELPER, prints
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
	s, err := Open(os.Getenv("SLUICE_DIR"), &Options{SweepInterval: -1, SyncInterval: helperSyncInterval})
	if err != nil {
		fail(err)
	}
	n, _ := strconv.Atoi(os.Getenv("SLUICE_N"))
	switch mode {
	case "hold":
	case "put-wait":
		// Unsynced Puts, then ten sync intervals for the syncer.
		for _, w := range crashWrites(n) {
			if err := s.Put(w.Key, w.Value, w.ExpiresAt); err != nil {
				fail(err)
			}
		}
		time.Sleep(10 * helperSyncInterval)
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

// helperSyncInterval is the child's Options.SyncInterval.
const helperSyncInterval = 20 * time.Millisecond

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
func startHelper(t *testing.T, mode, dir string, n int) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), helperEnv+"="+mode, "SLUICE_DIR="+dir, "SLUICE_N="+strconv.Itoa(n))
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

// TestWriteBatchSurvivesKill writes a batch in a child process, kills the
// child with SIGKILL as soon as WriteBatch has returned, and finds every
// record on re-open. backend.Batcher promises this with sync set, and
// without it for a crash of the process. It also checks that unsynced Puts
// survive once the syncer has had time to run.
func TestWriteBatchSurvivesKill(t *testing.T) {
	if testing.Short() {
		t.Skip("starts child processes")
	}
	const n = 500
	for _, mode := range []string{"batch-sync", "batch-nosync", "put-wait"} {
		t.Run(mode, func(t *testing.T) {
			dir := t.TempDir()
			kill(t, startHelper(t, mode, dir, n))
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
	cmd := startHelper(t, "hold", dir, 0)
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
