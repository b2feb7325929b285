package codec

import (
	"encoding/binary"
	"fmt"
	"math"
)

// The sliding log's layouts. Version 1 kept entry times rounded up to a
// resolution of 1<<shift nanoseconds (a shift chosen from the window), which
// made the log deny a request exactly one window after an entry. Version 2
// keeps them to the nanosecond, as deltas of variable length. Version 4
// (logtable.go), which this release writes, keeps them to the nanosecond as
// offsets of one fixed width, which a step reads without walking a chain.
// There is no version 3.
const (
	logV1 = 0x14 // header(1, TagSlidingLog)
	logV2 = 0x24 // header(2, TagSlidingLog)
	// logV1HeaderSize is a version 1 log's oldest entry and shift byte.
	logV1HeaderSize = 10
	// maxLogShift bounds a version 1 shift so that a delta never overflows.
	maxLogShift = 62
)

// A version 2 delta is one of nine lengths, told by its first byte; the
// payload that follows is big-endian. The five-byte length takes half the
// first byte's values so that it holds 39 bits (over nine minutes): only a
// gap of 2^39 ns or more takes 6 bytes (7 from 2^40), an hour holds at most
// three such gaps' worth of excess, and the entries of a log no older than
// an hour, however spread, cost at most 10 bytes plus 5 per entry (see
// TestLogBudget).
//
//	10xxxxxx                       1 byte   d < 2^6
//	110xxxxx +1                    2 bytes  d < 2^13
//	1110xxxx +2                    3 bytes  d < 2^20
//	11110xxx +3                    4 bytes  d < 2^27
//	0xxxxxxx +4                    5 bytes  d < 2^39
//	11111kkk +5+k (k = 0..3)       6..9 bytes: 40, 48, 56, 64 bits
//
// A delta is written at the shortest length that holds it; a longer one
// does not decode, so every log has one encoding.

// minDelta is the smallest delta each encoded length may hold.
var minDelta = [10]uint64{0, 0, 1 << 6, 1 << 13, 1 << 20, 1 << 27, 1 << 39, 1 << 40, 1 << 48, 1 << 56}

// deltaLen is the encoded length of a delta by its first byte, 0 for a
// first byte that names no length.
var deltaLen = func() (l [256]uint8) {
	for c := range l {
		switch {
		case c < 0x80:
			l[c] = 5
		case c < 0xc0:
			l[c] = 1
		case c < 0xe0:
			l[c] = 2
		case c < 0xf0:
			l[c] = 3
		case c < 0xf8:
			l[c] = 4
		case c < 0xfc:
			l[c] = uint8(6 + c&0x07)
		}
	}
	return l
}()

// deltaRead holds, for each encoded length (indexed by the length, through
// a mask of 15 so that no bounds check is needed), which bits of the 8 bytes
// that end a delta, read as one big-endian integer, are its value (the
// payload's, without the bits of the first byte that tell the length, or
// without the whole first byte for the lengths 6 to 9, whose payload
// follows it), and the smallest value the length may hold.
var deltaRead = [16]struct{ mask, min uint64 }{
	1: {1<<6 - 1, 0},
	2: {1<<13 - 1, 1 << 6},
	3: {1<<20 - 1, 1 << 13},
	4: {1<<27 - 1, 1 << 20},
	5: {1<<39 - 1, 1 << 27},
	6: {1<<40 - 1, 1 << 39},
	7: {1<<48 - 1, 1 << 40},
	8: {1<<56 - 1, 1 << 48},
	9: {1<<64 - 1, 1 << 56},
}

