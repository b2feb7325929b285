package main

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-go/sluice/backend/backendtest"
	"github.com/sluice-go/sluice/backend/bolt"
)

// damageUsers is how many callers fill the store the damage test damages.
const damageUsers = 200

// damageTargets returns the files of the kind named in a stopped store in
// dir, and the byte ranges of each to damage ([from, upto); upto 0 is the
// file's end). For bbolt: "meta pages", the checksummed meta of both meta
// pages (so that bbolt cannot fall back on the other), and "data pages",
// every page after them. For Pebble: "MANIFEST", "WAL" (the live log, the
// newest) and "sst".
func damageTargets(t *testing.T, backendName, kind, dir string) (paths []string, ranges [][2]int64) {
	t.Helper()
	page := int64(os.Getpagesize())
	switch backendName + " " + kind {
	case "bolt meta pages":
		// A page header (16 bytes), then the meta: magic, version, page
		// size, flags, the root bucket, the freelist, the high-water
		// page, the transaction id and the checksum, 64 bytes.
		path := filepath.Join(dir, bolt.FileName)
		return []string{path, path}, [][2]int64{{16, 80}, {page + 16, page + 80}}
	case "bolt data pages":
		// Random offsets of the records' leaf pages, found from the file's
		// tree (in a file mostly of free pages, offsets anywhere would
		// seldom meet a record).
		path := filepath.Join(dir, bolt.FileName)
		for _, p := range boltLeaves(t, path, page) {
			paths, ranges = append(paths, path), append(ranges, [2]int64{p * page, (p + 1) * page})
		}
		return paths, ranges
	}
	var pattern string
	switch kind {
	case "MANIFEST":
		pattern = "MANIFEST-*"
	case "WAL":
		pattern = "*.log"
	case "sst":
		pattern = "*.sst"
	}
	found, _ := filepath.Glob(filepath.Join(dir, pattern))
	sort.Strings(found)
	if kind == "WAL" && len(found) > 0 {
		found = found[len(found)-1:] // the older ones are kept to be recycled, never read
	}
	for _, p := range found {
		if info, err := os.Stat(p); err == nil && info.Size() > 0 {
			paths, ranges = append(paths, p), append(ranges, [2]int64{0, 0})
		}
	}
	return paths, ranges
}

