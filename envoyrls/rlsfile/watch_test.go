package rlsfile

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-go/sluice/backend/memory"
	"github.com/sluice-go/sluice/engine"
	"github.com/sluice-go/sluice/envoyrls"
)

// lockedBuffer is a bytes.Buffer safe for a logger writing from the
// watcher's goroutine while the test reads.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// A directory is watched, its subdirectories too: a change is put in
// force, a file that does not load is rejected naming its line and field
// and the configuration in force stays, and the file back as it is in
// force changes nothing, which the log says.
func TestWatch(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) {
		t.Helper()
		tmp := filepath.Join(dir, ".tmp")
		if err := os.WriteFile(tmp, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	conf := func(n int) string {
		return fmt.Sprintf("domain: api\ndescriptors:\n  - key: user\n    rate_limit: {unit: day, requests_per_unit: %d}\n", n)
	}
	write("api.yaml", conf(3))
	cfg, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	eng, err := engine.New(memory.New(nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	srv, err := envoyrls.NewServer(cfg, envoyrls.Options{Engine: eng})
	if err != nil {
		t.Fatal(err)
	}
	var logs lockedBuffer
	var mu sync.Mutex
	var got []error
	w, err := Watch(dir, srv, WatchOptions{Logger: slog.New(slog.NewTextHandler(&logs, nil)), Debounce: 20 * time.Millisecond,
		OnReload: func(_ *envoyrls.Config, err error) { mu.Lock(); got = append(got, err); mu.Unlock() }})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	limit := func() uint32 { return srv.Config().Domain("api").Limits()[0].RequestsPerUnit }
	eventually := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("not within 5s: %s\n%s", what, logs.String())
			}
		}
	}
	write("api.yaml", conf(5))
	eventually("the limit of 5", func() bool { return limit() == 5 })
	write("api.yaml", strings.Replace(conf(7), "day", "fortnight", 1))
	eventually("the rejection", func() bool { return strings.Contains(logs.String(), "configuration rejected") })
	if !strings.Contains(logs.String(), `api.yaml:4: descriptors[0].rate_limit.unit: invalid rate limit unit \"fortnight\"`) || limit() != 5 {
		t.Errorf("limit %d after the rejection, logged:\n%s", limit(), logs.String())
	}
	write("api.yaml", conf(5))
	eventually("the note", func() bool {
		return strings.Contains(logs.String(), "envoyrls: the configuration loads again, and is the one in force: nothing changed")
	})
	// A new subdirectory's files are read, and it is watched.
	sub := filepath.Join(t.TempDir(), "team")
	os.Mkdir(sub, 0o755)
	os.WriteFile(filepath.Join(sub, "b.yaml"), []byte("domain: b\n"), 0o644)
	if err := os.Rename(sub, filepath.Join(dir, "team")); err != nil {
		t.Fatal(err)
	}
	eventually("domain b", func() bool { return srv.Config().Domain("b") != nil })
	os.WriteFile(filepath.Join(dir, "team", "c.yaml"), []byte("domain: c\n"), 0o644)
	eventually("domain c", func() bool { return srv.Config().Domain("c") != nil })

	mu.Lock()
	if len(got) < 4 || got[0] != nil || got[1] == nil {
		t.Errorf("OnReload got %v, want a reload, a rejection, then reloads", got)
	}
	mu.Unlock()
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := w.Reload(); !errors.Is(err, ErrWatcherClosed) {
		t.Errorf("Reload after Close = %v, want ErrWatcherClosed", err)
	}
	if _, err := Watch(filepath.Join(dir, "none"), srv, WatchOptions{}); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Watch of nothing = %v, want not-exist", err)
	}
}
