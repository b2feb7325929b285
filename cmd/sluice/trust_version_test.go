package main

import (
	"os/exec"
	"strings"
	"testing"
)

// A binary built as `make build` builds it where the environment leaves
// the version control information out (-buildvcs=false), with the commit
// stamped by -ldflags -X main.stampedCommit (the shared binary is built so:
// see buildBinary), names that commit in `sluice version`.
func TestVersionNamesStampedCommit(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	t.Parallel()
	bin := buildBinary(t)
	for _, arg := range []string{"version", "--version"} {
		out, err := exec.Command(bin, arg).Output()
		if err != nil {
			t.Fatalf("sluice %s: %v", arg, err)
		}
		if line := strings.TrimSpace(string(out)); !strings.HasPrefix(line, "sluice ") || !strings.Contains(line, "(commit "+testCommit+")") {
			t.Errorf("sluice %s: %q, want the stamped commit (commit %s)", arg, line, testCommit)
		}
	}
}

// versionLine names the stamped commit when the build information holds no
// revision (a test binary holds none).
func TestVersionLineStampedCommit(t *testing.T) {
	was := stampedCommit
	stampedCommit = "abc"
	defer func() { stampedCommit = was }()
	if line := versionLine(); !strings.Contains(line, "(commit abc)") {
		t.Errorf("versionLine() = %q, want the stamped commit (commit abc)", line)
	}
}
