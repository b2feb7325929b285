package bolt

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/sluice-go/sluice/backend"
)

// A leaf element whose value length was damaged to claim 64 MB, in a file
// of a few pages (as a flipped byte of a page's element header does), is
// damage met at once, at no cost: Get of its key and a Range over it fail
// with backend.ErrCorrupt without copying what the length claims; and once
// a write has met the damaged page, later writes fail with that damage
// without bbolt allocating the page it would write back. Before, every
// read of the key copied the claim and every flush (twenty a second)
// allocated it: a gateway on such a file took seconds a request.
func TestOversizeElementIsDamage(t *testing.T) {
	const claim = 64 << 20
	dir := t.TempDir()
	s, err := Open(dir, &Options{SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	var writes []backend.Write
	for i := range 400 {
		writes = append(writes, backend.Write{Key: []byte(fmt.Sprintf("rec-%04d", i)), Value: []byte("value")})
	}
	if err := s.WriteBatch(writes, true); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	damaged := claimOversize(t, filepath.Join(dir, FileName), claim)

	s, err = Open(dir, &Options{SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var live []byte // a damaged key of the live tree
	for _, k := range damaged {
		var err error
		if n := allocated(func() { _, err = s.Get(k, 0) }); n > claim/64 {
			t.Errorf("Get(%q) allocated %d bytes", k, n)
		}
		if err != nil {
			if !errors.Is(err, backend.ErrCorrupt) {
				t.Fatalf("Get(%q): %v, want an error wrapping ErrCorrupt", k, err)
			}
			live = k
		}
	}
	if live == nil {
		t.Fatalf("no Get of the %d damaged keys met the damage: only stale pages were damaged", len(damaged))
	}
	if n := allocated(func() { err = s.Range(nil, func(backend.Record) bool { return true }) }); n > claim/64 || !errors.Is(err, backend.ErrCorrupt) {
		t.Errorf("Range: %v after allocating %d bytes, want an error wrapping ErrCorrupt and no copy of the claim", err, n)
	}
	// A key beside the damaged one, in its leaf: the page bbolt writes
	// back holds the damaged element.
	beside := []backend.Write{{Key: append(bytes.Clone(live), 'x'), Value: []byte("value")}}
	if err := s.WriteBatch(beside, false); !errors.Is(err, backend.ErrCorrupt) {
		t.Fatalf("a write beside the damaged element: %v, want an error wrapping ErrCorrupt", err)
	}
	for _, w := range [][]backend.Write{beside, {{Key: []byte("elsewhere"), Value: []byte("value")}}} {
		if n := allocated(func() { err = s.WriteBatch(w, false) }); n > claim/64 || !errors.Is(err, backend.ErrCorrupt) {
			t.Errorf("a write of %q after one met the damage: %v after allocating %d bytes, want the damage at once", w[0].Key, err, n)
		}
	}
}

// claimOversize sets the value length of the first element of every leaf
// page of path holding records (live or stale) to claim, and returns
// their keys. A leaf page's header is its id (8 bytes), flags (2; 0x02 a
// leaf), count (2) and overflow (4); then an element per record: flags
// (4; 0 a value, not a bucket), the key's position from the element (4),
// the key's length (4) and the value's (4).
func claimOversize(t *testing.T, path string, claim uint32) (keys [][]byte) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	le := binary.LittleEndian
	page := os.Getpagesize()
	for p := 2; (p+1)*page <= len(data); p++ {
		h := data[p*page : (p+1)*page]
		if le.Uint64(h) != uint64(p) || le.Uint16(h[8:])&0x02 == 0 || le.Uint16(h[10:]) == 0 {
			continue
		}
		e := h[16:]
		pos, ksize := int(le.Uint32(e[4:])), int(le.Uint32(e[8:]))
		if le.Uint32(e) != 0 || 16+pos+ksize > page || !bytes.HasPrefix(e[pos:pos+ksize], []byte("rec-")) {
			continue
		}
		keys = append(keys, bytes.Clone(e[pos:pos+ksize]))
		le.PutUint32(e[12:], claim)
	}
	if len(keys) == 0 {
		t.Fatal("no leaf page of records found to damage")
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return keys
}

// allocated returns the bytes the process allocated while fn ran.
func allocated(fn func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	fn()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}
