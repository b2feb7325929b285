package pebble

import (
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/sluice-go/sluice/backend"
	"github.com/sluice-go/sluice/backend/backendtest"
)

// Pebble files with bytes flipped or overwritten — sst blocks, the
// MANIFEST, the WAL, OPTIONS — never panic or end the process: open,
// reads, writes, sweep, range and close each succeed or fail with an
// error wrapping backend.ErrCorrupt.
func TestDamagedFiles(t *testing.T) {
	backendtest.Damaged(t, backendtest.Damage{
		Open: func(dir string) (backend.Backend, error) {
			return Open(dir, &Options{SweepInterval: -1, SyncInterval: -1, MemTableSize: 64 << 10})
		},
		Files: func(dir string) []backendtest.Target {
			entries, err := os.ReadDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			var out []backendtest.Target
			for _, e := range entries {
				name := e.Name()
				kind := ""
				switch {
				case strings.HasSuffix(name, ".sst"):
					kind = "sst"
				case strings.HasPrefix(name, "MANIFEST-"):
					kind = "MANIFEST"
				case strings.HasSuffix(name, ".log"):
					kind = "WAL"
				case strings.HasPrefix(name, "OPTIONS-"):
					kind = "OPTIONS"
				}
				if kind == "" {
					continue
				}
				if info, err := os.Stat(filepath.Join(dir, name)); err != nil || info.Size() == 0 {
					continue
				}
				out = append(out, backendtest.Target{Kind: kind, Path: name})
			}
			sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
			return out
		},
		Rounds: 60,
	})
}
