package codec

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"
)

// Version 4 of the sliding log keeps entry times as offsets of one fixed
// width from a base time, so that a step reads any entry at once and checks
// the entries in a loop whose iterations do not wait on one another:
// version 2's deltas, each of a length told by its first byte, must be read
// one after the other, and that chain was the whole cost of a step.
//
//	+------+------------+-------+--------------------------------------+
//	| 0x44 | base int64 | width | offset ... offset (width bytes, BE) |
//	+------+------------+-------+--------------------------------------+
//
// There is one offset per entry, the first included: entry i is at base +
// offset i. Offsets never decrease, the width is 1 to 8 bytes, and the
// newest entry's time fits in an int64. The base is a time at or before the
// oldest entry; a step that drops aged entries keeps it, and moves it to the
// oldest entry kept only when the newest offset would no longer fit the
// width, so that the entries kept are copied as they are rather than
// rewritten.
//
// The number 3 is skipped: no layout has it, and a version 3 record is
// refused as an unknown version, as earlier releases refuse it.
const (
	logV4 = 0x44 // header(4, TagSlidingLog)
	// LogTableHeaderSize is the size of a version 4 log's header: the tag
	// byte, the base and the width.
	LogTableHeaderSize = 10
)

// LogTable is a version 4 sliding log, validated by ReadLogTable. It aliases
// the record's bytes.
type LogTable struct {
	// Base is the time the offsets count from, at or before the oldest
	// entry.
	Base int64
	// Width is the size of one offset in bytes, 1 to 8.
	Width int
	// Len is the number of entries, at least 1.
	Len    int
	rec    []byte
	newest int64 // the newest entry's time
}

// offsetMask keeps the low width bytes of an 8-byte big-endian load.
func offsetMask(width int) uint64 { return ^uint64(0) >> ((64 - 8*width) & 63) }

// widthOf returns the fewest bytes, at least 1, that hold x.
func widthOf(x uint64) int { return max(1, (bits.Len64(x)+7)/8) }

// ReadLogTable validates a version 4 sliding-log record and returns it with
// the number of its entries at or before horizon (the ones aged out: they
// come first, since entries never go backwards), in one pass over the
// entries.
func ReadLogTable(src []byte, horizon int64) (LogTable, int, error) {
	if len(src) < LogTableHeaderSize+1 || src[0] != logV4 {
		if err := logHeader(src, 4, LogTableHeaderSize+1); err != nil {
			return LogTable{}, 0, err
		}
	}
	w := int(src[9])
	if w < 1 || w > 8 {
		return LogTable{}, 0, fmt.Errorf("%w: sliding_log offset width %d", ErrInvalid, w)
	}
	base := i64(src[1:])
	// Entries at or before the horizon are those whose offset is at most
	// lim; none when the horizon is before the base.
	lim, aging := uint64(horizon)-uint64(base), horizon >= base
	n, end, last, aged, ok := scanOffsets(src, w, lim, aging)
	switch {
	case end-w != len(src):
		return LogTable{}, 0, fmt.Errorf("%w: sliding_log of %d-byte offsets cut short", ErrTruncated, w)
	case !ok:
		return LogTable{}, 0, fmt.Errorf("%w: sliding_log entry before the one before it", ErrInvalid)
	case last > uint64(math.MaxInt64)-uint64(base): // MaxInt64-base, without wrapping
		return LogTable{}, 0, fmt.Errorf("%w: sliding_log newest entry overflows", ErrInvalid)
	}
	return LogTable{Base: base, Width: w, Len: n, rec: src, newest: base + int64(last)}, aged, nil
}

// scanOffsets is ReadLogTable's pass over the offsets of src, of width w:
// it returns how many there are, where the last ends, the last, how many
// are at most lim (none unless aging), and whether none is below the one
// before it. It is a function of its own so that the loop, its iterations
// independent but for the previous offset, keeps everything in registers:
// each offset is read as the 8 bytes that end it (the header lies before
// the first), masked to its width.
//
//go:noinline
func scanOffsets(src []byte, w int, lim uint64, aging bool) (n, end int, last uint64, aged int, ok bool) {
	mask := offsetMask(w)
	ok = true
	end = LogTableHeaderSize + w
	for ; end <= len(src); end += w {
		x := binary.BigEndian.Uint64(src[end-8:end]) & mask
		if x < last {
			ok = false
		}
		if aging && x <= lim {
			aged++
		}
		last = x
		n++
	}
	return n, end, last, aged, ok
}

