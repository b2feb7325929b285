package bolt

import (
	"os"
	"testing"

	"github.com/sluice-go/sluice/backend"
	"github.com/sluice-go/sluice/backend/backendtest"
)

// A bbolt file with bytes flipped or overwritten anywhere — its two meta
// pages, the freelist, branch and leaf pages — never panics or ends the
// process: open, reads, writes, sweep, range and close each succeed or
// fail with an error wrapping backend.ErrCorrupt.
func TestDamagedFile(t *testing.T) {
	page := int64(os.Getpagesize())
	backendtest.Damaged(t, backendtest.Damage{
		Open: func(dir string) (backend.Backend, error) { return Open(dir, &Options{SweepInterval: -1}) },
		Files: func(dir string) []backendtest.Target {
			return []backendtest.Target{
				{Kind: "meta page", Path: FileName, From: 0, Upto: 2 * page},
				{Kind: "data pages", Path: FileName, From: 2 * page},
				{Kind: "anywhere", Path: FileName},
			}
		},
		Rounds: 90,
	})
}
