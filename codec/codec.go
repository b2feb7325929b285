package codec

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Version is the first layout version, which every tag has. A tag whose
// layout or meaning changed since is written at a later version (see
// Latest), and its earlier versions are still read.
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
	TagConcurrency    Tag = 7
)

// layout is what the codec knows about one tag: its name, the version this
// release writes, and a check that a record of the tag, of any version this
// release reads, is whole and valid.
type layout struct {
	name     string
	latest   int
	valid    func([]byte) error
	describe func([]byte) ([]Field, error) // the fields, for Describe
}

// layouts is the one table of tags. Adding an algorithm adds a row here
// (and its layout below); adding a version bumps latest and teaches valid
// and describe the new layout.
var layouts = [16]layout{
	TagTokenBucket:    {"token_bucket", 2, validTokenBucket, describeTokenBucket},
	TagLeakyBucket:    {"leaky_bucket", 1, func(b []byte) error { _, err := DecodeBucket(b, TagLeakyBucket); return err }, describeLeakyBucket},
	TagFixedWindow:    {"fixed_window", 1, func(b []byte) error { _, err := DecodeWindow(b); return err }, describeWindow},
	TagSlidingLog:     {"sliding_log", 4, func(b []byte) error { _, err := DecodeLog(b); return err }, describeLog},
	TagSlidingCounter: {"sliding_counter", 1, func(b []byte) error { _, err := DecodeCounter(b); return err }, describeCounter},
	TagGCRA:           {"gcra", 2, func(b []byte) error { _, err := DecodeGCRA(b); return err }, describeGCRA},
	TagConcurrency:    {"concurrency", 1, func(b []byte) error { _, err := ReadLeases(b); return err }, describeLeases},
}

// String returns the algorithm name the tag stands for.
func (t Tag) String() string {
	if int(t) < len(layouts) && layouts[t].name != "" {
		return layouts[t].name
	}
	return fmt.Sprintf("tag(%d)", uint8(t))
}

// Latest returns the layout version this release writes for records of tag
// t, and 0 for a tag it does not know. Every version of the tag from Version
// to Latest is read (the sliding log has no version 3).
func Latest(t Tag) int {
	if int(t) < len(layouts) {
		return layouts[t].latest
	}
	return 0
}

