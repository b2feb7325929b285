package frame

import (
	"bytes"
	"testing"

	"pgregory.net/rapid"
)

func TestLayout(t *testing.T) {
	got := Append([]byte("x"), []byte("rec"), 0x0102030405060708)
	if want := []byte("x\x01\x02\x03\x04\x05\x06\x07\x08rec"); !bytes.Equal(got, want) {
		t.Errorf("Append = %x, want %x", got, want)
	}
	dst := make([]byte, HeaderLen+3)
	Put(dst, []byte("rec"), 0x0102030405060708)
	if !bytes.Equal(dst, got[1:]) {
		t.Errorf("Put = %x, want %x", dst, got[1:])
	}
}

func TestExpired(t *testing.T) {
	tests := []struct {
		expiresAt, now int64
		want           bool
	}{
		{0, 1 << 62, false}, // never
		{-5, 1 << 62, false},
		{10, 9, false},
		{10, 10, true},
		{10, 11, true},
	}
	for _, tt := range tests {
		if got := Expired(tt.expiresAt, tt.now); got != tt.want {
			t.Errorf("Expired(%d, %d) = %t, want %t", tt.expiresAt, tt.now, got, tt.want)
		}
	}
}

func TestCorrupt(t *testing.T) {
	for _, v := range [][]byte{nil, {}, []byte("1234567")} {
		if _, _, ok := Decode(v); ok {
			t.Errorf("Decode(%q) ok, want corrupt", v)
		}
		if !Dead(v, 0) {
			t.Errorf("Dead(%q, 0) = false, want true for a corrupt value", v)
		}
		if rec, exp := Live(v, 0); rec != nil || exp != 0 {
			t.Errorf("Live(%q, 0) = %q, %d, want nothing", v, rec, exp)
		}
		r := Record([]byte("k"), v)
		if string(r.Key) != "k" || !bytes.Equal(r.Value, v) || r.ExpiresAt != 0 {
			t.Errorf("Record(k, %q) = %q=%q@%d, want its raw bytes at 0", v, r.Key, r.Value, r.ExpiresAt)
		}
	}
}

// A record framed and decoded again is the same record, live exactly until
// its expiry; Live and Record copy it out.
func TestRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		rec := rapid.SliceOf(rapid.Byte()).Draw(t, "rec")
		exp := rapid.Int64().Draw(t, "expiresAt")
		now := rapid.Int64().Draw(t, "now")
		v := Append(nil, rec, exp)
		gotExp, gotRec, ok := Decode(v)
		if !ok || gotExp != exp || !bytes.Equal(gotRec, rec) {
			t.Fatalf("Decode(Append(%x, %d)) = %d, %x, %t", rec, exp, gotExp, gotRec, ok)
		}
		live, liveExp := Live(v, now)
		dead := exp > 0 && exp <= now
		if Dead(v, now) != dead || (live == nil) != dead {
			t.Fatalf("at %d a record expiring at %d: Dead = %t, Live = %x, want dead=%t", now, exp, Dead(v, now), live, dead)
		}
		if !dead && (!bytes.Equal(live, rec) || liveExp != exp) {
			t.Fatalf("Live = %x, %d, want %x, %d", live, liveExp, rec, exp)
		}
		key := rapid.SliceOfN(rapid.Byte(), 1, 16).Draw(t, "key")
		r := Record(key, v)
		if !bytes.Equal(r.Key, key) || !bytes.Equal(r.Value, rec) || r.ExpiresAt != exp {
			t.Fatalf("Record = %x=%x@%d, want %x=%x@%d", r.Key, r.Value, r.ExpiresAt, key, rec, exp)
		}
		// The copies do not alias the stored bytes.
		for i := range v {
			v[i] ^= 0xff
		}
		if (!dead && !bytes.Equal(live, rec)) || !bytes.Equal(r.Value, rec) || !bytes.Equal(r.Key, key) {
			t.Fatal("Live or Record aliases the stored value")
		}
		// Appending to a Record's Key does not overwrite its Value.
		_ = append(r.Key, 0xAA)
		if !bytes.Equal(r.Value, rec) {
			t.Fatal("appending to Record's Key overwrote its Value")
		}
	})
}

// Any stored bytes decode to a record or to corrupt, never a panic, and the
// views agree with Decode.
func FuzzDecode(f *testing.F) {
	f.Add([]byte{}, int64(0))
	f.Add([]byte("1234567"), int64(1))
	f.Add(Append(nil, []byte("rec"), 10), int64(10))
	f.Fuzz(func(t *testing.T, v []byte, now int64) {
		exp, rec, ok := Decode(v)
		if ok != (len(v) >= HeaderLen) {
			t.Fatalf("Decode(%x) ok = %t with %d bytes", v, ok, len(v))
		}
		if ok && !bytes.Equal(Append(nil, rec, exp), v) {
			t.Fatalf("Append(Decode(%x)) = %x", v, Append(nil, rec, exp))
		}
		live, _ := Live(v, now)
		if Dead(v, now) == (live != nil) {
			t.Fatalf("Dead(%x, %d) = %t but Live = %x", v, now, Dead(v, now), live)
		}
		Record([]byte("k"), v)
	})
}
