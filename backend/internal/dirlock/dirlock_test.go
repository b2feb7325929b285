package dirlock

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/sluice-go/sluice/backend"
)

func TestClaim(t *testing.T) {
	r := New("sluice/test")
	dir := t.TempDir()
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(dir, link); err != nil {
		t.Fatal(err)
	}
	h, err := r.Claim(dir)
	if err != nil {
		t.Fatalf("Claim(%q) = %v", dir, err)
	}
	// The same directory by any path is refused.
	for _, other := range []string{dir, dir + "/.", filepath.Join(dir, "..", filepath.Base(dir)), link} {
		_, err := r.Claim(other)
		if !errors.Is(err, backend.ErrLocked) {
			t.Fatalf("second Claim(%q) = %v, want ErrLocked", other, err)
		}
		want := `sluice/test: open "` + other + `": another Store in this process holds its lock`
		if !strings.HasPrefix(err.Error(), want) {
			t.Errorf("second Claim(%q) error %q, want it to start with %q", other, err, want)
		}
		var le *LockedError
		if !errors.As(err, &le) || le.Dir != other || le.Cause != nil {
			t.Errorf("second Claim(%q) error %#v, want a *LockedError for %q with no cause", other, err, other)
		}
	}
	// Another registry (another kind of store) keeps its own set.
	h2, err := New("sluice/other").Claim(dir)
	if err != nil {
		t.Fatalf("Claim in another registry = %v", err)
	}
	h2.Release()
	// Released, the directory can be claimed again.
	h.Release()
	h, err = r.Claim(link)
	if err != nil {
		t.Fatalf("Claim after Release = %v", err)
	}
	h.Release()
}

func TestClaimMissing(t *testing.T) {
	r := New("sluice/test")
	dir := filepath.Join(t.TempDir(), "missing")
	_, err := r.Claim(dir)
	if err == nil || errors.Is(err, backend.ErrLocked) || !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), dir) {
		t.Fatalf("Claim(%q) = %v, want a not-exist error naming it", dir, err)
	}
}

func TestLockedError(t *testing.T) {
	cause := errors.New("resource temporarily unavailable")
	err := error(New("sluice/test").Locked("/d", "another process", cause))
	if !errors.Is(err, backend.ErrLocked) || !errors.Is(err, cause) {
		t.Errorf("Locked() = %v, want it to match ErrLocked and its cause", err)
	}
	want := `sluice/test: open "/d": another process holds its lock; close it first, or give this store its own directory (resource temporarily unavailable)`
	if err.Error() != want {
		t.Errorf("Locked().Error() = %q, want %q", err, want)
	}
}

func TestConcurrentClaims(t *testing.T) {
	r := New("sluice/test")
	dir := t.TempDir()
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		wins int
	)
	for range 16 {
		wg.Go(func() {
			if _, err := r.Claim(dir); err == nil {
				mu.Lock()
				wins++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if wins != 1 {
		t.Errorf("%d of 16 concurrent Claims succeeded, want 1", wins)
	}
}

func TestOpen(t *testing.T) {
	r := New("sluice/test")
	if _, err := r.Open(""); err == nil || err.Error() != "sluice/test: open: empty directory name" {
		t.Errorf(`Open("") = %v, want the empty name refused`, err)
	}
	dir := filepath.Join(t.TempDir(), "a", "b")
	h, err := r.Open(dir)
	if err != nil {
		t.Fatalf("Open(%q) = %v", dir, err)
	}
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		t.Fatalf("Open(%q) did not create it: %v", dir, err)
	}
	if _, err := r.Open(dir); !errors.Is(err, backend.ErrLocked) {
		t.Errorf("second Open(%q) = %v, want ErrLocked", dir, err)
	}
	h.Release()
	// A path under a regular file cannot be created.
	f := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(f, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	under := filepath.Join(f, "sub")
	_, err = r.Open(under)
	if err == nil || errors.Is(err, backend.ErrLocked) || !strings.Contains(err.Error(), under) || !strings.Contains(err.Error(), "cannot create the directory") {
		t.Fatalf("Open(%q) = %v, want an error naming it", under, err)
	}
}
