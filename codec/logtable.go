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
// the record's bytes. It is six words, so that ReadLogTable returns it, the
// count and the error in registers.
type LogTable struct {
	// Base is the time the offsets count from, at or before the oldest
	// entry.
	Base int64
	// Width is the size of one offset in bytes, 1 to 8.
	Width int
	// Len is the number of entries, at least 1.
	Len int
	rec []byte
}

// offsetMask keeps the low width bytes of an 8-byte big-endian load.
func offsetMask(width int) uint64 { return ^uint64(0) >> ((64 - 8*width) & 63) }

// widthOf returns the fewest bytes, at least 1, that hold x.
func widthOf(x uint64) int { return max(1, (bits.Len64(x)+7)/8) }

// ReadLogTable validates a version 4 sliding-log record and returns it with
// the number of its entries at or before horizon: the ones aged out, which
// come first, since entries never go backwards. It is Read returning the
// view.
func ReadLogTable(src []byte, horizon int64) (LogTable, int, error) {
	var l LogTable
	aged, err := l.Read(src, horizon)
	return l, aged, err
}

// Read validates src as a version 4 sliding-log record, makes l its view,
// and returns how many of its entries are at or before horizon, as
// ReadLogTable does; on an error l is left as it was.
//
// A sliding log's step reads the record with AddLog, and comes here only
// when the base must move or the array grow (Rewrite then writes the
// record anew). The whole read is scanLogTable, which calls nothing, so
// that its loop keeps everything in registers; only a record that does not
// read goes on to logTableError, which says why.
func (l *LogTable) Read(src []byte, horizon int64) (int, error) {
	base, w, n, aged, ok := scanLogTable(src, horizon)
	if !ok {
		return 0, logTableError(src)
	}
	l.Base, l.Width, l.Len, l.rec = base, w, n, src
	return aged, nil
}

// scanLogTable is Read without the error: the base, width and number of
// entries of the record src, how many are at or before horizon, and whether
// it is valid. It checks the entries in one pass that does nothing else:
// each offset is read as the 8 bytes that end it (the header's 10 bytes
// lie before the first, and len(src) >= 11), masked to its width, and
// compared with the one before it. It then counts the entries aged out
// from the oldest, which in a log kept at its limit is one or two reads.
//
//go:noinline
func scanLogTable(src []byte, horizon int64) (base int64, w, n, aged int, ok bool) {
	if len(src) < LogTableHeaderSize+1 || src[0] != logV4 {
		return 0, 0, 0, 0, false
	}
	w = int(src[9])
	if w < 1 || w > 8 {
		return 0, 0, 0, 0, false
	}
	mask := offsetMask(w)
	var last uint64
	ordered := true
	// p is where the 8 bytes that end the next offset start; stop is the
	// last place 8 bytes can start.
	first, stop := LogTableHeaderSize+w-8, len(src)-8
	p := first
	for ; p <= stop; p += w {
		x := binary.BigEndian.Uint64(src[p:]) & mask
		if x < last {
			ordered = false
		}
		last = x
		n++
	}
	base = i64(src[1:])
	// A record of whole offsets ends 8-w bytes after where the next 8
	// would start; the newest entry, base+last, must fit an int64
	// (last <= MaxInt64-base, written so that it does not wrap).
	if p != stop+w || !ordered || last > uint64(math.MaxInt64)-uint64(base) {
		return 0, 0, 0, 0, false
	}
	// Entries at or before the horizon are those whose offset is at most
	// lim; none when the horizon is before the base.
	if horizon >= base {
		lim := uint64(horizon) - uint64(base)
		for p := first; p <= stop && binary.BigEndian.Uint64(src[p:])&mask <= lim; p += w {
			aged++
		}
	}
	return base, w, n, aged, true
}