// A gateway whose durable store is damaged — bytes flipped or overwritten at
// random offsets, over several seeds, of bbolt's meta and data pages and
// Pebble's MANIFEST, live WAL and tables — stays up and answers by its
// on_store_error policy, closed: every answer is the upstream's, a 429 or a
// 503 with Retry-After (no other 5xx), the log shows no panic, and where
// the damage was met (a 503, or the log saying the store is damaged)
// `inspect` on the directory exits non-zero. Damage that leaves nothing to
// fall back on (both bbolt meta pages, the MANIFEST) must be met, and each
// store must have answered 503 somewhere. (Before, bbolt's sweeper
// panicked and Pebble's logger ended the process.)
func TestServeProcessDamagedStore(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	t.Parallel()
	bin := buildBinary(t)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	t.Cleanup(up.Close)
	cases := newCaseGroup(t, 2) // both stores at once, from the start (see caseGroup)
	for _, tc := range []struct {
		backend string
		kinds   []string
		must    []string // kinds whose every round must meet the damage
	}{
		{"bolt", []string{"meta pages", "data pages"}, []string{"meta pages"}},
		{"pebble", []string{"MANIFEST", "WAL", "sst"}, []string{"MANIFEST"}},
	} {
		cases.run(tc.backend, func(t *testing.T) {
			clean := filepath.Join(t.TempDir(), "state")
			config := func(dir string) string {
				cfg := filepath.Join(t.TempDir(), "gateway.yaml")
				writeFile(t, cfg, fmt.Sprintf(`store:
  backend: %s
  dir: %s
identity:
  user_header: X-User-ID
on_store_error: closed
rules:
  - {name: orders, path_prefix: /, scope: user, algorithm: token_bucket, limit: 5, window: 1h}
`, tc.backend, dir))
				return cfg
			}
			// requests sends one request for each caller, eight at a time,
			// and returns their answers.
			requests := func(p *serveProcess, users int) []*http.Response {
				out := make([]*http.Response, users)
				var wg sync.WaitGroup
				sem := make(chan struct{}, 8)
				for u := range out {
					sem <- struct{}{}
					wg.Go(func() {
						defer func() { <-sem }()
						req, _ := http.NewRequest("GET", "http://"+p.listen+"/", nil)
						req.Header.Set("X-User-ID", fmt.Sprint("user-", u))
						resp, err := testClient.Do(req)
						if err != nil {
							t.Errorf("user-%d: %v", u, err)
							return
						}
						resp.Body.Close()
						out[u] = resp
					})
				}
				wg.Wait()
				return out
			}
			stop := func(p *serveProcess) {
				p.cmd.Process.Signal(syscall.SIGTERM)
				p.wait(t, 20*time.Second) // a failed flush may make it exit 1; it must exit
			}

			// A store holding the callers' records, flushed at SIGTERM.
			p := startServeProcess(t, bin, "--config", config(clean), "--listen", "127.0.0.1:0", "--upstream", up.URL)
			for u, resp := range requests(p, damageUsers) {
				if resp != nil && resp.StatusCode != http.StatusNoContent {
					t.Fatalf("user-%d on the healthy store: %d", u, resp.StatusCode)
				}
			}
			stop(p)
			// Once more, with more callers, so that Pebble's log is flushed
			// to a table when it opens and the new callers' records are in
			// its next log: a table, a MANIFEST naming it, and a live WAL.
			p = startServeProcess(t, bin, "--config", config(clean), "--listen", "127.0.0.1:0", "--upstream", up.URL)
			for u, resp := range requests(p, damageUsers+damageUsers/4) {
				if resp != nil && resp.StatusCode != http.StatusNoContent {
					t.Fatalf("user-%d on the healthy store: %d", u, resp.StatusCode)
				}
			}
			stop(p)
			if t.Failed() {
				return
			}

			unavailable := 0
			for _, kind := range tc.kinds {
				for seed := range uint64(3) {
					paths, ranges := damageTargets(t, tc.backend, kind, clean)
					if len(paths) == 0 {
						if kind == "sst" {
							continue // all the records are still in the WAL
						}
						t.Fatalf("the %s store has no %s to damage", tc.backend, kind)
					}
					dir := filepath.Join(t.TempDir(), "state")
					backendtest.CopyDir(t, clean, dir)
					paths, ranges = damageTargets(t, tc.backend, kind, dir)
					rng := rand.New(rand.NewPCG(seed, seed*0x9e3779b97f4a7c15+1))
					var did []string
					for i, path := range paths {
						did = append(did, filepath.Base(path)+": "+backendtest.DamageFile(t, rng, path, backendtest.Target{From: ranges[i][0], Upto: ranges[i][1]}))
					}
					how := strings.Join(did, "; ")
					what := fmt.Sprintf("%s %s, seed %d (%s)", tc.backend, kind, seed, how)

					began := time.Now()
					p := startServeProcess(t, bin, "--config", config(dir), "--listen", "127.0.0.1:0", "--upstream", up.URL)
					met := false
					for u, resp := range requests(p, damageUsers+damageUsers/4) {
						switch {
						case resp == nil:
						case resp.StatusCode == http.StatusServiceUnavailable:
							met = true
							unavailable++
							if resp.Header.Get("Retry-After") == "" {
								t.Errorf("%s: user-%d: 503 without Retry-After", what, u)
							}
						case resp.StatusCode != http.StatusNoContent && resp.StatusCode != http.StatusTooManyRequests:
							t.Errorf("%s: user-%d: %d, want 204, 429 or 503", what, u, resp.StatusCode)
						}
					}
					select {
					case err := <-p.exited:
						p.exited <- err
						t.Fatalf("%s: serve exited (%v):\n%s", what, err, p.stderr)
					default:
					}
					stop(p)
					log := p.stderr.String()
					if strings.Contains(log, "panic") || strings.Contains(log, "goroutine ") {
						t.Errorf("%s: the log shows a panic:\n%s", what, log)
					}
					met = met || strings.Contains(log, "damaged")
					out, err := exec.Command(bin, "inspect", "--backend", tc.backend, "--dir", dir, "--limit", "0").CombinedOutput()
					var exit *exec.ExitError
					if !errors.As(err, &exit) && err != nil {
						t.Fatal(err)
					}
					switch {
					case met && err == nil:
						t.Errorf("%s: serve met the damage, but inspect exits 0:\n%s", what, out)
					case met && !strings.Contains(string(out), "move "+dir+" away"):
						t.Errorf("%s: inspect does not say how to recover:\n%s", what, out)
					case !met && err == nil && slices.Contains(tc.must, kind):
						t.Errorf("%s: neither serve nor inspect met the damage", what)
					}
					if os.Getenv("SHOWLOG") != "" {
						t.Logf("%s: met %v, inspect %v, %v\n%s", what, met, err, time.Since(began), log)
					}
				}
			}
			if unavailable == 0 {
				t.Errorf("no damaged %s store answered 503", tc.backend)
			}
		})
	}
	cases.wait()
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
