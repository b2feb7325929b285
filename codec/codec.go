package codec

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// Version is the layout version written into every record's header byte.
const Version = 1

// Tag identifies the algorithm a record belongs to.
type Tag uint8

// The algorithm tags. Values are stable: they are stored on disk.
const (
	TagTokenBucket    Tag = 1
	TagLeakyBucket    Tag = 2
	TagFixedWindow    Tag = 3
	TagSlidingLog     Tag = 4
	TagSlidingCounter Tag = 5
	TagGCRA           Tag = 6
)

// String returns the algorithm name the tag stands for.
func (t Tag) String() string {
	switch t {
	case TagTokenBucket:
		return "token_bucket"
	case TagLeakyBucket:
		return "leaky_bucket"
	case TagFixedWindow:
		return "fixed_window"
	case TagSlidingLog:
		return "sliding_log"
	case TagSlidingCounter:
		return "sliding_counter"
	case TagGCRA:
		return "gcra"
	}
	return fmt.Sprintf("tag(%d)", uint8(t))
}

// Record sizes of the fixed-size layouts.
const (
	GCRASize    = 9
	BucketSize  = 17
	WindowSize  = 17
	CounterSize = 25
	// LogHeaderSize is the size of a sliding log holding one entry.
	LogHeaderSize = 10
)

// Errors returned by the decoders, wrapped with detail.
var (
	// ErrTruncated is returned when a record is shorter than its layout.
	ErrTruncated = errors.New("sluice/codec: truncated record")
	// ErrTrailing is returned when a fixed-size record has extra bytes.
	ErrTrailing = errors.New("sluice/codec: trailing bytes")
	// ErrVersion is returned for a header carrying an unknown version.
	ErrVersion = errors.New("sluice/codec: unknown version")
	// ErrTag is returned when a record belongs to another algorithm.
	ErrTag = errors.New("sluice/codec: wrong algorithm tag")
	// ErrInvalid is returned when a record's fields are out of range.
	ErrInvalid = errors.New("sluice/codec: invalid field")
)

func header(t Tag) byte { return Version<<4 | byte(t) }

// Header splits a record's first byte into version and tag.
func Header(record []byte) (version int, tag Tag, err error) {
	if len(record) == 0 {
		return 0, 0, ErrTruncated
	}
	return int(record[0] >> 4), Tag(record[0] & 0x0f), nil
}

// Valid reports whether record is a whole, valid record of any algorithm,
// read by the decoder its own header names. A step that finds another
// algorithm's valid record under its key (a rule whose algorithm changed)
// starts fresh without calling it corrupt.
func Valid(record []byte) bool {
	_, t, err := Header(record)
	if err != nil {
		return false
	}
	switch t {
	case TagTokenBucket, TagLeakyBucket:
		_, err = DecodeBucket(record, t)
	case TagFixedWindow:
		_, err = DecodeWindow(record)
	case TagSlidingLog:
		_, err = DecodeLog(record)
	case TagSlidingCounter:
		_, err = DecodeCounter(record)
	case TagGCRA:
		_, err = DecodeGCRA(record)
	default:
		return false
	}
	return err == nil
}

func check(src []byte, t Tag, size int) error {
	if len(src) == 0 {
		return ErrTruncated // no record: the common case, so no formatting
	}
	if len(src) < size {
		return fmt.Errorf("%w: %s needs %d bytes, have %d", ErrTruncated, t, size, len(src))
	}
	if v := src[0] >> 4; v != Version {
		return fmt.Errorf("%w: %d", ErrVersion, v)
	}
	if got := Tag(src[0] & 0x0f); got != t {
		return fmt.Errorf("%w: %s record read as %s", ErrTag, got, t)
	}
	if len(src) > size {
		return fmt.Errorf("%w: %s is %d bytes, have %d", ErrTrailing, t, size, len(src))
	}
	return nil
}

// grow returns dst resized to n bytes, reusing its backing array when it is
// large enough. That is what lets a step rewrite a record in place.
func grow(dst []byte, n int) []byte {
	if cap(dst) >= n {
		return dst[:n]
	}
	return make([]byte, n)
}