// logTableError says why src is not a valid version 4 sliding log.
func logTableError(src []byte) error {
	if err := logHeader(src, 4, LogTableHeaderSize+1); err != nil {
		return err
	}
	w := int(src[9])
	if w < 1 || w > 8 {
		return fmt.Errorf("%w: sliding_log offset width %d", ErrInvalid, w)
	}
	if (len(src)-LogTableHeaderSize)%w != 0 {
		return fmt.Errorf("%w: sliding_log of %d-byte offsets cut short", ErrTruncated, w)
	}
	var prev uint64
	for i := LogTableHeaderSize; i < len(src); i += w {
		var x uint64
		for _, c := range src[i : i+w] {
			x = x<<8 | uint64(c)
		}
		if x < prev {
			return fmt.Errorf("%w: sliding_log entry %d before the one before it", ErrInvalid, (i-LogTableHeaderSize)/w)
		}
		prev = x
	}
	return fmt.Errorf("%w: sliding_log newest entry overflows", ErrInvalid)
}

// offset returns entry i's offset.
func (l *LogTable) offset(i int) uint64 {
	end := LogTableHeaderSize + (i+1)*l.Width
	return binary.BigEndian.Uint64(l.rec[end-8:end]) & offsetMask(l.Width)
}

// At returns entry i's time, 0 <= i < Len.
func (l *LogTable) At(i int) int64 { return l.Base + int64(l.offset(i)) }

// Newest returns the newest entry's time.
func (l *LogTable) Newest() int64 { return l.Base + int64(l.offset(l.Len-1)) }

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
	w := l.Width
	x := uint64(t) - uint64(l.Base) // the new entries' offset, if the base stays
	size := LogTableHeaderSize + w*(keep+n)
	if keep == 0 || x&^offsetMask(w) != 0 || cap(dst) < size {
		return l.rebase(dst, from, n, t)
	}
	// The common case: base and width stay, and dst has room.
	b, src := dst[:size], l.rec
	if &b[0] != &src[0] {
		copy(b, src[:LogTableHeaderSize])
	}
	moveAppend(b, src[LogTableHeaderSize+from*w:LogTableHeaderSize+l.Len*w], x, w)
	return b
}

// moveAppend moves the offsets run, which lie at or after their new place
// in b's array or in another array, to the start of b's entries, and
// writes offset x, of width w, for every entry of b after them. It is a
// leaf function, so that its loops keep everything in registers: the
// offsets are moved 8 bytes at a time, forward (each word is read before
// any write reaches it), the last 8 read first; the new offsets are then
// written by putOffsets.
//
//go:noinline
func moveAppend(b, run []byte, x uint64, w int) {
	k := len(run)
	if k > 0 && len(b) >= LogTableHeaderSize+k && &run[0] != &b[LogTableHeaderSize] {
		to := b[LogTableHeaderSize : LogTableHeaderSize+k]
		if k < 8 {
			for i := range run {
				to[i] = run[i]
			}
		} else {
			last := binary.LittleEndian.Uint64(run[k-8 : k])
			for i := 0; i < k-8; i += 8 {
				binary.LittleEndian.PutUint64(to[i:i+8], binary.LittleEndian.Uint64(run[i:i+8]))
			}
			binary.LittleEndian.PutUint64(to[k-8:k], last)
		}
	}
	putOffsets(b, k/w, x, w)
}

// putOffsets writes offset x, of width w, for every entry of b after the
// first keep.
func putOffsets(b []byte, keep int, x uint64, w int) {
	for end := LogTableHeaderSize + (keep+1)*w; end <= len(b); end += w {
		putOffset(b[end-w:end], x, w)
	}
}

