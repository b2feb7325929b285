package replay

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"time"
)

// The log formats.
const (
	// FormatCombined is the nginx/Apache combined format (CombinedParser).
	FormatCombined = "combined"
	// FormatJSON is JSON lines (JSONParser).
	FormatJSON = "json"
	// FormatAuto reads a file as JSON when its first non-blank byte is
	// '{', and as the combined format otherwise.
	FormatAuto = "auto"
)

// Defaults of SourceOptions' zero fields.
const (
	// DefaultReorder is the reorder window: how far out of time order a
	// log's lines may be and still be decided in order.
	DefaultReorder = 10 * time.Second
	// DefaultMaxBuffered bounds the lines held for reordering, whatever
	// their times.
	DefaultMaxBuffered = 1 << 20
	// maxLine is the longest line read; a longer one is a bad line.
	maxLine = 256 << 10
)

// SourceOptions say how a log file is read.
type SourceOptions struct {
	// Format is FormatCombined, FormatJSON or FormatAuto (the default
	// when empty).
	Format string
	// Extra names the fields after the combined format's user agent.
	Extra []Field
	// Fields maps a JSON log's keys; nil means DefaultFieldMap.
	Fields FieldMap
	// Reorder is the reorder window; zero means DefaultReorder, a
	// negative value none (lines are decided in file order, each older
	// one at the time of the newest before it).
	Reorder time.Duration
	// MaxBuffered bounds the lines held for reordering; zero means
	// DefaultMaxBuffered.
	MaxBuffered int
}

// FileStats count what was read from one file.
type FileStats struct {
	// Name is the file's name as given.
	Name string
	// Format is the format it was read as.
	Format string
	// Gzip reports a gzip-compressed file.
	Gzip bool
	// Lines counts the lines read, blank ones excepted.
	Lines int64
	// Bad counts the lines that did not parse.
	Bad int64
	// Reordered counts the lines older than one before them, decided in
	// their time order by the reorder buffer.
	Reordered int64
	// Late counts the lines older than the reorder window allowed for:
	// each was decided at the time of the last line decided before it.
	Late int64
	// MaxLate is the furthest a late line was behind that time.
	MaxLate time.Duration
	// Err is the read error that ended the file early (a truncated gzip
	// stream), or nil.
	Err error
}

// BadLine is a line that did not parse.
type BadLine struct {
	// File and Line say where it is (lines count from 1).
	File string
	Line int64
	// Err says why it did not parse, naming the field.
	Err string
	// Text is the line, cut at 200 bytes.
	Text string
}

// pending is a record held by the reorder buffer: its time, its line
// (which orders lines of one time as the file does), and where it is kept.
type pending struct {
	time, seq int64
	slot      int32
}

// pendingHeap is a min-heap of pending records by time, then line. The
// records themselves stay put in a slab; only these small items move.
type pendingHeap []pending

func (h pendingHeap) less(i, j int) bool {
	return h[i].time < h[j].time || h[i].time == h[j].time && h[i].seq < h[j].seq
}

func (h *pendingHeap) push(p pending) {
	*h = append(*h, p)
	q := *h
	for i := len(q) - 1; i > 0; {
		parent := (i - 1) / 2
		if !q.less(i, parent) {
			break
		}
		q[i], q[parent] = q[parent], q[i]
		i = parent
	}
}

func (h *pendingHeap) pop() pending {
	q := *h
	top := q[0]
	n := len(q) - 1
	q[0] = q[n]
	q = q[:n]
	for i := 0; ; {
		l, r, m := 2*i+1, 2*i+2, i
		if l < n && q.less(l, m) {
			m = l
		}
		if r < n && q.less(r, m) {
			m = r
		}
		if m == i {
			break
		}
		q[i], q[m] = q[m], q[i]
		i = m
	}
	*h = q
	return top
}

