package main

import (
	"bufio"
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
)

// procStatus reads VmRSS and VmHWM (the peak resident set) of this process
// from /proc/self/status, in bytes.
func procStatus() (rss, hwm int64, err error) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, 0, err
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := sc.Bytes()
		switch {
		case bytes.HasPrefix(line, []byte("VmRSS:")):
			rss, err = kiB(line[len("VmRSS:"):])
		case bytes.HasPrefix(line, []byte("VmHWM:")):
			hwm, err = kiB(line[len("VmHWM:"):])
		}
		if err != nil {
			return 0, 0, err
		}
	}
	if rss == 0 || hwm == 0 {
		return 0, 0, errors.New("/proc/self/status: no VmRSS or VmHWM line")
	}
	return rss, hwm, nil
}

// kiB parses "   1234 kB" into bytes.
func kiB(field []byte) (int64, error) {
	f := bytes.Fields(field)
	if len(f) != 2 || string(f[1]) != "kB" {
		return 0, errors.New("/proc/self/status: unexpected field " + strconv.Quote(string(field)))
	}
	n, err := strconv.ParseInt(string(f[0]), 10, 64)
	return n << 10, err
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