// readDelta decodes the delta b starts with and returns it and its length,
// or a length of 0 when b is cut short and -1 when the first byte names no
// length or the delta is not written at its shortest.
func readDelta(b []byte) (uint64, int) {
	c := b[0]
	var d uint64
	n := 0
	switch {
	case c&0xc0 == 0x80:
		return uint64(c & 0x3f), 1
	case c < 0x80:
		if len(b) < 5 {
			return 0, 0
		}
		d, n = uint64(c)<<32|uint64(binary.BigEndian.Uint32(b[1:])), 5
	case c < 0xe0:
		if len(b) < 2 {
			return 0, 0
		}
		d, n = uint64(c&0x1f)<<8|uint64(b[1]), 2
	case c < 0xf0:
		if len(b) < 3 {
			return 0, 0
		}
		d, n = uint64(c&0x0f)<<16|uint64(b[1])<<8|uint64(b[2]), 3
	case c < 0xf8:
		if len(b) < 4 {
			return 0, 0
		}
		d, n = uint64(c&0x07)<<24|uint64(b[1])<<16|uint64(b[2])<<8|uint64(b[3]), 4
	default:
		k := int(c & 0x07)
		if k > 3 {
			return 0, -1
		}
		n = 6 + k
		if len(b) < n {
			return 0, 0
		}
		for _, x := range b[1:n] {
			d = d<<8 | uint64(x)
		}
	}
	if d < minDelta[n] {
		return 0, -1
	}
	return d, n
}

// appendDelta appends d at its shortest length.
func appendDelta(b []byte, d uint64) []byte {
	switch {
	case d < 1<<6:
		return append(b, 0x80|byte(d))
	case d < 1<<13:
		return append(b, 0xc0|byte(d>>8), byte(d))
	case d < 1<<20:
		return append(b, 0xe0|byte(d>>16), byte(d>>8), byte(d))
	case d < 1<<27:
		return append(b, 0xf0|byte(d>>24), byte(d>>16), byte(d>>8), byte(d))
	case d < 1<<39:
		return append(b, byte(d>>32), byte(d>>24), byte(d>>16), byte(d>>8), byte(d))
	}
	k := 0
	for k < 3 && d >= 1<<(40+8*k) {
		k++
	}
	b = append(b, 0xf8|byte(k))
	for i := 4 + k; i >= 0; i-- {
		b = append(b, byte(d>>(8*i)))
	}
	return b
}

// DeltaSize returns how many bytes a version 2 sliding log spends on an
// entry d nanoseconds after the one before it.
func DeltaSize(d uint64) int {
	var buf [9]byte
	return len(appendDelta(buf[:0], d))
}

// Log is a decoded view of a sliding-log record of any version: the oldest
// entry, the encoded entries that follow, how many entries there are and
// the newest. It aliases the record's bytes.
type Log struct {
	Oldest int64
	// Shift is a version 1 log's resolution: its deltas count units of
	// 1<<Shift nanoseconds. It is zero for versions 2 and 4, whose times
	// are nanoseconds.
	Shift uint8
	// Deltas holds, for versions 1 and 2, one encoded delta per entry after
	// the oldest; for version 4, every entry's offset from Base, Width
	// bytes each.
	Deltas []byte
	// Len is the number of entries, Newest the time of the last one.
	Len    int
	Newest int64
	// Version is the record's layout version, 1, 2 or 4.
	Version int
	// Base and Width are a version 4 log's base time and offset width
	// (both zero for the earlier versions).
	Base  int64
	Width int
}

// DecodeLog validates a sliding-log record of any version and returns its
// view. Every entry is checked, so the entries can then be walked without
// further error checks.
func DecodeLog(src []byte) (Log, error) {
	if len(src) > 0 && src[0] == logV4 {
		l, _, err := ReadLogTable(src, math.MinInt64)
		if err != nil {
			return Log{}, err
		}
		return Log{Oldest: l.At(0), Deltas: src[LogTableHeaderSize:], Len: l.Len, Newest: l.Newest(), Version: 4, Base: l.Base, Width: l.Width}, nil
	}
	if len(src) > 0 && src[0] == logV2 {
		s, err := SplitLog(src, math.MaxInt64)
		if err != nil {
			return Log{}, err
		}
		return Log{Oldest: i64(src[1:]), Deltas: src[LogHeaderSize:], Len: s.Len, Newest: s.Newest, Version: 2}, nil
	}
	if err := logHeader(src, 1, logV1HeaderSize); err != nil {
		return Log{}, err
	}
	l := Log{Oldest: i64(src[1:]), Shift: src[9], Deltas: src[logV1HeaderSize:], Len: 1, Version: 1}
	if l.Shift > maxLogShift {
		return Log{}, fmt.Errorf("%w: sliding_log shift %d", ErrInvalid, l.Shift)
	}
	t := l.Oldest
	for b := l.Deltas; len(b) > 0; {
		d, n := binary.Uvarint(b)
		if n <= 0 {
			return Log{}, fmt.Errorf("%w: sliding_log delta %d", ErrTruncated, l.Len)
		}
		// t may be negative (times before 1970), so compare against
		// MaxInt64-delta, which cannot wrap, rather than MaxInt64-t.
		if d > math.MaxInt64>>l.Shift || t > math.MaxInt64-int64(d<<l.Shift) {
			return Log{}, fmt.Errorf("%w: sliding_log entry %d overflows", ErrInvalid, l.Len)
		}
		t += int64(d << l.Shift)
		b = b[n:]
		l.Len++
	}
	l.Newest = t
	return l, nil
}

