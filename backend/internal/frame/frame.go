// Package frame is the stored form of one record in the durable stores
// (backend/bolt and backend/pebble): the record's expiry, Unix nanoseconds
// as an int64 big-endian, then the record's bytes.
//
//	+-----------------------+----------------+
//	| expiresAt (8 bytes)   | record         |
//	+-----------------------+----------------+
//
// An expiry of zero or less means never. A stored value shorter than the
// header is corrupt: it reads as absent, a sweep removes it, and Range
// lists it with ExpiresAt 0 and its raw bytes. Nothing here panics on any
// input.
package frame

import (
	"encoding/binary"

	"github.com/sluice-go/sluice/backend"
)

// HeaderLen is the length of the expiry before the record.
const HeaderLen = 8

// Expired reports whether a record expiring at expiresAt is expired at now.
func Expired(expiresAt, now int64) bool { return expiresAt > 0 && expiresAt <= now }

// Decode splits a stored value into its expiry and record; ok is false for a
// corrupt value. rec aliases v.
func Decode(v []byte) (expiresAt int64, rec []byte, ok bool) {
	if len(v) < HeaderLen {
		return 0, nil, false
	}
	return int64(binary.BigEndian.Uint64(v)), v[HeaderLen:], true
}

// Dead reports whether the stored value v is corrupt or expired at now:
// what a sweep removes.
func Dead(v []byte, now int64) bool {
	exp, _, ok := Decode(v)
	return !ok || Expired(exp, now)
}

// Live returns a copy of the record in the stored value v and its expiry,
// or nil when v is corrupt or expired at now.
func Live(v []byte, now int64) (rec []byte, expiresAt int64) {
	exp, r, ok := Decode(v)
	if !ok || Expired(exp, now) {
		return nil, 0
	}
	return append(make([]byte, 0, len(r)), r...), exp
}

// Append appends the stored form of rec, expiring at expiresAt, to dst.
func Append(dst, rec []byte, expiresAt int64) []byte {
	dst = binary.BigEndian.AppendUint64(dst, uint64(expiresAt))
	return append(dst, rec...)
}

// Put writes the stored form of rec, expiring at expiresAt, into dst, which
// must be HeaderLen+len(rec) bytes long (as a store's deferred write
// provides).
func Put(dst, rec []byte, expiresAt int64) {
	binary.BigEndian.PutUint64(dst, uint64(expiresAt))
	copy(dst[HeaderLen:], rec)
}

// Record copies the key and the stored value v out into one allocation, as
// Range lists them: a corrupt value is listed with ExpiresAt 0 and its raw
// bytes as Value.
func Record(key, v []byte) backend.Record {
	exp, rec, ok := Decode(v)
	if !ok {
		exp, rec = 0, v
	}
	kv := append(append(make([]byte, 0, len(key)+len(rec)), key...), rec...)
	return backend.Record{Key: kv[:len(key):len(key)], Value: kv[len(key):], ExpiresAt: exp}
}