func i64(b []byte) int64      { return int64(binary.BigEndian.Uint64(b)) }
func put64(b []byte, v int64) { binary.BigEndian.PutUint64(b, uint64(v)) }

// GCRA is the state of the generic cell rate algorithm: the theoretical
// arrival time of the next request.
type GCRA struct {
	TAT int64
}

// AppendGCRA encodes s into dst's backing array when it is large enough, or
// a new one, and returns the record.
func AppendGCRA(dst []byte, s GCRA) []byte {
	b := grow(dst, GCRASize)
	b[0] = header(TagGCRA)
	put64(b[1:], s.TAT)
	return b
}

// DecodeGCRA decodes a GCRA record.
func DecodeGCRA(src []byte) (GCRA, error) {
	if err := check(src, TagGCRA, GCRASize); err != nil {
		return GCRA{}, err
	}
	return GCRA{TAT: i64(src[1:])}, nil
}

// Bucket is the state of a token bucket (Level is the tokens left) or a
// leaky bucket (Level is the work queued), both in nano-tokens.
type Bucket struct {
	Updated int64
	Level   int64
}

// AppendBucket encodes a bucket under tag t (TagTokenBucket or
// TagLeakyBucket) into dst's backing array when it is large enough.
func AppendBucket(dst []byte, t Tag, s Bucket) []byte {
	b := grow(dst, BucketSize)
	b[0] = header(t)
	put64(b[1:], s.Updated)
	put64(b[9:], s.Level)
	return b
}

// DecodeBucket decodes a bucket record carrying tag t. The level must not be
// negative.
func DecodeBucket(src []byte, t Tag) (Bucket, error) {
	if err := check(src, t, BucketSize); err != nil {
		return Bucket{}, err
	}
	s := Bucket{Updated: i64(src[1:]), Level: i64(src[9:])}
	if s.Level < 0 {
		return Bucket{}, fmt.Errorf("%w: %s level %d", ErrInvalid, t, s.Level)
	}
	return s, nil
}

// Window is the state of a fixed window: the aligned start of the current
// window and the cost admitted in it.
type Window struct {
	Start int64
	Count int64
}

// AppendWindow encodes a fixed window into dst's backing array when it is
// large enough.
func AppendWindow(dst []byte, s Window) []byte {
	b := grow(dst, WindowSize)
	b[0] = header(TagFixedWindow)
	put64(b[1:], s.Start)
	put64(b[9:], s.Count)
	return b
}

// DecodeWindow decodes a fixed-window record. The count must not be negative.
func DecodeWindow(src []byte) (Window, error) {
	if err := check(src, TagFixedWindow, WindowSize); err != nil {
		return Window{}, err
	}
	s := Window{Start: i64(src[1:]), Count: i64(src[9:])}
	if s.Count < 0 {
		return Window{}, fmt.Errorf("%w: fixed_window count %d", ErrInvalid, s.Count)
	}
	return s, nil
}

// Counter is the state of a sliding window counter: the current window's
// start and count, and the count of the window before it.
type Counter struct {
	Start    int64
	Count    int64
	Previous int64
}

// AppendCounter encodes a sliding counter into dst's backing array when it is
// large enough.
func AppendCounter(dst []byte, s Counter) []byte {
	b := grow(dst, CounterSize)
	b[0] = header(TagSlidingCounter)
	put64(b[1:], s.Start)
	put64(b[9:], s.Count)
	put64(b[17:], s.Previous)
	return b
}

// DecodeCounter decodes a sliding-counter record. Neither count may be
// negative.
func DecodeCounter(src []byte) (Counter, error) {
	if err := check(src, TagSlidingCounter, CounterSize); err != nil {
		return Counter{}, err
	}
	s := Counter{Start: i64(src[1:]), Count: i64(src[9:]), Previous: i64(src[17:])}
	if s.Count < 0 || s.Previous < 0 {
		return Counter{}, fmt.Errorf("%w: sliding_counter counts %d, %d", ErrInvalid, s.Count, s.Previous)
	}
	return s, nil
}

// LogShift returns the delta shift a sliding log uses for a window of w
// nanoseconds: the smallest shift at which a whole window, rounded up, fits in
// a three-byte uvarint (21 bits). Entry times are kept at a resolution of
// 1<<shift nanoseconds, under half a millionth of the window, rounded up so
// that an entry never ages out earlier than it really would.
func LogShift(w int64) uint8 {
	var s uint8
	for s < 62 && (w-1)>>s >= 1<<21-1 {
		s++
	}
	return s
}

