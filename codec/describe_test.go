package codec_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/sluice-go/sluice/codec"
)

// Describe reads every algorithm's record, of every version this release
// writes or reads, into its fields.
func TestDescribe(t *testing.T) {
	const t0 = int64(1_700_000_000e9)
	for _, c := range []struct {
		rec  []byte
		name string
		want string
	}{
		{codec.AppendTokenBucket(nil, codec.TokenBucket{Updated: t0, Spent: 3e9}), "token_bucket", "spent(spent)=3000000000 updated_at(updated)=1700000000000000000"},
		{codec.AppendBucket(nil, codec.TagTokenBucket, codec.Bucket{Updated: t0, Level: 2e9}), "token_bucket", "level(level)=2000000000 updated_at(updated)=1700000000000000000"},
		{codec.AppendBucket(nil, codec.TagLeakyBucket, codec.Bucket{Updated: t0, Level: 5}), "leaky_bucket", "level(level)=5 updated_at(updated)=1700000000000000000"},
		{codec.AppendWindow(nil, codec.Window{Start: t0, Count: 4}), "fixed_window", "window_start(start)=1700000000000000000 count(count)=4"},
		{codec.AppendCounter(nil, codec.Counter{Start: t0, Count: 1, Previous: 2}), "sliding_counter", "window_start(start)=1700000000000000000 count(count)=1 previous(previous)=2"},
		{codec.AppendGCRA(nil, codec.GCRA{TAT: t0, Interval: 1e9}), "gcra", "tat(tat)=1700000000000000000"},
		{codec.AppendLogTable(nil, []int64{t0, t0 + 1e9, t0 + 3e9}), "sliding_log", "entries(entries)=3 oldest(oldest)=1700000000000000000 newest(newest)=1700000003000000000"},
	} {
		name, fields, err := codec.Describe(c.rec)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		got := ""
		for i, f := range fields {
			if i > 0 {
				got += " "
			}
			got += fmt.Sprintf("%s(%s)=%d", f.Name, f.Label, f.Value)
		}
		if name != c.name || got != c.want {
			t.Errorf("Describe(%x) = %s %s, want %s %s", c.rec, name, got, c.name, c.want)
		}
	}
	if _, _, err := codec.Describe(nil); !errors.Is(err, codec.ErrTruncated) {
		t.Errorf("no record: %v", err)
	}
	if name, _, err := codec.Describe([]byte{0x31, 0}); name != "token_bucket" || !errors.Is(err, codec.ErrVersion) {
		t.Errorf("a version from the future: %q, %v; want the name and ErrVersion", name, err)
	}
	if name, _, err := codec.Describe([]byte{0x1f}); name != "" || err == nil {
		t.Errorf("an unknown tag: %q, %v", name, err)
	}
}

// Any bytes are described or refused without a panic, and described
// exactly when Valid says the record is whole.
func FuzzDescribe(f *testing.F) {
	f.Add(codec.AppendTokenBucket(nil, codec.TokenBucket{Updated: 1, Spent: 1}))
	f.Add(codec.AppendLogTable(nil, []int64{1, 2, 3}))
	f.Add(codec.AppendGCRA(nil, codec.GCRA{TAT: 5, Interval: 1}))
	f.Add([]byte{0x1f, 0xee})
	f.Fuzz(func(t *testing.T, rec []byte) {
		_, _, err := codec.Describe(rec)
		if (err == nil) != codec.Valid(rec) {
			t.Fatalf("Describe(%x): %v, Valid %v", rec, err, codec.Valid(rec))
		}
	})
}
