package sluice_test

import (
	"encoding/json"
	"os/exec"
	"path"
	"strings"
	"testing"
)

const module = "github.com/sluice-go/sluice"

// heavy are the import paths an embedding program that builds its rules in
// Go must not be made to import: the configuration file's YAML and watcher,
// and Prometheus. Packages config and metrics hold them, and for the
// RateLimitService server, envoyrls/rlsfile and envoyrls/rlsmetrics.
var heavy = []string{"yaml", "fsnotify", "prometheus"}

// deps returns the packages pkg imports, directly or not (go list -deps).
func deps(t *testing.T, pkg string) []string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("SKIPPED: no go command on PATH to list imports with")
	}
	out, err := exec.Command(goBin, "list", "-deps", pkg).Output()
	if err != nil {
		t.Fatalf("go list -deps %s: %v", pkg, err)
	}
	return strings.Fields(string(out))
}

// The root package, the middleware, caller identity and the
// RateLimitService server import no YAML, file watching or Prometheus, so a
// program using them alone does not either; and caller identity does not
// need net/http, so a gRPC door can use it.
func TestEmbeddingImportsStayLight(t *testing.T) {
	for _, pkg := range []string{
		"github.com/sluice-go/sluice",
		"github.com/sluice-go/sluice/httplimit",
		"github.com/sluice-go/sluice/identity",
		"github.com/sluice-go/sluice/envoyrls",
	} {
		for _, d := range deps(t, pkg) {
			for _, h := range heavy {
				if strings.Contains(d, h) {
					t.Errorf("%s imports %s", pkg, d)
				}
			}
			if pkg == "github.com/sluice-go/sluice/identity" && d == "net/http" {
				t.Errorf("%s imports net/http", pkg)
			}
		}
	}
	// The check would see them: the packages that hold them do import them.
	for pkg, wants := range map[string][]string{
		"github.com/sluice-go/sluice/config":              {"yaml", "fsnotify"},
		"github.com/sluice-go/sluice/metrics":             {"prometheus"},
		"github.com/sluice-go/sluice/envoyrls/rlsfile":    {"yaml", "fsnotify"},
		"github.com/sluice-go/sluice/envoyrls/rlsmetrics": {"prometheus"},
	} {
		ds := deps(t, pkg)
		for _, want := range wants {
			found := false
			for _, d := range ds {
				found = found || strings.Contains(d, want)
			}
			if !found {
				t.Errorf("%s imports nothing named %s: the check above has gone blind", pkg, want)
			}
		}
	}
}

// otelPrefix is the import path of OpenTelemetry's packages.
const otelPrefix = "go.opentelemetry.io/"

// OpenTelemetry stays in package sluiceotel: the decision core, the
// engine, the doors and the binary import none of it, so a program that
// does not use sluiceotel does not either.
func TestOpenTelemetryStaysInItsPackage(t *testing.T) {
	for _, pkg := range []string{
		"github.com/sluice-go/sluice",
		"github.com/sluice-go/sluice/engine",
		"github.com/sluice-go/sluice/httplimit",
		"github.com/sluice-go/sluice/grpclimit",
		"github.com/sluice-go/sluice/envoyrls",
		"github.com/sluice-go/sluice/metrics",
		"github.com/sluice-go/sluice/cmd/sluice",
	} {
		for _, d := range deps(t, pkg) {
			if strings.HasPrefix(d, otelPrefix) {
				t.Errorf("%s imports %s", pkg, d)
			}
		}
	}
	// The check would see it: sluiceotel imports the API, and not the SDK.
	found := false
	for _, d := range deps(t, "github.com/sluice-go/sluice/sluiceotel") {
		found = found || d == "go.opentelemetry.io/otel/metric"
		if strings.HasPrefix(d, otelPrefix+"otel/sdk") {
			t.Errorf("sluiceotel imports %s: the SDK is the program's choice", d)
		}
	}
	if !found {
		t.Error("sluiceotel imports no go.opentelemetry.io/otel/metric: the check above has gone blind")
	}
}

// moduleVersions returns the version of each module whose packages
// `go list -deps -test ./...` lists in dir.
func moduleVersions(t *testing.T, dir string) map[string]string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("SKIPPED: no go command on PATH to list modules with")
	}
	cmd := exec.Command(goBin, "list", "-deps", "-test", "-f", "{{with .Module}}{{.Path}} {{.Version}}{{end}}", "./...")
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list in %s: %v", dir, err)
	}
	vs := make(map[string]string)
	for _, line := range strings.Split(string(out), "\n") {
		if path, version, ok := strings.Cut(line, " "); ok {
			vs[path] = version
		}
	}
	return vs
}

// The benchmark module builds the main module's dependencies at the main
// module's versions: one version apart (golang.org/x/sys, say) changes
// the build of every package above it, and `make test`, which builds both
// modules, would compile the whole tree twice on a fresh machine. Raise
// the main module's requirement (go get) to the benchmark module's.
func TestBenchModuleSharesDependencyVersions(t *testing.T) {
	main, bench := moduleVersions(t, "."), moduleVersions(t, "bench")
	if len(main) < 20 || len(bench) < 20 {
		t.Fatalf("go list found %d and %d modules: the check has gone blind", len(main), len(bench))
	}
	for path, v := range main {
		if path == "github.com/sluice-go/sluice" {
			continue
		}
		if bv, ok := bench[path]; ok && bv != v {
			t.Errorf("%s is %s in the main module and %s in bench/", path, v, bv)
		}
	}
}

