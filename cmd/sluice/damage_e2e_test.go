package main

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-go/sluice/backend/bolt"
)

// damageStoreFiles damages a stopped store's files in dir so that what it
// reads is bad: for bbolt, random bytes over the header of every leaf page
// of the records; for Pebble, random bytes over the middle of every
// table (its footer kept, so that it opens), or of its write-ahead log.
func damageStoreFiles(t *testing.T, backendName, dir string) {
	t.Helper()
	rng := rand.New(rand.NewPCG(7, 11))
	garble := func(path string, from, n int64) {
		f, err := os.OpenFile(path, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		buf := make([]byte, n)
		for i := range buf {
			buf[i] = byte(rng.Uint32())
		}
		if _, err := f.WriteAt(buf, from); err != nil {
			t.Fatal(err)
		}
	}
	switch backendName {
	case "bolt":
		path := filepath.Join(dir, bolt.FileName)
		info, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		// The records' leaf pages, not the pages Open reads: the store
		// opens, and the damage is met by reads, writes and the sweeper.
		_ = info
		page := int64(os.Getpagesize())
		leaves := boltLeaves(t, path, page)
		if len(leaves) == 0 {
			t.Fatal("no leaf page to damage")
		}
		for _, p := range leaves {
			garble(path, p*page, 32)
		}
	case "pebble":
		// The tables, or, while the records are all still in the
		// write-ahead log (a small store), the log.
		tables, _ := filepath.Glob(filepath.Join(dir, "*.sst"))
		if len(tables) == 0 {
			tables, _ = filepath.Glob(filepath.Join(dir, "*.log"))
		}
		if len(tables) == 0 {
			t.Fatal("no Pebble table or log to damage")
		}
		for _, p := range tables {
			info, err := os.Stat(p)
			if err != nil {
				t.Fatal(err)
			}
			garble(p, info.Size()/4, info.Size()/2)
		}
	}
}

// boltLeaves returns the leaf pages of the bbolt file at path but the root
// one (which holds the buckets, so Open reads it), found from its newer
// meta page and each page's header. A page header is the page's id (8
// bytes), its flags (2; 0x02 a leaf), count (2) and overflow (4); a meta
// page's body holds magic, version, page size and flags (4 bytes each),
// the root bucket's page (8) and sequence (8), the freelist's page, the
// high-water page and the transaction id (8 each).
func boltLeaves(t *testing.T, path string, page int64) []int64 {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	le := binary.LittleEndian
	root, txid := int64(0), uint64(0)
	for m := int64(0); m < 2; m++ {
		meta := data[m*page+16:]
		if id := le.Uint64(meta[48:]); id >= txid {
			root, txid = int64(le.Uint64(meta[16:])), id
		}
	}
	var leaves []int64
	for p := int64(2); (p+1)*page <= int64(len(data)); p++ {
		h := data[p*page:]
		if int64(le.Uint64(h)) == p && le.Uint16(h[8:])&0x02 != 0 && p != root {
			leaves = append(leaves, p)
		}
	}
	return leaves
}

// A gateway whose durable store is damaged stays up and answers by its
// on_store_error policy — at start, on every request, and when its
// sweeper walks the damaged pages — and logs what is damaged; inspect on
// the directory reports the damage and exits 1. (Before, bbolt's sweeper
// panicked about ten seconds in and Pebble's logger ended the process.)
func TestServeProcessDamagedStore(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary, waits for a sweep")
	}
	t.Parallel()
	bin := buildBinary(t)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	t.Cleanup(up.Close)
	for _, name := range []string{"bolt", "pebble"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			dir := filepath.Join(t.TempDir(), "state")
			cfg := filepath.Join(t.TempDir(), "gateway.yaml")
			writeFile(t, cfg, fmt.Sprintf(`store:
  backend: %s
  dir: %s
identity:
  user_header: X-User-ID
on_store_error: closed
rules:
  - {name: orders, path_prefix: /, scope: user, algorithm: token_bucket, limit: 5, window: 1h}
`, name, dir))
			args := []string{"--config", cfg, "--listen", "127.0.0.1:0", "--upstream", up.URL}

			// A store full of callers' records, flushed at SIGTERM.
			p := startServeProcess(t, bin, args...)
			for u := range 3000 {
				if code, _ := send(t, "GET", "http://"+p.listen+"/", "X-User-ID", fmt.Sprint("user-", u)); code != http.StatusNoContent {
					t.Fatalf("user-%d on the healthy store: %d", u, code)
				}
			}
			p.cmd.Process.Signal(syscall.SIGTERM)
			if err := p.wait(t, 20*time.Second); err != nil {
				t.Fatalf("serve after SIGTERM: %v\n%s", err, p.stderr)
			}
			damageStoreFiles(t, name, dir)

			p = startServeProcess(t, bin, args...)
			answer := func(when string) {
				t.Helper()
				for u := range 200 {
					code, _ := send(t, "GET", "http://"+p.listen+"/", "X-User-ID", fmt.Sprint("user-", u*15))
					if code != http.StatusServiceUnavailable && code != http.StatusNoContent && code != http.StatusTooManyRequests {
						t.Fatalf("%s, user-%d: %d", when, u*15, code)
					}
				}
			}
			answer("on the damaged store")
			// The sweeper walks the store every 10s: wait it out.
			deadline := time.Now().Add(12 * time.Second)
			for time.Now().Before(deadline) {
				select {
				case err := <-p.exited:
					t.Fatalf("serve on a damaged store exited (%v):\n%s", err, p.stderr)
				case <-time.After(500 * time.Millisecond):
				}
				answer("while the sweeper walks the damaged store")
			}
			log := p.stderr.String()
			if strings.Contains(log, "panic") || strings.Contains(log, "goroutine ") {
				t.Errorf("the log shows a panic:\n%s", log)
			}
			if !strings.Contains(log, "damaged") || !strings.Contains(log, dir) {
				t.Errorf("the log does not say the store in %s is damaged:\n%s", dir, log)
			}
			if os.Getenv("SHOWLOG") != "" {
				t.Log(log)
			}
			p.cmd.Process.Signal(syscall.SIGTERM)
			p.wait(t, 20*time.Second) // a failed flush may make it exit 1; it must exit

			code, stdout, stderr := runCmd(t, "", "inspect", "--backend", name, "--dir", dir, "--limit", "0")
			if code != 1 || !strings.Contains(stderr, "damaged") || !strings.Contains(stderr, "move "+dir+" away") {
				t.Errorf("inspect on the damaged store: exit %d, stderr %q (stdout %d bytes); want 1 and how to recover", code, stderr, len(stdout))
			}
		})
	}
}
