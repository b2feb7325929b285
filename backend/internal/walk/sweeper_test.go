package walk

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/sluice-go/sluice/backend/internal/gate"
)

// fakeStore is a sorted key space whose records are dead from their expiry
// on, swept through a Sweeper.
type fakeStore struct {
	keys    []string
	exp     map[string]int64
	reads   []string // the from of each read
	readErr error
}

func (f *fakeStore) read(from []byte, budget int, now int64) ([][]byte, []byte, error) {
	f.reads = append(f.reads, string(from))
	if f.readErr != nil {
		return nil, nil, f.readErr
	}
	i, _ := slices.BinarySearch(f.keys, string(from))
	var cands [][]byte
	for n := 0; i < len(f.keys) && n < budget; i, n = i+1, n+1 {
		if e := f.exp[f.keys[i]]; e > 0 && e <= now {
			cands = append(cands, []byte(f.keys[i]))
		}
	}
	if i == len(f.keys) {
		return cands, nil, nil
	}
	return cands, []byte(f.keys[i]), nil
}

func (f *fakeStore) delete(cands [][]byte, now int64) (int, error) {
	n := 0
	for _, k := range cands {
		if e, ok := f.exp[string(k)]; ok && e > 0 && e <= now {
			delete(f.exp, string(k))
			f.keys = slices.DeleteFunc(f.keys, func(s string) bool { return s == string(k) })
			n++
		}
	}
	return n, nil
}

func newFake(n int) *fakeStore {
	f := &fakeStore{exp: map[string]int64{}}
	for i := range n {
		k := fmt.Sprintf("k%02d", i)
		f.keys = append(f.keys, k)
		f.exp[k] = int64(1 + i%2) // even keys dead at 1, odd at 2
	}
	return f
}

func TestSweeperChunks(t *testing.T) {
	f := newFake(10)
	s := NewSweeper(4, nil, f.read, f.delete)
	steps := []struct {
		now             int64
		budget, removed int
		wrapped         bool
	}{
		{1, 3, 2, false}, // k00 … k02
		{1, 0, 2, false}, // k03 … k06, the batch
		{1, 5, 1, true},  // k07 … k09, the last
		{1, 5, 0, true},  // from the first again: the five odd keys left
		{2, 10, 5, true}, // k01 … k09 at 2: every odd key
		{2, 10, 0, true}, // empty
	}
	for i, st := range steps {
		n, wrapped, err := s.chunk(st.now, st.budget)
		if err != nil || n != st.removed || wrapped != st.wrapped {
			t.Fatalf("step %d: chunk(%d, %d) = %d, %t, %v, want %d, %t", i, st.now, st.budget, n, wrapped, err, st.removed, st.wrapped)
		}
	}
	if want := []string{"", "k03", "k07", "", "", ""}; fmt.Sprint(f.reads) != fmt.Sprint(want) {
		t.Errorf("reads from %q, want %q", f.reads, want)
	}
}

func TestSweeperBeforeDelete(t *testing.T) {
	f := newFake(4)
	s := NewSweeper(0, nil, f.read, f.delete)
	// A record rewritten between the read and the delete is kept.
	s.BeforeDelete = func() { f.exp["k00"] = 100 }
	if n, err := s.Sweep(1, 0); err != nil || n != 1 {
		t.Fatalf("Sweep = %d, %v, want 1 (k02)", n, err)
	}
	if _, ok := f.exp["k00"]; !ok {
		t.Error("k00, rewritten before the delete, was removed")
	}
	// No candidate, no BeforeDelete.
	s.BeforeDelete = func() { t.Error("BeforeDelete ran for a chunk with no candidates") }
	if n, err := s.Sweep(1, 0); err != nil || n != 0 {
		t.Fatalf("Sweep = %d, %v, want 0", n, err)
	}
}

func TestSweeperReadError(t *testing.T) {
	f := newFake(10)
	s := NewSweeper(3, nil, f.read, f.delete)
	if _, err := s.Sweep(1, 0); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	f.readErr = boom
	if _, err := s.Sweep(1, 0); !errors.Is(err, boom) {
		t.Fatalf("Sweep = %v, want the read's error", err)
	}
	f.readErr = nil
	// The failed chunk did not move the cursor.
	if _, err := s.Sweep(1, 0); err != nil {
		t.Fatal(err)
	}
	if want := []string{"", "k03", "k03"}; fmt.Sprint(f.reads) != fmt.Sprint(want) {
		t.Errorf("reads from %q, want %q", f.reads, want)
	}
}

func TestSweeperStartDisabled(t *testing.T) {
	f := newFake(2)
	s := NewSweeper(0, func() int64 { t.Error("a disabled sweeper read the clock"); return 0 }, f.read, f.delete)
	g := gate.New()
	s.Start(g, -1)
	g.Close() // returns at once: nothing was started
	if len(f.reads) != 0 {
		t.Errorf("a disabled sweeper read %d chunks", len(f.reads))
	}
}
