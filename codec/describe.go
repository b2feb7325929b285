package codec

import "fmt"

// Field is one field of a record as Describe reads it.
type Field struct {
	// Name is the field's name in snake case ("updated_at"), Label its
	// short form for tables ("updated").
	Name, Label string
	// Kind says what Value is.
	Kind Kind
	// Value is the field's value, in Kind's unit.
	Value int64
}

// Kind is what a Field's Value counts.
type Kind uint8

// The kinds of field.
const (
	// Time is a time in Unix nanoseconds.
	Time Kind = iota + 1
	// Count is a whole number of requests or entries.
	Count
	// Amount is an amount of tokens or work in billionths: 1e9 is one.
	Amount
)

// Describe reads a record of any algorithm, of any version this release
// reads, into its fields in a stable order, and names the algorithm its
// tag stands for. The name is given with an error too when the tag is
// known (empty otherwise), so that a program listing records can say what
// a corrupt one was. It never panics, whatever bytes rec holds.
func Describe(rec []byte) (name string, fields []Field, err error) {
	version, tag, err := Header(rec)
	if err != nil {
		return "", nil, err
	}
	l := layouts[tag]
	if l.describe == nil {
		return "", nil, fmt.Errorf("sluice/codec: unknown algorithm tag %d", uint8(tag))
	}
	if version < Version || version > l.latest {
		return l.name, nil, fmt.Errorf("%w %d (this release reads %d to %d)", ErrVersion, version, Version, l.latest)
	}
	fields, err = l.describe(rec)
	return l.name, fields, err
}

func describeTokenBucket(rec []byte) ([]Field, error) {
	if v, _, _ := Header(rec); v == 1 {
		b, err := DecodeBucket(rec, TagTokenBucket)
		if err != nil {
			return nil, err
		}
		return []Field{{"level", "level", Amount, b.Level}, {"updated_at", "updated", Time, b.Updated}}, nil
	}
	b, err := DecodeTokenBucket(rec)
	if err != nil {
		return nil, err
	}
	return []Field{{"spent", "spent", Amount, b.Spent}, {"updated_at", "updated", Time, b.Updated}}, nil
}

func describeLeakyBucket(rec []byte) ([]Field, error) {
	b, err := DecodeBucket(rec, TagLeakyBucket)
	if err != nil {
		return nil, err
	}
	return []Field{{"level", "level", Amount, b.Level}, {"updated_at", "updated", Time, b.Updated}}, nil
}

func describeWindow(rec []byte) ([]Field, error) {
	w, err := DecodeWindow(rec)
	if err != nil {
		return nil, err
	}
	return []Field{{"window_start", "start", Time, w.Start}, {"count", "count", Count, w.Count}}, nil
}

func describeCounter(rec []byte) ([]Field, error) {
	c, err := DecodeCounter(rec)
	if err != nil {
		return nil, err
	}
	return []Field{{"window_start", "start", Time, c.Start}, {"count", "count", Count, c.Count}, {"previous", "previous", Count, c.Previous}}, nil
}

func describeGCRA(rec []byte) ([]Field, error) {
	g, err := DecodeGCRA(rec)
	if err != nil {
		return nil, err
	}
	return []Field{{"tat", "tat", Time, g.TAT}}, nil
}

func describeLog(rec []byte) ([]Field, error) {
	l, err := DecodeLog(rec)
	if err != nil {
		return nil, err
	}
	return []Field{{"entries", "entries", Count, int64(l.Len)}, {"oldest", "oldest", Time, l.Oldest}, {"newest", "newest", Time, l.Newest}}, nil
}