// layout is DESIGN's layout table as code: for each package of the module
// (by its path below the module; "" is the root, a trailing "/..." covers
// a tree), the module's packages it may import. Arrows point down the
// table only; "*" is a program, which may import anything. A package the
// table does not name fails the test: add it, with what it may import.
var layout = []struct {
	pkg   string
	allow []string
}{
	{"codec", nil},
	{"backend", nil},
	{"internal/clip", nil},
	{"internal/inflight", []string{"", "algo", "engine", "identity", "internal/ratefield"}},
	{"internal/configerr", []string{"", "internal/clip"}},
	{"internal/watch", nil},
	{"internal/logpace", nil},
	{"internal/yamlnode", []string{"internal/configerr"}},
	{"algo", []string{"codec"}},
	{"internal/ratefield", []string{"algo"}},
	{"backend/table", []string{"backend"}},
	{"backend/internal/...", []string{"backend", "backend/internal/..."}},
	{"backend/memory", []string{"backend", "backend/table"}},
	{"backend/pebble", []string{"backend", "backend/internal/..."}},
	{"backend/bolt", []string{"backend", "backend/internal/..."}},
	{"backend/redis", []string{"backend"}},
	{"backend/redis/redistest", nil},
	{"backend/backendtest", []string{"backend"}},
	{"backend/faulty", []string{"backend"}},
	{"engine", []string{"algo", "backend", "backend/table", "codec"}},
	{"backend/backendtest/fulldisk", []string{"algo", "backend", "engine"}},
	{"", []string{"engine", "algo", "backend", "backend/memory", "internal/clip", "internal/logpace", "internal/ratefield"}},
	{"identity", []string{""}},
	{"config", []string{"", "algo", "engine", "identity", "internal/configerr", "internal/watch", "internal/yamlnode"}},
	{"metrics", []string{"", "engine"}},
	{"sluiceotel", []string{""}},
	{"throttled", []string{"", "algo"}},
	{"httplimit", []string{"", "algo", "engine", "identity", "internal/clip", "internal/inflight", "internal/logpace", "internal/ratefield"}},
	{"grpclimit", []string{"", "algo", "engine", "identity", "internal/clip", "internal/inflight", "internal/logpace", "internal/ratefield"}},
	{"envoyrls", []string{"", "algo", "engine", "internal/configerr", "internal/logpace", "internal/ratefield"}},
	{"envoyrls/rlsfile", []string{"envoyrls", "algo", "internal/configerr", "internal/watch", "internal/yamlnode"}},
	{"envoyrls/rlsmetrics", []string{"envoyrls"}},
	{"envoyrls/xds", []string{"envoyrls", "envoyrls/rlsfile", "config"}},
	{"envoyrls/xds/xdstest", nil},
	{"replay", []string{"", "algo", "engine", "config", "identity", "backend/memory", "replay/internal/..."}},
	{"replay/internal/...", nil},
	{"internal/loadgen/...", nil},
	{"fuzz", []string{"*"}},
	{"cmd/...", []string{"*"}},
	{"internal/cmd/...", []string{"*"}},
}

// covers reports whether the table entry pattern names rel.
func covers(pattern, rel string) bool {
	if tree, ok := strings.CutSuffix(pattern, "/..."); ok {
		return rel == tree || strings.HasPrefix(rel, tree+"/")
	}
	return pattern == rel
}

// The module's import graph keeps to the layout table: every arrow one of
// the table's, every package in it.
func TestLayoutArrows(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("SKIPPED: no go command on PATH to list imports with")
	}
	out, err := exec.Command(goBin, "list", "-json=ImportPath,Imports", "./...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	seen := 0
	for dec.More() {
		var p struct {
			ImportPath string
			Imports    []string
		}
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		seen++
		rel := strings.TrimPrefix(strings.TrimPrefix(p.ImportPath, module), "/")
		entry := -1
		for i, e := range layout {
			if covers(e.pkg, rel) {
				entry = i
				break
			}
		}
		if entry < 0 {
			t.Errorf("%s is not in the layout table: add it with what it may import", path.Join(module, rel))
			continue
		}
		allow := layout[entry].allow
		for _, imp := range p.Imports {
			if imp != module && !strings.HasPrefix(imp, module+"/") {
				continue
			}
			to := strings.TrimPrefix(strings.TrimPrefix(imp, module), "/")
			ok := false
			for _, a := range allow {
				ok = ok || a == "*" || covers(a, to)
			}
			if !ok {
				t.Errorf("%q imports %q: not an arrow of the layout table (%q may import %q)", rel, to, layout[entry].pkg, allow)
			}
		}
	}
	if seen < 20 {
		t.Fatalf("go list gave %d packages: the check has gone blind", seen)
	}
}
