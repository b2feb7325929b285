package codec

import "fmt"

// The record of a concurrency limit: the leases its key holds.
//
// Layout (version 1), big-endian:
//
//	byte 0        header(1, TagConcurrency)
//	bytes 1..8    last: the greatest lease id the record has issued
//	bytes 9..16   at: the time of the record's latest write, Unix
//	              nanoseconds (a clock that steps back is read as at)
//	then n times  id (8 bytes), expiry (8 bytes, Unix nanoseconds)
//
// The leases are in ascending order of id, every id at most last; a
// record of n leases is LeasesHeaderSize + n·LeaseSize bytes. An id is
// the instant the lease was taken, made unique within the record (the
// next after last when the clock has not moved past it), so a release
// names exactly one lease, and one no longer in the record (released, or
// expired and pruned) matches none.
const (
	// LeasesHeaderSize is the size of a concurrency record holding no
	// lease: its header, last and at.
	LeasesHeaderSize = 17
	// LeaseSize is the size of one lease: its id and its expiry.
	LeaseSize = 16
)

const leasesV1 = 0x17 // header(1, TagConcurrency)

// Leases is a concurrency record read in place: its methods read and
// write the bytes it was made from.
type Leases struct{ b []byte }

// ReadLeases checks that rec is a whole, valid concurrency record and
// returns it for reading in place.
func ReadLeases(rec []byte) (Leases, error) {
	if len(rec) == 0 {
		return Leases{}, ErrTruncated
	}
	if got := Tag(rec[0] & 0x0f); got != TagConcurrency {
		return Leases{}, fmt.Errorf("%w: %s record read as %s", ErrTag, got, TagConcurrency)
	}
	if got := int(rec[0] >> 4); got != 1 {
		return Leases{}, fmt.Errorf("%w: %d (%s version 1 read)", ErrVersion, got, TagConcurrency)
	}
	if len(rec) < LeasesHeaderSize {
		return Leases{}, fmt.Errorf("%w: %s needs %d bytes, have %d", ErrTruncated, TagConcurrency, LeasesHeaderSize, len(rec))
	}
	if (len(rec)-LeasesHeaderSize)%LeaseSize != 0 {
		return Leases{}, fmt.Errorf("%w: %s of %d bytes holds no whole number of leases", ErrTruncated, TagConcurrency, len(rec))
	}
	l := Leases{rec}
	last := l.Last()
	prev := int64(0)
	for i := range l.Len() {
		id := l.ID(i)
		if id > last || (i > 0 && id <= prev) {
			return Leases{}, fmt.Errorf("%w: %s lease %d has id %d (last %d, previous %d)", ErrInvalid, TagConcurrency, i, id, last, prev)
		}
		prev = id
	}
	return l, nil
}

// NewLeases writes a record holding no lease, with last and at, into
// dst's backing array when it is large enough, or a new one.
func NewLeases(dst []byte, last, at int64) Leases {
	b := grow(dst, LeasesHeaderSize)
	b[0] = leasesV1
	put64(b[1:], last)
	put64(b[9:], at)
	return Leases{b}
}

// Bytes returns the record.
func (l Leases) Bytes() []byte { return l.b }

// Len returns the number of leases.
func (l Leases) Len() int { return (len(l.b) - LeasesHeaderSize) / LeaseSize }

// Last returns the greatest id the record has issued.
func (l Leases) Last() int64 { return i64(l.b[1:]) }

// At returns the time of the record's latest write.
func (l Leases) At() int64 { return i64(l.b[9:]) }

// SetAt sets the time of the record's latest write.
func (l Leases) SetAt(at int64) { put64(l.b[9:], at) }

// ID returns the id of lease i.
func (l Leases) ID(i int) int64 { return i64(l.b[LeasesHeaderSize+i*LeaseSize:]) }

// Expiry returns the expiry of lease i.
func (l Leases) Expiry(i int) int64 { return i64(l.b[LeasesHeaderSize+i*LeaseSize+8:]) }

// SetExpiry sets the expiry of lease i, in place.
func (l Leases) SetExpiry(i int, expiry int64) { put64(l.b[LeasesHeaderSize+i*LeaseSize+8:], expiry) }

// Keep keeps only the leases for which keep returns true, in order,
// moving them down in place, and returns the record.
func (l Leases) Keep(keep func(id, expiry int64) bool) Leases {
	n := 0
	for i := range l.Len() {
		id, exp := l.ID(i), l.Expiry(i)
		if !keep(id, exp) {
			continue
		}
		if n != i {
			o := LeasesHeaderSize + n*LeaseSize
			put64(l.b[o:], id)
			put64(l.b[o+8:], exp)
		}
		n++
	}
	return Leases{l.b[:LeasesHeaderSize+n*LeaseSize]}
}

// Add appends a lease of id (greater than Last) and expiry, sets Last to
// id, and returns the record, grown in its backing array when it has room
// and copied to a new one otherwise.
func (l Leases) Add(id, expiry int64) Leases {
	var lease [LeaseSize]byte
	put64(lease[:], id)
	put64(lease[8:], expiry)
	b := append(l.b, lease[:]...)
	put64(b[1:], id)
	return Leases{b}
}

func describeLeases(rec []byte) ([]Field, error) {
	l, err := ReadLeases(rec)
	if err != nil {
		return nil, err
	}
	fields := []Field{{"leases", "leases", Count, int64(l.Len())}, {"last", "last", Time, l.Last()}}
	if n := l.Len(); n > 0 {
		latest := l.Expiry(0)
		for i := 1; i < n; i++ {
			latest = max(latest, l.Expiry(i))
		}
		fields = append(fields, Field{"expires_at", "expires", Time, latest})
	}
	return fields, nil
}