// Record sizes of the fixed-size layouts.
const (
	// GCRASize is the size of a GCRA record of version 1; one of version 2
	// is 10 to 18 bytes (see AppendGCRA).
	GCRASize    = 9
	BucketSize  = 17
	WindowSize  = 17
	CounterSize = 25
	// LogHeaderSize is the size of a sliding log holding one entry, as
	// this release writes it (version 2).
	LogHeaderSize = 9
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

func header(v int, t Tag) byte { return byte(v)<<4 | byte(t) }

// Header splits a record's first byte into version and tag.
func Header(record []byte) (version int, tag Tag, err error) {
	if len(record) == 0 {
		return 0, 0, ErrTruncated
	}
	return int(record[0] >> 4), Tag(record[0] & 0x0f), nil
}

// Valid reports whether record is a whole, valid record of any algorithm,
// of any version this release reads, checked by the decoder its own header
// names. A step that finds another algorithm's valid record under its key
// (a rule whose algorithm changed) starts fresh without calling it corrupt.
func Valid(record []byte) bool {
	_, t, err := Header(record)
	if err != nil || layouts[t].valid == nil {
		return false
	}
	return layouts[t].valid(record) == nil
}

// check verifies a fixed-size record's header and length.
func check(src []byte, v int, t Tag, size int) error {
	if len(src) == 0 {
		return ErrTruncated // no record: the common case, so no formatting
	}
	if got := Tag(src[0] & 0x0f); got != t {
		return fmt.Errorf("%w: %s record read as %s", ErrTag, got, t)
	}
	if got := int(src[0] >> 4); got != v {
		return fmt.Errorf("%w: %d (%s version %d read)", ErrVersion, got, t, v)
	}
	if len(src) < size {
		return fmt.Errorf("%w: %s needs %d bytes, have %d", ErrTruncated, t, size, len(src))
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
// arrival time of the next request, and the emission interval (nanoseconds
// per token) the TAT was counted in, so that a rule whose rate changed can
// carry the tokens spent over into its own interval. Interval is zero for a
// version 1 record, which does not say.
type GCRA struct {
	TAT      int64
	Interval int64
}

const (
	gcraV1 = 0x16 // header(1, TagGCRA)
	gcraV2 = 0x26 // header(2, TagGCRA)
)

// AppendGCRA encodes s into dst's backing array when it is large enough, or
// a new one, and returns the record: version 2 (9 bytes and the interval as
// a uvarint, 10 to 18 bytes) when s.Interval is positive, version 1 (9
// bytes, no interval) when it is zero.
func AppendGCRA(dst []byte, s GCRA) []byte {
	if s.Interval <= 0 {
		b := grow(dst, GCRASize)
		b[0] = gcraV1
		put64(b[1:], s.TAT)
		return b
	}
	n := GCRASize + uvarintLen(uint64(s.Interval))
	b := grow(dst, n)
	b[0] = gcraV2
	put64(b[1:], s.TAT)
	putUvarint(b[GCRASize:], uint64(s.Interval))
	return b
}

// GCRAFormat is the version 2 layout of GCRA records counted in one
// interval, worked out once, so that a step can read and rewrite a record
// in that interval without decoding or encoding its uvarint: Read compares
// the record's length, header and interval bytes with the format's in a few
// instructions. Read and Append give exactly what DecodeGCRA and AppendGCRA
// give for such records. The zero value matches no record.
type GCRAFormat struct {
	size int    // the record's length; 0 when the format cannot be read fast
	mask uint64 // the bits of the record's last 8 bytes, read little-endian, that hold the interval
	tail uint64 // those bits' value
}

// NewGCRAFormat returns the format of version 2 records counted in
// interval, which must be positive. An interval of 2^56 ns or more, whose
// uvarint takes 9 bytes, gives a format whose Read always reports false
// (such records are read with DecodeGCRA) and whose Append is AppendGCRA.
func NewGCRAFormat(interval int64) GCRAFormat {
	if interval <= 0 {
		return GCRAFormat{}
	}
	n := uvarintLen(uint64(interval))
	if n > 8 {
		return GCRAFormat{size: -1, tail: uint64(interval)}
	}
	var b [8]byte
	putUvarint(b[8-n:], uint64(interval))
	return GCRAFormat{
		size: GCRASize + n,
		mask: ^uint64(0) << (8 * (8 - n)),
		tail: binary.LittleEndian.Uint64(b[:]),
	}
}

// Read returns the TAT of src and true when src is a whole version 2 GCRA
// record counted in f's interval; otherwise it returns false, and src is to
// be read with DecodeGCRA.
func (f *GCRAFormat) Read(src []byte) (int64, bool) {
	n := f.size
	if n <= 0 || len(src) != n || src[0] != gcraV2 ||
		binary.LittleEndian.Uint64(src[n-8:])&f.mask != f.tail {
		return 0, false
	}
	return i64(src[1:]), true
}

// Append encodes the version 2 record of TAT tat in f's interval into
// dst's backing array when it is large enough, or a new one, and returns
// it: what AppendGCRA(dst, GCRA{tat, interval}) returns.
func (f *GCRAFormat) Append(dst []byte, tat int64) []byte {
	n := f.size
	if n <= 0 {
		return AppendGCRA(dst, GCRA{TAT: tat, Interval: int64(f.tail)})
	}
	b := grow(dst, n)
	b[0] = gcraV2
	put64(b[1:], tat)
	// The interval's bytes end the record; the last 8 bytes hold them and
	// the TAT's low bytes just written.
	t := b[n-8:]
	binary.LittleEndian.PutUint64(t, binary.LittleEndian.Uint64(t)&^f.mask|f.tail)
	return b
}

// Put rewrites, in place, the TAT of a record that Read accepted: the
// record's interval bytes are already f's.
func (f *GCRAFormat) Put(record []byte, tat int64) { put64(record[1:], tat) }

// DecodeGCRA decodes a GCRA record of either version. A version 2 interval
// must be positive and written in as few bytes as it takes.
func DecodeGCRA(src []byte) (GCRA, error) {
	if len(src) > GCRASize && src[0] == gcraV2 {
		v, n := binary.Uvarint(src[GCRASize:])
		switch {
		case n <= 0:
			return GCRA{}, fmt.Errorf("%w: gcra interval", ErrTruncated)
		case GCRASize+n != len(src):
			return GCRA{}, fmt.Errorf("%w: gcra is %d bytes, have %d", ErrTrailing, GCRASize+n, len(src))
		case v == 0 || v > 1<<63-1 || n != uvarintLen(v):
			return GCRA{}, fmt.Errorf("%w: gcra interval %d in %d bytes", ErrInvalid, v, n)
		}
		return GCRA{TAT: i64(src[1:]), Interval: int64(v)}, nil
	}
	if len(src) > 0 && src[0] == gcraV2 {
		return GCRA{}, fmt.Errorf("%w: gcra version 2 needs %d bytes, have %d", ErrTruncated, GCRASize+1, len(src))
	}
	if err := check(src, 1, TagGCRA, GCRASize); err != nil {
		return GCRA{}, err
	}
	return GCRA{TAT: i64(src[1:])}, nil
}

func uvarintLen(v uint64) int {
	n := 1
	for v >= 0x80 {
		v >>= 7
		n++
	}
	return n
}

// putUvarint writes v into b, which holds exactly uvarintLen(v) bytes.
func putUvarint(b []byte, v uint64) {
	i := 0
	for v >= 0x80 {
		b[i] = byte(v) | 0x80
		v >>= 7
		i++
	}
	b[i] = byte(v)
}

// TokenBucket is the state of a token bucket, version 2: the nano-tokens
// spent and not yet refilled as of Updated. Keeping what was spent, rather
// than what is left, is what lets a rule whose capacity changed keep each
// caller's spending: under a capacity c the bucket holds c·1e9 - Spent.
type TokenBucket struct {
	Updated int64
	Spent   int64
}

const (
	tokenV1 = 0x11 // header(1, TagTokenBucket)
	tokenV2 = 0x21 // header(2, TagTokenBucket)
)

// AppendTokenBucket encodes a version 2 token bucket into dst's backing
// array when it is large enough.
func AppendTokenBucket(dst []byte, s TokenBucket) []byte {
	b := grow(dst, BucketSize)
	b[0] = tokenV2
	put64(b[1:], s.Updated)
	put64(b[9:], s.Spent)
	return b
}

// DecodeTokenBucket decodes a version 2 token bucket. Spent must not be
// negative. A version 1 record (tokens left, read with DecodeBucket) gives
// ErrVersion.
func DecodeTokenBucket(src []byte) (TokenBucket, error) {
	// A whole version 2 record, the common case, is read without a call.
	if len(src) == BucketSize && src[0] == tokenV2 {
		if s := (TokenBucket{Updated: i64(src[1:]), Spent: i64(src[9:])}); s.Spent >= 0 {
			return s, nil
		}
	}
	return decodeTokenBucket(src)
}

func decodeTokenBucket(src []byte) (TokenBucket, error) {
	if err := check(src, 2, TagTokenBucket, BucketSize); err != nil {
		return TokenBucket{}, err
	}
	s := TokenBucket{Updated: i64(src[1:]), Spent: i64(src[9:])}
	if s.Spent < 0 {
		return TokenBucket{}, fmt.Errorf("%w: token_bucket spent %d", ErrInvalid, s.Spent)
	}
	return s, nil
}

// ReadTokenBucket returns the state of src and true when src is a whole
// version 2 token bucket, the common case, in a few instructions a caller
// inlines; otherwise false, and src is to be read with DecodeTokenBucket.
func ReadTokenBucket(src []byte) (TokenBucket, bool) {
	if len(src) != BucketSize || src[0] != tokenV2 {
		return TokenBucket{}, false
	}
	s := TokenBucket{Updated: i64(src[1:]), Spent: i64(src[9:])}
	return s, s.Spent >= 0
}

// IsTokenBucketV1 reports whether src is a whole version 1 token bucket
// record (read it with DecodeBucket).
func IsTokenBucketV1(src []byte) bool { return len(src) == BucketSize && src[0] == tokenV1 }

func validTokenBucket(src []byte) error {
	if IsTokenBucketV1(src) {
		_, err := DecodeBucket(src, TagTokenBucket)
		return err
	}
	_, err := DecodeTokenBucket(src)
	return err
}

// Bucket is the state of a leaky bucket (Level is the work queued), or of a
// version 1 token bucket (Level is the tokens left), both in nano-tokens.
type Bucket struct {
	Updated int64
	Level   int64
}

// AppendBucket encodes a bucket under tag t (TagLeakyBucket, or
// TagTokenBucket for a version 1 token bucket) into dst's backing array
// when it is large enough.
func AppendBucket(dst []byte, t Tag, s Bucket) []byte {
	b := grow(dst, BucketSize)
	b[0] = header(1, t)
	put64(b[1:], s.Updated)
	put64(b[9:], s.Level)
	return b
}

// DecodeBucket decodes a version 1 bucket record carrying tag t. The level
// must not be negative.
func DecodeBucket(src []byte, t Tag) (Bucket, error) {
	if err := check(src, 1, t, BucketSize); err != nil {
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
	b[0] = header(1, TagFixedWindow)
	put64(b[1:], s.Start)
	put64(b[9:], s.Count)
	return b
}

// DecodeWindow decodes a fixed-window record. The count must not be negative.
func DecodeWindow(src []byte) (Window, error) {
	if err := check(src, 1, TagFixedWindow, WindowSize); err != nil {
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
	b[0] = header(1, TagSlidingCounter)
	put64(b[1:], s.Start)
	put64(b[9:], s.Count)
	put64(b[17:], s.Previous)
	return b
}

// DecodeCounter decodes a sliding-counter record. Neither count may be
// negative.
func DecodeCounter(src []byte) (Counter, error) {
	if err := check(src, 1, TagSlidingCounter, CounterSize); err != nil {
		return Counter{}, err
	}
	s := Counter{Start: i64(src[1:]), Count: i64(src[9:]), Previous: i64(src[17:])}
	if s.Count < 0 || s.Previous < 0 {
		return Counter{}, fmt.Errorf("%w: sliding_counter counts %d, %d", ErrInvalid, s.Count, s.Previous)
	}
	return s, nil
}