// Source reads one log file and returns its requests in time order: see
// Next.
type Source struct {
	name  string
	f     *os.File
	raw   *countingReader
	gz    *gzip.Reader
	r     *bufio.Reader
	parse func([]byte, *Record) error
	opts  SourceOptions

	stats    FileStats
	bad      []BadLine // the first maxBad
	maxBad   int
	line     int64
	heap     pendingHeap // the records held, oldest first
	slab     []Record    // where they are kept
	free     []int32     // the slab's free slots
	maxSeen  int64       // the newest time read
	released int64       // the time of the last record released
	any      bool        // a record has been released
	eof      bool
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// Open opens a log file for reading, gzip-compressed or not (told by its
// first bytes, whatever its name). keepBad is how many bad lines the
// Source keeps for BadLines.
func Open(name string, opts SourceOptions, keepBad int) (*Source, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	s, err := NewSource(name, f, opts, keepBad)
	if err != nil {
		f.Close()
		return nil, err
	}
	s.f = f
	return s, nil
}

// NewSource reads a log from r, which it does not close; name is what
// its statistics and bad lines call it.
func NewSource(name string, r io.Reader, opts SourceOptions, keepBad int) (*Source, error) {
	s := &Source{name: name, opts: opts, maxBad: keepBad, raw: &countingReader{r: r}}
	s.stats.Name = name
	if s.opts.Reorder == 0 {
		s.opts.Reorder = DefaultReorder
	}
	if s.opts.MaxBuffered <= 0 {
		s.opts.MaxBuffered = DefaultMaxBuffered
	}
	br := bufio.NewReaderSize(s.raw, 64<<10)
	if magic, _ := br.Peek(2); len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		gz, err := gzip.NewReader(br)
		if err != nil {
			return nil, fmt.Errorf("%s: gzip: %w", name, err)
		}
		s.gz = gz
		s.stats.Gzip = true
		s.r = bufio.NewReaderSize(gz, maxLine)
	} else {
		s.r = bufio.NewReaderSize(br, maxLine)
	}
	format := opts.Format
	if format == "" || format == FormatAuto {
		format = FormatCombined
		for n := 1; n <= maxLine; n *= 4 {
			head, _ := s.r.Peek(n)
			t := bytes.TrimLeft(head, " \t\r\n")
			if len(t) > 0 {
				if t[0] == '{' {
					format = FormatJSON
				}
				break
			}
			if len(head) < n {
				break
			}
		}
	}
	switch format {
	case FormatCombined:
		p := &CombinedParser{Extra: opts.Extra}
		s.parse = p.Parse
	case FormatJSON:
		m := opts.Fields
		if m == nil {
			m = DefaultFieldMap
		}
		p, err := NewJSONParser(m)
		if err != nil {
			return nil, err
		}
		s.parse = p.Parse
	default:
		return nil, fmt.Errorf("format: want %q, %q or %q, got %q", FormatCombined, FormatJSON, FormatAuto, format)
	}
	s.stats.Format = format
	return s, nil
}

// Close closes the file Open opened.
func (s *Source) Close() error {
	if s.f != nil {
		return s.f.Close()
	}
	return nil
}

// Stats returns the file's counts so far.
func (s *Source) Stats() FileStats { return s.stats }

// BadLines returns the first bad lines met, as many as Open kept.
func (s *Source) BadLines() []BadLine { return s.bad }

// BytesRead returns how many bytes of the file (compressed, for gzip)
// have been read.
func (s *Source) BytesRead() int64 { return s.raw.n }

// Next returns the next request in time order, or false at the end of the
// file. Lines are held until one at least the reorder window newer has
// been read; a line older than the last request returned is returned at
// that request's time (counted Late).
func (s *Source) Next(rec *Record) bool {
	for !s.eof && !s.ready() {
		s.readOne()
	}
	if len(s.heap) == 0 {
		return false
	}
	p := s.heap.pop()
	*rec = s.slab[p.slot]
	s.slab[p.slot] = Record{} // let the strings go
	s.free = append(s.free, p.slot)
	s.released, s.any = rec.Time, true
	return true
}

// ready reports whether the oldest line held may be released.
func (s *Source) ready() bool {
	n := len(s.heap)
	if n == 0 {
		return false
	}
	if n >= s.opts.MaxBuffered || s.opts.Reorder < 0 {
		return true
	}
	return s.maxSeen-s.heap[0].time >= int64(s.opts.Reorder)
}

// readOne reads one line into the buffer (or notes the end of the file).
func (s *Source) readOne() {
	line, err := s.r.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) {
		s.line++
		s.stats.Lines++
		s.badLine(fieldError(ErrSyntax, "line", "longer than %d bytes", maxLine), line)
		for errors.Is(err, bufio.ErrBufferFull) {
			_, err = s.r.ReadSlice('\n')
		}
		if err != nil {
			s.end(err)
		}
		return
	}
	if len(line) > 0 {
		s.line++
		s.take(line)
	}
	if err != nil {
		s.end(err)
	}
}

func (s *Source) end(err error) {
	s.eof = true
	if !errors.Is(err, io.EOF) {
		s.stats.Err = err
	}
}

// take parses one line and buffers its record.
func (s *Source) take(line []byte) {
	line = bytes.TrimRight(line, "\r\n")
	if len(bytes.TrimSpace(line)) == 0 {
		return
	}
	s.stats.Lines++
	var slot int32
	if k := len(s.free); k > 0 {
		slot, s.free = s.free[k-1], s.free[:k-1]
	} else {
		slot = int32(len(s.slab))
		s.slab = append(s.slab, Record{})
	}
	rec := &s.slab[slot]
	if err := s.parse(line, rec); err != nil {
		s.free = append(s.free, slot)
		s.badLine(err, line)
		return
	}
	switch {
	case s.any && rec.Time < s.released:
		s.stats.Late++
		s.stats.MaxLate = max(s.stats.MaxLate, time.Duration(s.released-rec.Time))
		rec.Time = s.released
	case rec.Time < s.maxSeen:
		s.stats.Reordered++
	}
	s.maxSeen = max(s.maxSeen, rec.Time)
	s.heap.push(pending{time: rec.Time, seq: s.line, slot: slot})
}

func (s *Source) badLine(err error, line []byte) {
	s.stats.Bad++
	if len(s.bad) < s.maxBad {
		text := string(line)
		if len(text) > 200 {
			text = text[:200] + "..."
		}
		s.bad = append(s.bad, BadLine{File: s.name, Line: s.line, Err: err.Error(), Text: text})
	}
}