// rebase is Rewrite when the base or the width changes, or dst has no room:
// the base moves to the oldest entry kept (or to t when none is) when the
// newest offset would outgrow the width.
func (l *LogTable) rebase(dst []byte, from, n int, t int64) []byte {
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
	putOffsets(b, keep, uint64(t)-uint64(base), w)
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

// putOffset writes x's low w bytes, big-endian, at the start of b: it is
// putOffsetOf for a width known only at run time.
func putOffset(b []byte, x uint64, w int) {
	switch w {
	case 1:
		putOffsetOf[[1]byte](b, x)
	case 2:
		putOffsetOf[[2]byte](b, x)
	case 3:
		putOffsetOf[[3]byte](b, x)
	case 4:
		putOffsetOf[[4]byte](b, x)
	case 5:
		putOffsetOf[[5]byte](b, x)
	case 6:
		putOffsetOf[[6]byte](b, x)
	case 7:
		putOffsetOf[[7]byte](b, x)
	default:
		putOffsetOf[[8]byte](b, x)
	}
}

// putOffsetOf writes x's low len(E) bytes, big-endian, at the start of b,
// in at most three stores and without reading b: a read of bytes just
// written (by a move before it, say) would stall until they retire, since
// the processor cannot forward narrower stores into a wider load. The
// width is a constant in each instantiation, so one case remains.
func putOffsetOf[E offsetWidth](b []byte, x uint64) {
	var e E
	switch len(e) {
	case 1:
		b[0] = byte(x)
	case 2:
		binary.BigEndian.PutUint16(b, uint16(x))
	case 3:
		b[0] = byte(x >> 16)
		binary.BigEndian.PutUint16(b[1:], uint16(x))
	case 4:
		binary.BigEndian.PutUint32(b, uint32(x))
	case 5:
		b[0] = byte(x >> 32)
		binary.BigEndian.PutUint32(b[1:], uint32(x))
	case 6:
		binary.BigEndian.PutUint16(b, uint16(x>>32))
		binary.BigEndian.PutUint32(b[2:], uint32(x))
	case 7:
		b[0] = byte(x >> 48)
		binary.BigEndian.PutUint16(b[1:], uint16(x>>32))
		binary.BigEndian.PutUint32(b[3:], uint32(x))
	default:
		binary.BigEndian.PutUint64(b, x)
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

// LogResult says what AddLog did with a record.
type LogResult uint8

const (
	// LogAdded: the record was valid and the entries were added in its own
	// array; the LogRef is the record written.
	LogAdded LogResult = iota
	// LogFull: the record was valid but nothing was added, since n was
	// under 1 or the live entries leave no room for n under the limit.
	LogFull
	// LogRebase: the record was valid and had room, but the entries could
	// not be added in place: none is live, or the new offset does not fit
	// the width, or the array is too small. ReadLogTable and Rewrite add
	// them.
	LogRebase
	// LogInvalid: the record is not a valid version 4 sliding log;
	// ReadLogTable says why.
	LogInvalid
)

// LogRef is a version 4 sliding log that AddLog validated: the record's
// bytes alone (three words, returned in registers), its base and width read
// from its header when an entry is read.
type LogRef struct{ rec []byte }

// Bytes returns the record.
func (r LogRef) Bytes() []byte { return r.rec }

// At returns entry i's time, 0 <= i < the number of entries.
func (r LogRef) At(i int) int64 {
	rec := r.rec
	w := int(rec[9])
	end := LogTableHeaderSize + (i+1)*w
	return i64(rec[1:]) + int64(binary.BigEndian.Uint64(rec[end-8:end])&offsetMask(w))
}

// AddLog is a sliding log's step on a version 4 record, in one pass over
// its entries. It validates src as ReadLogTable does, counts the entries at
// or before horizon (aged, the oldest) and the live ones after it, and,
// when n is at least 1 and at most limit minus the live entries, writes in
// src's own array the record of the live entries followed by n entries at
// t, or at the newest live entry when that is later, as Rewrite(src, aged,
// n, ...) would.
//
// It returns the record (the one written when the result is LogAdded, src
// otherwise), aged, live, and a time: the entries' time when they were
// added or were to be (LogAdded, LogRebase), the newest entry's when the
// log is full (LogFull), and the result. For LogInvalid the rest is zero.
func AddLog(src []byte, horizon, limit, n, t int64) (r LogRef, aged, live int, at int64, res LogResult) {
	if len(src) < LogTableHeaderSize+1 || src[0] != logV4 {
		return LogRef{}, 0, 0, 0, LogInvalid
	}
	switch src[9] {
	case 1:
		return addLog[[1]byte](src, horizon, limit, n, t)
	case 2:
		return addLog[[2]byte](src, horizon, limit, n, t)
	case 3:
		return addLog[[3]byte](src, horizon, limit, n, t)
	case 4:
		return addLog[[4]byte](src, horizon, limit, n, t)
	case 5:
		return addLog[[5]byte](src, horizon, limit, n, t)
	case 6:
		return addLog[[6]byte](src, horizon, limit, n, t)
	case 7:
		return addLog[[7]byte](src, horizon, limit, n, t)
	case 8:
		return addLog[[8]byte](src, horizon, limit, n, t)
	}
	return LogRef{}, 0, 0, 0, LogInvalid
}

// offsetWidth is the widths an offset may take, each as the array of its
// size: addLog is compiled once for each (each array is a shape of its
// own), so that in each the width is a constant, its loops step by it and
// the compiler proves their reads in bounds.
type offsetWidth interface {
	[1]byte | [2]byte | [3]byte | [4]byte | [5]byte | [6]byte | [7]byte | [8]byte
}

// addLog is AddLog for a record of width len(E) whose tag and size are
// checked. It is the whole of the common step, written for speed: each
// offset is read as the 8 bytes that end it (the header lies before the
// first), shifted up to drop the bytes before it, which keeps the order;
// the aged entries are checked as they are counted, the live ones two at
// a time; the entries kept move in one copy.
func addLog[E offsetWidth](src []byte, horizon, limit, n, t int64) (r LogRef, aged, live int, at int64, res LogResult) {
	var e E
	w := len(e)
	up := uint(64 - 8*w)     // the shift that drops the bytes before an offset
	mask := ^uint64(0) >> up // an offset's bits
	base := i64(src[1:9])
	// p is where the 8 bytes that end the next offset start; stop is the
	// last place 8 bytes can start.
	first, stop := LogTableHeaderSize+w-8, len(src)-8
	p := first
	var last uint64 // the offset before p's, shifted up
	if horizon >= base {
		// The aged entries are those whose offset is at most lim.
		lim := ^uint64(0)
		if d := uint64(horizon) - uint64(base); d < mask {
			lim = d << up
		}
		for ; p <= stop; p += w {
			x := binary.BigEndian.Uint64(src[p:]) << up
			if x > lim {
				break
			}
			if x < last {
				return LogRef{}, 0, 0, 0, LogInvalid
			}
			last = x
		}
	}
	// The live entries, from the 8 bytes that end the first: q counts
	// from there, so that it is seen to stay in bounds.
	rest := src[p:]
	q, end := 0, len(rest)-8
	for ; q <= end-w; q += 2 * w {
		x := binary.BigEndian.Uint64(rest[q:]) << up
		y := binary.BigEndian.Uint64(rest[q+w:]) << up
		if x < last || y < x {
			return LogRef{}, 0, 0, 0, LogInvalid
		}
		last = y
	}
	if q <= end {
		x := binary.BigEndian.Uint64(rest[q:]) << up
		if x < last {
			return LogRef{}, 0, 0, 0, LogInvalid
		}
		last = x
		q += w
	}
	// A record of whole offsets ends 8-w bytes after where the next 8
	// would start; the newest entry, base+last, must fit an int64
	// (last <= MaxInt64-base, written so that it does not wrap).
	last >>= up
	if q != end+w || last > uint64(math.MaxInt64)-uint64(base) {
		return LogRef{}, 0, 0, 0, LogInvalid
	}
	aged, live = int(uint(p-first)/uint(w)), int(uint(q)/uint(w))
	newest := base + int64(last)
	if n < 1 || n > limit-int64(live) {
		return LogRef{src}, aged, live, newest, LogFull
	}
	at = t
	if live > 0 {
		at = max(t, newest)
	}
	x := uint64(at) - uint64(base) // the new entries' offset
	if live == 0 || x > mask || n > int64(cap(src)) {
		return LogRef{src}, aged, live, at, LogRebase
	}
	size := LogTableHeaderSize + w*(live+int(n))
	if size > cap(src) {
		return LogRef{src}, aged, live, at, LogRebase
	}
	b := src[:size]
	// The live entries move up to the start of the entries, in one copy;
	// each new offset is then stored as its own w bytes (putOffsetOf, at
	// this width).
	if aged > 0 {
		copy(b[LogTableHeaderSize:], src[LogTableHeaderSize+aged*w:])
	}
	for end := LogTableHeaderSize + (live+1)*w; end <= size; end += w {
		putOffsetOf[E](b[end-w:end], x)
	}
	return LogRef{b}, aged, live, at, LogAdded
}
