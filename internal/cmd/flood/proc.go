package main

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/sluice-go/sluice/internal/loadgen/serveproc"
)

// procStatus reads VmRSS and VmHWM (the peak resident set) of this process,
// in bytes.
func procStatus() (rss, hwm int64, err error) {
	m, err := serveproc.ReadMemory(os.Getpid())
	return m.RSS, m.HWM, err
}

// resetPeakRSS makes VmHWM start again from the current resident set
// (Linux: "5" written to /proc/self/clear_refs), so that one process can
// measure the peak of several runs in turn. It reports whether it could.
func resetPeakRSS() bool {
	return os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) == nil
}

// dirBytes returns the total size of the regular files under dir. Files
// that vanish during the walk (Pebble deletes obsolete tables and logs
// while it runs) are skipped.
func dirBytes(dir string) (int64, error) {
	var total int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if !d.Type().IsRegular() {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		total += info.Size()
		return nil
	})
	return total, err
}