// logHeader checks a sliding log's header byte and minimum length.
func logHeader(src []byte, v, size int) error {
	if len(src) == 0 {
		return ErrTruncated
	}
	if got := Tag(src[0] & 0x0f); got != TagSlidingLog {
		return fmt.Errorf("%w: %s record read as sliding_log", ErrTag, got)
	}
	if got := int(src[0] >> 4); got != 1 && got != 2 && got != 4 {
		return fmt.Errorf("%w: %d", ErrVersion, got)
	}
	if got := int(src[0] >> 4); got != v {
		return fmt.Errorf("%w: %d (sliding_log version %d read)", ErrVersion, got, v)
	}
	if len(src) < size {
		return fmt.Errorf("%w: sliding_log needs %d bytes, have %d", ErrTruncated, size, len(src))
	}
	return nil
}

// LogSplit is a version 2 sliding log split at a moment, the horizon: the
// entries at or before it, which have aged out, and the live ones after it.
type LogSplit struct {
	// Len is the number of entries in all, Newest the time of the last.
	Len    int
	Newest int64
	// Live is the number of entries after the horizon; First is the oldest
	// of them and Rest the encoded deltas of the ones after it (both zero
	// when Live is).
	Live  int
	First int64
	Rest  []byte
}

// SplitLog validates a version 2 sliding-log record and splits it at
// horizon, in one pass over its entries. A version 1 record gives
// ErrVersion: rewrite it with MigrateLog first.
//
// The pass is the whole cost of a sliding log's step, so it is written for
// speed: each delta is read as the 8 bytes that end it, one big-endian load
// masked to its payload (the header's 9 bytes lie before the first delta),
// and its length comes from a table by its first byte. The entries after
// the first live one are only counted and checked, in a loop of their own.
func SplitLog(src []byte, horizon int64) (LogSplit, error) {
	if len(src) < LogHeaderSize || src[0] != logV2 {
		if err := logHeader(src, 2, LogHeaderSize); err != nil {
			return LogSplit{}, err
		}
	}
	t := i64(src[1:])
	// room is MaxInt64-t, computed without wrapping for negative t too:
	// a delta above it would overflow the entry's time.
	room := uint64(math.MaxInt64) - uint64(t)
	n, p := 1, LogHeaderSize
	var s LogSplit
	if t > horizon {
		s.First, s.Rest = t, src[p:]
	} else {
		// The entries that have aged out, up to the first live one.
		for p < len(src) {
			w := int(deltaLen[src[p]])
			end := p + w
			if w == 0 || end > len(src) {
				return LogSplit{}, splitError(src, p, n)
			}
			r := &deltaRead[w&15]
			d := binary.BigEndian.Uint64(src[end-8:end]) & r.mask
			if d < r.min || d > room {
				return LogSplit{}, splitError(src, p, n)
			}
			room -= d
			p = end
			n++
			if t = math.MaxInt64 - int64(room); t > horizon {
				s.First, s.Rest = t, src[p:]
				break
			}
		}
	}
	aged := n - 1
	if t <= horizon {
		aged = n
	}
	for p < len(src) {
		w := int(deltaLen[src[p]])
		end := p + w
		if w == 0 || end > len(src) {
			return LogSplit{}, splitError(src, p, n)
		}
		r := &deltaRead[w&15]
		d := binary.BigEndian.Uint64(src[end-8:end]) & r.mask
		if d < r.min || d > room {
			return LogSplit{}, splitError(src, p, n)
		}
		room -= d
		p = end
		n++
	}
	s.Len, s.Live = n, n-aged
	s.Newest = math.MaxInt64 - int64(room)
	return s, nil
}