// offset returns entry i's offset.
func (l *LogTable) offset(i int) uint64 {
	end := LogTableHeaderSize + (i+1)*l.Width
	return binary.BigEndian.Uint64(l.rec[end-8:end]) & offsetMask(l.Width)
}

// At returns entry i's time, 0 <= i < Len.
func (l *LogTable) At(i int) int64 { return l.Base + int64(l.offset(i)) }

// Newest returns the newest entry's time.
func (l *LogTable) Newest() int64 { return l.newest }

// Rewrite returns the version 4 log of l's entries from index from on
// (from may be Len: none), followed by n entries at t, which must not be
// before the newest entry kept, and n must be at least 1. It writes into
// dst's backing array when it is large enough, which may be the array of
// the record l was read from (that record is then overwritten), and whose
// bytes must otherwise not overlap it. When the base can stay, the entries
// kept are moved as they are, in one copy, and a record that drops as many
// entries as it adds keeps its length; otherwise the base moves to the
// oldest entry kept (or to t when none is) and the width shrinks or grows to
// what the offsets from it need, and a record that must grow its width is
// written into a new array.
func (l *LogTable) Rewrite(dst []byte, from, n int, t int64) []byte {
	keep := l.Len - from
	base, w := l.Base, l.Width
	var shift uint64 // subtracted from each offset kept
	if keep == 0 {
		base, w = t, 1
	} else if span := uint64(t) - uint64(base); span&^offsetMask(w) != 0 {
		shift = l.offset(from)
		base += int64(shift)
		w = widthOf(uint64(t) - uint64(base))
	}
	size := LogTableHeaderSize + w*(keep+n)
	b := dst[:0]
	if cap(dst) < size || w > l.Width && keep > 0 {
		b = make([]byte, 0, size)
	}
	b = b[:size]
	src := l.rec
	switch {
	case keep == 0:
	case shift == 0 && w == l.Width:
		copy(b[LogTableHeaderSize:], src[LogTableHeaderSize+from*w:LogTableHeaderSize+l.Len*w])
	default:
		// Forward, each entry read before its new place (at or before its
		// old one: w is at most l.Width here, or b is a new array) is
		// written.
		old, mask := l.Width, offsetMask(l.Width)
		for i := range keep {
			end := LogTableHeaderSize + (from+i+1)*old
			x := binary.BigEndian.Uint64(src[end-8:end])&mask - shift
			putOffset(b[LogTableHeaderSize+i*w:], x, w)
		}
	}
	// The new entries, each written as the 8 bytes that end it, the bytes
	// before it kept: the header lies before the first.
	x, mask := uint64(t)-uint64(base), offsetMask(w)
	for end := LogTableHeaderSize + (keep+1)*w; end <= size; end += w {
		e := b[end-8 : end]
		binary.BigEndian.PutUint64(e, binary.BigEndian.Uint64(e)&^mask|x)
	}
	b[0] = logV4
	put64(b[1:], base)
	b[9] = byte(w)
	return b
}

// NewLogTable encodes n entries, at least one, all at t, as a version 4
// log, into dst's backing array when it is large enough, or a new one.
func NewLogTable(dst []byte, n int, t int64) []byte {
	var none LogTable
	return none.Rewrite(dst, 0, n, t)
}

// putOffset writes x's low w bytes, big-endian, at the start of b.
func putOffset(b []byte, x uint64, w int) {
	_ = b[w-1]
	for i := w - 1; i >= 0; i-- {
		b[i] = byte(x)
		x >>= 8
	}
}

// AppendLogTable encodes the entries at times, in order and at least one,
// as a version 4 log based at the first, into dst's backing array when it
// is large enough, or a new one. Times before the one before them are
// written at that one's time: entries never go backwards.
func AppendLogTable(dst []byte, times []int64) []byte {
	base := times[0]
	last := base
	for _, t := range times {
		last = max(last, t)
	}
	w := widthOf(uint64(last) - uint64(base))
	size := LogTableHeaderSize + w*len(times)
	b := dst[:0]
	if cap(dst) < size {
		b = make([]byte, 0, size)
	}
	b = b[:size]
	b[0] = logV4
	put64(b[1:], base)
	b[9] = byte(w)
	prev := base
	for i, t := range times {
		prev = max(prev, t)
		putOffset(b[LogTableHeaderSize+i*w:], uint64(prev)-uint64(base), w)
	}
	return b
}
