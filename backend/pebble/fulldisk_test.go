package pebble

import (
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/sluice-go/sluice/backend"
	"github.com/sluice-go/sluice/backend/backendtest/fulldisk"
)

// TestFullDisk: a full disk is a store error, said once, visible in the
// engine's health and counters, and Pebble's stuck database is reopened
// once there is room, with every spending kept in memory written.
func TestFullDisk(t *testing.T) {
	fulldisk.Run(t, fulldisk.Store{Open: func(dir string) (backend.Durable, error) {
		s, err := Open(dir, &Options{SweepInterval: -1, MemTableSize: 1 << 20})
		if err != nil {
			return nil, err
		}
		return s, nil
	}, OneEpisode: true})
}

// TestStuckStore: a WriteBatch on a full disk fails with an error naming
// the directory and wrapping backend.ErrNoSpace, not ErrCorrupt; reads go
// on meanwhile; Close works on the stuck database; and, with room again,
// the next write reopens it and every record written before is there.
func TestStuckStore(t *testing.T) {
	root := fulldisk.Mount(t, fulldisk.Size)
	dir := filepath.Join(root, "store")
	s, err := Open(dir, &Options{SweepInterval: -1, MemTableSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	before := []byte("before")
	if err := s.WriteBatch([]backend.Write{{Key: before, Value: []byte("v")}}, true); err != nil {
		t.Fatal(err)
	}
	filler := fulldisk.Fill(t, root)
	var werr error
	for i := 0; werr == nil && i < 10000; i++ {
		werr = s.WriteBatch([]backend.Write{{Key: fmt.Appendf(nil, "k%d-%0200d", i, 0), Value: make([]byte, 100)}}, true)
	}
	if !errors.Is(werr, backend.ErrNoSpace) || errors.Is(werr, backend.ErrCorrupt) || !strings.Contains(werr.Error(), dir) {
		t.Fatalf("WriteBatch on a full disk = %v; want an error naming %s wrapping backend.ErrNoSpace, not ErrCorrupt", werr, dir)
	}
	// Every write fails at once, reads go on.
	if err := s.Put([]byte("p"), []byte("v"), 0); !errors.Is(err, backend.ErrNoSpace) {
		t.Fatalf("Put on a stuck store = %v, want ErrNoSpace", err)
	}
	mustGet(t, s, string(before), t0, "v", true)

	fulldisk.Free(t, filler)
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := s.WriteBatch([]backend.Write{{Key: []byte("after"), Value: []byte("w")}}, true)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("WriteBatch 30s after the disk has room = %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	s = open(t, dir)
	mustGet(t, s, string(before), t0, "v", true)
	mustGet(t, s, "after", t0, "w", true)
}

// TestCloseStuckStore: Close on a stuck database releases the directory
// and says why the store was stuck; nothing panics.
func TestCloseStuckStore(t *testing.T) {
	root := fulldisk.Mount(t, fulldisk.Size)
	dir := filepath.Join(root, "store")
	s, err := Open(dir, &Options{SweepInterval: -1, MemTableSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	filler := fulldisk.Fill(t, root)
	var werr error
	for i := 0; werr == nil && i < 10000; i++ {
		werr = s.WriteBatch([]backend.Write{{Key: fmt.Appendf(nil, "k%d-%0200d", i, 0), Value: make([]byte, 100)}}, true)
	}
	if !errors.Is(werr, backend.ErrNoSpace) {
		t.Fatalf("WriteBatch on a full disk = %v", werr)
	}
	if err := s.Close(); !errors.Is(err, backend.ErrNoSpace) || errors.Is(err, backend.ErrCorrupt) {
		t.Fatalf("Close of a stuck store = %v, want an error wrapping ErrNoSpace, not ErrCorrupt", err)
	}
	fulldisk.Free(t, filler)
	s = open(t, dir) // the directory is released
}

// TestFlushFailsOnFullDisk: with the write-ahead log written into the
// files of logs already flushed, commits go on on a full disk while
// Pebble's flushes of its memtables fail; Pebble would then stall every
// commit without an error once its memtables are full. Writes must fail
// with the full-disk error instead of waiting, and succeed again by
// themselves once the disk has room.
func TestFlushFailsOnFullDisk(t *testing.T) {
	root := fulldisk.Mount(t, fulldisk.Size)
	dir := filepath.Join(root, "store")
	s, err := Open(dir, &Options{SweepInterval: -1, MemTableSize: 256 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// Several memtables flushed, so that their logs are kept for reuse.
	for i := range 3000 {
		if err := s.Put(fmt.Appendf(nil, "before%d-%0200d", i, 0), make([]byte, 100), 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.WriteBatch(nil, true); err != nil {
		t.Fatal(err)
	}
	filler := fulldisk.Fill(t, root)
	freed := false
	defer func() {
		if !freed {
			fulldisk.Free(t, filler)
		}
	}()
	// write makes one synced batch of 20 records, and fails the test if
	// it waits longer than a minute, with the goroutines' stacks.
	write := func(i int) error {
		w := make([]backend.Write, 20)
		for j := range w {
			w[j] = backend.Write{Key: fmt.Appendf(nil, "k%d-%d-%0200d", i, j, 0), Value: make([]byte, 200)}
		}
		done := make(chan error, 1)
		go func() { done <- s.WriteBatch(w, true) }()
		select {
		case err := <-done:
			return err
		case <-time.After(time.Minute):
			buf := make([]byte, 1<<20)
			t.Fatalf("WriteBatch %d on a full disk waited a minute; goroutines:\n%s", i, buf[:runtime.Stack(buf, true)])
			return nil
		}
	}
	var werr error
	n := 0
	for ; werr == nil && n < 20000; n++ {
		werr = write(n)
	}
	if !errors.Is(werr, backend.ErrNoSpace) || errors.Is(werr, backend.ErrCorrupt) || !strings.Contains(werr.Error(), dir) {
		t.Fatalf("WriteBatch %d on a full disk = %v; want an error naming %s wrapping backend.ErrNoSpace, not ErrCorrupt", n, werr, dir)
	}
	t.Logf("batch %d failed: %v", n, werr)
	if err := s.Put([]byte("p"), []byte("v"), 0); !errors.Is(err, backend.ErrNoSpace) {
		t.Fatalf("Put on a full disk = %v, want ErrNoSpace", err)
	}
	mustGet(t, s, fmt.Sprintf("before7-%0200d", 0), t0, string(make([]byte, 100)), true)

	fulldisk.Free(t, filler)
	freed = true
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := s.WriteBatch([]backend.Write{{Key: []byte("after"), Value: []byte("w")}}, true)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("WriteBatch 30s after the disk has room = %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	s = open(t, dir)
	mustGet(t, s, "after", t0, "w", true)
}
