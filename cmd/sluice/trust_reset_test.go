package main

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// An API-key caller blocked by a real gateway is unblocked by the real
// binary's `sluice reset --key keyhash:HEX`, HEX being the hash `sluice
// inspect` shows: reset says it removed the record, exits 0, and the next
// gateway lets the caller through. Reset again, with no record left, it
// exits non-zero saying there was nothing to reset.
func TestResetProcessKeyHash(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	t.Parallel()
	bin := buildBinary(t)
	up := upstream(t)
	dir := filepath.Join(t.TempDir(), "state")
	cfg := filepath.Join(t.TempDir(), "gateway.yaml")
	writeFile(t, cfg, fmt.Sprintf(`store:
  backend: bolt
  dir: %s
identity:
  api_key_header: X-API-Key
rules:
  - {name: orders, path_prefix: /, scope: api_key, algorithm: token_bucket, limit: 2, window: 1h}
`, dir))
	args := []string{"--config", cfg, "--listen", "127.0.0.1:0", "--upstream", up.URL}
	stop := func(p *serveProcess) {
		t.Helper()
		p.cmd.Process.Signal(syscall.SIGTERM)
		if err := p.wait(t, 20*time.Second); err != nil {
			t.Fatalf("serve after SIGTERM: %v\n%s", err, p.stderr)
		}
	}
	p := startServeProcess(t, bin, args...)
	if got := codes(t, 3, "GET", "http://"+p.listen+"/", "X-API-Key", "sk_live_blocked"); fmt.Sprint(got) != "[200 200 429]" {
		t.Fatalf("the caller's requests: %v, want [200 200 429]", got)
	}
	stop(p)

	out, err := exec.Command(bin, "inspect", "--config", cfg, "--limit", "0").CombinedOutput()
	if err != nil {
		t.Fatalf("inspect: %v\n%s", err, out)
	}
	m := regexp.MustCompile(`keyhash:[0-9a-f]+`).FindString(string(out))
	if m == "" {
		t.Fatalf("inspect shows no keyhash: caller:\n%s", out)
	}
	reset := func() (int, string) {
		out, err := exec.Command(bin, "reset", "--config", cfg, "--rule", "orders", "--key", m).CombinedOutput()
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode(), string(out)
		} else if err != nil {
			t.Fatal(err)
		}
		return 0, string(out)
	}
	if code, out := reset(); code != 0 || !strings.Contains(out, "reset "+m) || !strings.Contains(out, "record is gone") {
		t.Fatalf("reset --key %s: exit %d, %q; want 0 and that it removed the record", m, code, out)
	}

	p = startServeProcess(t, bin, args...)
	if got := codes(t, 3, "GET", "http://"+p.listen+"/", "X-API-Key", "sk_live_blocked"); fmt.Sprint(got) != "[200 200 429]" {
		t.Errorf("the caller's requests after the reset: %v, want a whole budget again, [200 200 429]", got)
	}
	stop(p)
	// The gateway wrote the caller's record again: reset it, then once more.
	if code, out := reset(); code != 0 {
		t.Fatalf("reset: exit %d, %q", code, out)
	}
	if code, out := reset(); code == 0 || !strings.Contains(out, "nothing to reset") || !strings.Contains(out, "no record of "+m) {
		t.Errorf("reset of a caller with no record: exit %d, %q; want non-zero and that it had no record", code, out)
	}
}
