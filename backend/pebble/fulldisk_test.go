package pebble

import (
	"errors"
	"fmt"
	"path/filepath"
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
