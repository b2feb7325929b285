package httplimit

import (
	"bytes"
	"encoding/json"
)

// A scan for one field of a JSON object, reading no more than it must and
// building nothing: the estimate and the actual cost are each one number
// in a body that may be large. It is lenient: it finds the field in a
// document that is malformed after it. Of a key given twice, the last
// counts, as encoding/json has it.

// jsonField returns the raw value at path (object keys) in data.
func jsonField(data []byte, path []string) ([]byte, bool) {
	for _, key := range path {
		v, ok := objectField(data, key)
		if !ok {
			return nil, false
		}
		data = v
	}
	return data, true
}

// objectField returns the raw value of key in the JSON object data.
func objectField(data []byte, key string) (found []byte, ok bool) {
	i := skipSpace(data, 0)
	if i >= len(data) || data[i] != '{' {
		return nil, false
	}
	i++
	for {
		i = skipSpace(data, i)
		if i >= len(data) {
			return found, ok
		}
		if data[i] == '}' {
			return found, ok
		}
		if data[i] != '"' {
			return found, ok
		}
		end := skipString(data, i)
		if end < 0 {
			return found, ok
		}
		k := data[i+1 : end-1]
		i = skipSpace(data, end)
		if i >= len(data) || data[i] != ':' {
			return found, ok
		}
		i = skipSpace(data, i+1)
		vend := skipValue(data, i)
		if vend < 0 {
			return found, ok
		}
		if keyIs(k, key) {
			found, ok = data[i:vend], true
		}
		i = skipSpace(data, vend)
		if i >= len(data) || data[i] != ',' {
			return found, ok
		}
		i++
	}
}

// keyIs reports whether the raw string k (without its quotes) is key.
func keyIs(k []byte, key string) bool {
	if bytes.IndexByte(k, '\\') < 0 {
		return string(k) == key
	}
	var s string
	q := make([]byte, 0, len(k)+2)
	q = append(append(append(q, '"'), k...), '"')
	return json.Unmarshal(q, &s) == nil && s == key
}

// skipSpace returns the index of the first byte of data from i that is
// not JSON white space.
func skipSpace(data []byte, i int) int {
	for i < len(data) {
		switch data[i] {
		case ' ', '\t', '\r', '\n':
			i++
		default:
			return i
		}
	}
	return i
}

// skipString returns the index just past the string starting at data[i]
// (a quote), or -1 when it does not end.
func skipString(data []byte, i int) int {
	for i++; i < len(data); i++ {
		switch data[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return -1
}

// skipValue returns the index just past the value starting at data[i],
// or -1 when there is none or it does not end.
func skipValue(data []byte, i int) int {
	if i >= len(data) {
		return -1
	}
	switch data[i] {
	case '"':
		return skipString(data, i)
	case '{', '[':
		depth := 0
		for i < len(data) {
			switch data[i] {
			case '"':
				if i = skipString(data, i); i < 0 {
					return -1
				}
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
			i++
		}
		return -1
	}
	start := i
	for i < len(data) {
		switch data[i] {
		case ',', '}', ']', ' ', '\t', '\r', '\n':
			if i == start {
				return -1
			}
			return i
		}
		i++
	}
	if i == start {
		return -1
	}
	return i
}
