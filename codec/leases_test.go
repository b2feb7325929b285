package codec_test

import (
	"testing"

	"pgregory.net/rapid"

	"github.com/sluice-go/sluice/codec"
)

// TestLeasesRecord: a concurrency record built lease by lease reads back
// as built, is Valid and described; a record cut short, or grown by a
// partial lease, is not; no bytes make ReadLeases panic.
func TestLeasesRecord(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		at := rapid.Int64().Draw(t, "at")
		l := codec.NewLeases(nil, 0, at)
		n := rapid.IntRange(0, 20).Draw(t, "n")
		id := rapid.Int64Range(-1<<40, 1<<40).Draw(t, "first")
		var ids, exps []int64
		for range n {
			id += rapid.Int64Range(1, 1e9).Draw(t, "gap")
			exp := rapid.Int64().Draw(t, "expiry")
			l = l.Add(id, exp)
			ids, exps = append(ids, id), append(exps, exp)
		}
		rec := l.Bytes()
		if len(rec) != codec.LeasesHeaderSize+n*codec.LeaseSize || !codec.Valid(rec) {
			t.Fatalf("record of %d leases: %d bytes, valid %v", n, len(rec), codec.Valid(rec))
		}
		r, err := codec.ReadLeases(rec)
		if err != nil || r.Len() != n || r.At() != at || (n > 0 && r.Last() != id) {
			t.Fatalf("read back: %v, %d leases, at %d", err, r.Len(), r.At())
		}
		for i := range n {
			if r.ID(i) != ids[i] || r.Expiry(i) != exps[i] {
				t.Fatalf("lease %d: %d/%d, want %d/%d", i, r.ID(i), r.Expiry(i), ids[i], exps[i])
			}
		}
		if name, _, err := codec.Describe(rec); name != "concurrency" || err != nil {
			t.Fatalf("Describe: %q, %v", name, err)
		}
		if cut := rapid.IntRange(1, codec.LeaseSize-1).Draw(t, "cut"); n > 0 && codec.Valid(rec[:len(rec)-cut]) {
			t.Fatalf("a record cut by %d bytes is valid", cut)
		}
		junk := rapid.SliceOf(rapid.Byte()).Draw(t, "junk")
		codec.ReadLeases(junk)
		codec.Valid(junk)
	})
}
