package engine_test

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// TestImportsPointDown: the engine reaches the stores only through package
// backend's contract, and the sharded table it shares with the memory
// store sits below both: engine imports, of this module, algo, codec,
// backend and backend/table; backend/table imports backend alone; the
// memory store, backend and its table.
func TestImportsPointDown(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("SKIPPED: no go command on PATH to list imports with")
	}
	const mod = "github.com/sluice-go/sluice"
	for pkg, want := range map[string][]string{
		"engine":         {"algo", "backend", "backend/table", "codec"},
		"backend/table":  {"backend"},
		"backend/memory": {"backend", "backend/table"},
	} {
		out, err := exec.Command(goBin, "list", "-deps", mod+"/"+pkg).Output()
		if err != nil {
			t.Fatalf("go list -deps %s: %v", pkg, err)
		}
		var got []string
		for _, d := range strings.Fields(string(out)) {
			if rest, ok := strings.CutPrefix(d, mod+"/"); ok && rest != pkg {
				got = append(got, rest)
			}
		}
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Errorf("%s imports, of this module, %q; want %q", pkg, got, want)
		}
	}
}