// splitError describes why the delta at src[p], of entry n, did not read.
func splitError(src []byte, p, n int) error {
	d, w := readDelta(src[p:])
	switch {
	case w == 0:
		return fmt.Errorf("%w: sliding_log delta %d", ErrTruncated, n)
	case w < 0:
		return fmt.Errorf("%w: sliding_log delta %d is not a valid encoding", ErrInvalid, n)
	}
	return fmt.Errorf("%w: sliding_log entry %d overflows by a delta of %d", ErrInvalid, n, d)
}

// Iter returns an iterator over the live entries, from First.
func (s LogSplit) Iter() LogIter {
	return LogIter{rest: s.Rest, t: s.First, first: true}
}

// MigrateLog rewrites a valid version 1 sliding log as version 2, in a new
// array, keeping every entry at the time version 1 stored: rounded up to
// its resolution, so never earlier than the real time (the same when the
// shift was 0).
func MigrateLog(src []byte) ([]byte, error) {
	l, err := DecodeLog(src)
	if err != nil {
		return nil, err
	}
	if l.Version != 1 {
		return nil, fmt.Errorf("%w: %d (sliding_log version 1 migrated)", ErrVersion, l.Version)
	}
	it := l.Iter()
	first, _ := it.Next()
	w := NewLogWriter(make([]byte, 0, LogHeaderSize+5*(l.Len-1)), first)
	for t, ok := it.Next(); ok; t, ok = it.Next() {
		w.Add(t)
	}
	return w.Bytes(), nil
}

// LogIter walks the entries of a validated Log or LogSplit, oldest first.
type LogIter struct {
	rest  []byte
	t     int64
	shift uint8
	first bool
	v1    bool
	base  int64 // a version 4 log's base
	width int   // a version 4 log's offset width; 0 for the earlier versions
}

// Iter returns an iterator over the log's entries.
func (l Log) Iter() LogIter {
	if l.Version == 4 {
		return LogIter{rest: l.Deltas, base: l.Base, width: l.Width}
	}
	return LogIter{rest: l.Deltas, t: l.Oldest, shift: l.Shift, first: true, v1: l.Version == 1}
}

// Next returns the next entry's time, or false when there are no more.
func (it *LogIter) Next() (int64, bool) {
	if it.first {
		it.first = false
		return it.t, true
	}
	if len(it.rest) == 0 {
		return 0, false
	}
	if w := it.width; w > 0 {
		var x uint64
		for _, c := range it.rest[:w] {
			x = x<<8 | uint64(c)
		}
		it.rest = it.rest[w:]
		it.t = it.base + int64(x)
		return it.t, true
	}
	if it.v1 {
		d, n := binary.Uvarint(it.rest)
		it.rest = it.rest[n:]
		it.t += int64(d << it.shift)
		return it.t, true
	}
	d, n := readDelta(it.rest)
	it.rest = it.rest[n:]
	it.t += int64(d)
	return it.t, true
}

// Rest returns the encoded deltas not yet walked: the entries after the one
// Next returned last.
func (it *LogIter) Rest() []byte { return it.rest }

// LogWriter builds a version 2 sliding-log record entry by entry.
type LogWriter struct {
	buf  []byte
	last int64
}

// NewLogWriter starts a record whose oldest entry is at first in buf's
// backing array (pass nil for a new one).
func NewLogWriter(buf []byte, first int64) LogWriter {
	b := append(buf[:0], logV2, 0, 0, 0, 0, 0, 0, 0, 0)
	put64(b[1:], first)
	return LogWriter{buf: b, last: first}
}

// Add appends an entry at t, exactly. An entry earlier than the last one
// is stored at the last one's time: entries never go backwards.
func (w *LogWriter) Add(t int64) {
	var d uint64
	if t > w.last {
		d = uint64(t - w.last) // exact even when t-last overflows int64
	}
	w.buf = appendDelta(w.buf, d)
	w.last += int64(d)
}

// AddRaw appends deltas already encoded (such as LogSplit.Rest), whose
// entries end at last.
func (w *LogWriter) AddRaw(deltas []byte, last int64) {
	w.buf = append(w.buf, deltas...)
	w.last = last
}

// Last returns the time of the newest entry.
func (w *LogWriter) Last() int64 { return w.last }

// Bytes returns the record.
func (w *LogWriter) Bytes() []byte { return w.buf }