// Log is a decoded view of a sliding-log record: the oldest entry, the delta
// shift, and the encoded deltas that follow. It aliases the record's bytes.
type Log struct {
	Oldest int64
	Shift  uint8
	// Deltas holds one uvarint per entry after the oldest.
	Deltas []byte
	// Len is the number of entries, Newest the time of the last one.
	Len    int
	Newest int64
}

// maxLogShift bounds the shift so that a delta never overflows.
const maxLogShift = 62

// DecodeLog validates a sliding-log record and returns its view. Every delta
// is checked, so the entries can then be walked without further error checks.
func DecodeLog(src []byte) (Log, error) {
	if len(src) == 0 {
		return Log{}, ErrTruncated
	}
	if len(src) < LogHeaderSize {
		return Log{}, fmt.Errorf("%w: sliding_log needs %d bytes, have %d", ErrTruncated, LogHeaderSize, len(src))
	}
	if v := src[0] >> 4; v != Version {
		return Log{}, fmt.Errorf("%w: %d", ErrVersion, v)
	}
	if got := Tag(src[0] & 0x0f); got != TagSlidingLog {
		return Log{}, fmt.Errorf("%w: %s record read as sliding_log", ErrTag, got)
	}
	l := Log{Oldest: i64(src[1:]), Shift: src[9], Deltas: src[LogHeaderSize:], Len: 1}
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

// LogIter walks the entries of a validated Log, oldest first.
type LogIter struct {
	rest  []byte
	t     int64
	shift uint8
	first bool
}

// Iter returns an iterator over the log's entries.
func (l Log) Iter() LogIter {
	return LogIter{rest: l.Deltas, t: l.Oldest, shift: l.Shift, first: true}
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
	d, n := binary.Uvarint(it.rest)
	it.rest = it.rest[n:]
	it.t += int64(d << it.shift)
	return it.t, true
}

// Rest returns the encoded deltas not yet walked: the entries after the one
// Next returned last.
func (it *LogIter) Rest() []byte { return it.rest }

// LogWriter builds a sliding-log record entry by entry, rounding each entry
// up to the log's resolution.
type LogWriter struct {
	buf   []byte
	last  int64
	shift uint8
}

// NewLogWriter starts a record whose oldest entry is at first, with the given
// delta shift, in buf's backing array (pass nil for a new one).
func NewLogWriter(buf []byte, first int64, shift uint8) LogWriter {
	b := append(buf[:0], header(TagSlidingLog), 0, 0, 0, 0, 0, 0, 0, 0, shift)
	put64(b[1:], first)
	return LogWriter{buf: b, last: first, shift: shift}
}

// Add appends an entry at t. An entry earlier than the last one, or within
// the resolution after it, is stored at the resolution step at or after t, so
// stored times never precede the real ones.
func (w *LogWriter) Add(t int64) {
	var d uint64
	if t > w.last {
		diff := uint64(t - w.last) // exact even when t-last overflows int64
		d = diff >> w.shift
		if diff&(1<<w.shift-1) != 0 {
			d++
		}
		// Rounding up must not carry the entry past the largest time a
		// record can hold (DecodeLog refuses it); only an entry within one
		// step of math.MaxInt64, or 2^63 ns after the previous one, is
		// affected, and it is stored at the last step that fits.
		d = min(d, uint64(math.MaxInt64-w.last)>>w.shift, math.MaxInt64>>w.shift)
	}
	w.buf = binary.AppendUvarint(w.buf, d)
	w.last += int64(d << w.shift)
}

// AddRaw appends deltas already encoded at this writer's shift (such as
// LogIter.Rest of a record with the same shift), whose entries end at last.
func (w *LogWriter) AddRaw(deltas []byte, last int64) {
	w.buf = append(w.buf, deltas...)
	w.last = last
}

// Last returns the stored time of the newest entry.
func (w *LogWriter) Last() int64 { return w.last }

// Bytes returns the record.
func (w *LogWriter) Bytes() []byte { return w.buf }
