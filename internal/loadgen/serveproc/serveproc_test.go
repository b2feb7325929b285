package serveproc

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"testing"
)

func TestParseStatus(t *testing.T) {
	t.Parallel()
	status := "Name:\tsluice\nVmPeak:\t  900000 kB\nVmHWM:\t   81234 kB\nVmRSS:\t   70000 kB\nThreads:\t9\n"
	m, err := ParseStatus(status)
	if err != nil {
		t.Fatal(err)
	}
	if m.RSS != 70000*1024 || m.HWM != 81234*1024 {
		t.Errorf("ParseStatus = %+v, want RSS 70000 KiB and HWM 81234 KiB", m)
	}
	for _, bad := range []string{"Name:\tx\n", "VmRSS:\t12 MB\nVmHWM:\t1 kB\n", "VmRSS:\tx kB\nVmHWM:\t1 kB\n"} {
		if _, err := ParseStatus(bad); err == nil {
			t.Errorf("ParseStatus(%q) accepted", bad)
		}
	}
}

func TestReadMemorySelf(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat("/proc/self/status"); err != nil {
		t.Skip("no /proc")
	}
	m, err := ReadMemory(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if m.RSS <= 0 || m.HWM < m.RSS {
		t.Errorf("ReadMemory(self) = %+v, want 0 < RSS <= HWM", m)
	}
}

func TestModuleRoot(t *testing.T) {
	t.Parallel()
	root, err := ModuleRoot(".")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "cmd", "sluice", "serve.go")); err != nil {
		t.Errorf("ModuleRoot = %s, which holds no cmd/sluice/serve.go", root)
	}
	if _, err := ModuleRoot(t.TempDir()); err == nil {
		t.Error("ModuleRoot of a temporary directory found a module")
	}
}

func TestUpstream(t *testing.T) {
	t.Parallel()
	url, closeUp, err := Upstream(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "up "+r.URL.Path)
	}))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get(url + "/x")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "up /x" {
		t.Errorf("GET %s/x = %q, want %q", url, body, "up /x")
	}
	if err := closeUp(); err != nil {
		t.Fatal(err)
	}
	if _, err := http.Get(url + "/x"); err == nil {
		t.Error("the upstream still answers after its close")
	}
}

func TestBinaryGiven(t *testing.T) {
	t.Parallel()
	// A given binary is used as it is: nothing is built.
	if got, err := Binary(context.Background(), "/opt/sluice", "/nonexistent", t.TempDir()); err != nil || got != "/opt/sluice" {
		t.Errorf("Binary(given) = %q, %v; want /opt/sluice, nil", got, err)
	}
	if _, err := Binary(context.Background(), "", t.TempDir(), t.TempDir()); err == nil {
		t.Error("Binary from a directory outside the module: nil error, want one")
	}
}
