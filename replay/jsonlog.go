package replay

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
)

// The meanings a JSON log's keys can have, the keys of a FieldMap beside
// the Field constants they share.
const (
	// FieldTime is the request's time: RFC 3339, $time_local's layout, or
	// Unix seconds (a number or a decimal string; an integer of more than
	// ten digits is read as milliseconds, microseconds or nanoseconds).
	FieldTime Field = "time"
	// FieldMethod is the request method.
	FieldMethod Field = "method"
	// FieldPath is the request target or path ("/v1/orders?x=1").
	FieldPath Field = "path"
	// FieldRequest is a whole request line, "GET /v1/orders HTTP/1.1",
	// read when the method or path has no key of its own.
	FieldRequest Field = "request"
	// FieldIP is the connection's peer address ($remote_addr).
	FieldIP Field = "ip"
)

// DefaultFieldMap is the JSON keys read when a FieldMap leaves a meaning
// out: for each, the keys tried in order, as common nginx JSON log formats
// and structured loggers name them.
var DefaultFieldMap = FieldMap{
	FieldTime:        {"time", "time_iso8601", "timestamp", "@timestamp", "ts", "msec"},
	FieldMethod:      {"method", "request_method"},
	FieldPath:        {"path", "uri", "request_uri", "url"},
	FieldRequest:     {"request"},
	FieldIP:          {"remote_addr", "client_ip", "ip", "remote_ip"},
	FieldXFF:         {"http_x_forwarded_for", "x_forwarded_for", "xff"},
	FieldForwarded:   {"http_forwarded", "forwarded"},
	FieldUser:        {"user", "user_id", "remote_user"},
	FieldAPIKey:      {"api_key", "http_x_api_key"},
	FieldPlan:        {"plan", "http_x_plan"},
	FieldRequestTime: {"request_time"},
}

// jsonFields are the meanings a FieldMap may name, in the order its errors
// list them.
var jsonFields = []Field{FieldTime, FieldMethod, FieldPath, FieldRequest, FieldIP, FieldXFF, FieldForwarded, FieldUser, FieldAPIKey, FieldPlan, FieldRequestTime}

// FieldMap says which JSON keys hold each meaning: for each, the keys
// tried in order (the first present wins). A key may be a dotted path into
// nested objects, "request.remote_ip"; an array of strings (a header's
// values) is read joined by ", ".
type FieldMap map[Field][]string

// ParseFieldMap reads a mapping such as "time=ts,ip=client.addr,user=uid"
// over DefaultFieldMap: each meaning named replaces that meaning's default
// keys (give one several with "user=uid|user"); "-" as the key ("apikey=-")
// reads the meaning from no key.
func ParseFieldMap(s string) (FieldMap, error) {
	m := FieldMap{}
	for k, v := range DefaultFieldMap {
		m[k] = v
	}
	if strings.TrimSpace(s) == "" {
		return m, nil
	}
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		f := Field(strings.TrimSpace(k))
		known := false
		for _, j := range jsonFields {
			known = known || j == f
		}
		if !ok || !known || strings.TrimSpace(v) == "" {
			return nil, fmt.Errorf("want meaning=key pairs with meanings among %v, got %q", jsonFields, kv)
		}
		if v = strings.TrimSpace(v); v == "-" {
			m[f] = nil
			continue
		}
		m[f] = strings.Split(v, "|")
	}
	return m, nil
}

// String renders m as ParseFieldMap reads it, meanings sorted.
func (m FieldMap) String() string {
	var parts []string
	for f, keys := range m {
		parts = append(parts, string(f)+"="+strings.Join(keys, "|"))
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}

// jsonNode is one level of the key paths a JSONParser reads.
type jsonNode struct {
	children map[string]*jsonNode
	slot     int // index into the parser's values, -1 for none
	rank     int // the key's place among its meaning's keys (lower wins)
	field    Field
}

// JSONParser reads JSON lines, one object a line, with a FieldMap. Keys it
// does not map are skipped without being decoded. The peer address and the
// time are required, as are the method and path (from their own keys or
// from a request line).
type JSONParser struct {
	root  *jsonNode
	found [16]struct {
		val  string
		rank int
		num  bool
	}
}

// NewJSONParser returns a parser for the keys of m.
func NewJSONParser(m FieldMap) (*JSONParser, error) {
	p := &JSONParser{root: &jsonNode{slot: -1}}
	for fi, f := range jsonFields {
		for rank, key := range m[f] {
			n := p.root
			for _, seg := range strings.Split(key, ".") {
				if seg == "" {
					return nil, fmt.Errorf("field %s: key %q has an empty segment", f, key)
				}
				if n.children == nil {
					n.children = map[string]*jsonNode{}
				}
				c := n.children[seg]
				if c == nil {
					c = &jsonNode{slot: -1}
					n.children[seg] = c
				}
				n = c
			}
			if n.slot >= 0 && n.field != f {
				return nil, fmt.Errorf("key %q is mapped to both %s and %s", key, n.field, f)
			}
			n.slot, n.rank, n.field = fi, rank, f
		}
	}
	return p, nil
}

// Parse reads one line into rec, every field of which it sets. An error
// wraps ErrSyntax, ErrNoRequest or ErrTime and names the field.
func (p *JSONParser) Parse(line []byte, rec *Record) error {
	*rec = Record{}
	for i := range jsonFields {
		p.found[i].rank = -1
	}
	s := string(line)
	sc := jsonScanner{s: s}
	sc.ws()
	if sc.i >= len(s) || s[sc.i] != '{' {
		return fieldError(ErrSyntax, "line", "want a JSON object")
	}
	if err := p.object(&sc, p.root, 0); err != nil {
		return err
	}
	sc.ws()
	if sc.i != len(s) {
		return fieldError(ErrSyntax, "line", "data after the JSON object at byte %d", sc.i)
	}
	get := func(f Field) (string, bool, bool) {
		for i, j := range jsonFields {
			if j == f {
				if e := &p.found[i]; e.rank >= 0 {
					return e.val, e.num, true
				}
				return "", false, false
			}
		}
		return "", false, false
	}
	tv, tnum, ok := get(FieldTime)
	if !ok {
		return fieldError(ErrTime, "time", "missing")
	}
	var good bool
	if tnum {
		rec.Time, good = unixNumber(tv)
	} else {
		rec.Time, good = parseAnyTime(tv)
	}
	if !good {
		return fieldError(ErrTime, "time", "want RFC 3339, 02/Jan/2006:15:04:05 -0700 or Unix seconds, got %q", clip(tv))
	}
	if rt, _, ok := get(FieldRequestTime); ok && rt != "" && rt != "-" {
		d, good := parseSeconds(rt)
		if !good {
			return fieldError(ErrTime, "request_time", "want seconds such as 0.042, got %q", clip(rt))
		}
		rec.Time -= d
	}
	method, _, hasMethod := get(FieldMethod)
	path, _, hasPath := get(FieldPath)
	var err error
	switch {
	case hasMethod && hasPath:
		if !isToken(method) {
			return fieldError(ErrNoRequest, "method", "want a method such as GET, got %q", clip(method))
		}
		rec.Method = method
		if rec.Path, err = targetPath(path); err != nil {
			return err
		}
	default:
		req, _, ok := get(FieldRequest)
		if !ok {
			return fieldError(ErrNoRequest, "method", "no method and path, nor a request line")
		}
		if rec.Method, rec.Path, err = splitRequest(req); err != nil {
			return err
		}
	}
	peer, _, _ := get(FieldIP)
	if rec.Peer = dash(peer); rec.Peer == "" {
		return fieldError(ErrSyntax, "ip", "missing")
	}
	if err := checkPeer("ip", rec.Peer); err != nil {
		return err
	}
	v, _, _ := get(FieldXFF)
	rec.XForwardedFor = dash(v)
	v, _, _ = get(FieldForwarded)
	rec.Forwarded = dash(v)
	v, _, _ = get(FieldUser)
	rec.User = dash(v)
	v, _, _ = get(FieldAPIKey)
	rec.APIKey = dash(v)
	v, _, _ = get(FieldPlan)
	rec.Plan = dash(v)
	return nil
}

// maxJSONDepth bounds the nesting a line may have.
const maxJSONDepth = 64

// object reads the object at sc (at its '{'), keeping the values n maps.
func (p *JSONParser) object(sc *jsonScanner, n *jsonNode, depth int) error {
	if depth > maxJSONDepth {
		return fieldError(ErrSyntax, "line", "nested deeper than %d", maxJSONDepth)
	}
	sc.i++ // '{'
	sc.ws()
	if sc.peek() == '}' {
		sc.i++
		return nil
	}
	for {
		key, err := sc.member()
		if err != nil {
			return err
		}
		var c *jsonNode
		if n != nil {
			c = n.children[key]
		}
		switch {
		case c != nil && c.children != nil && sc.peek() == '{':
			if err := p.object(sc, c, depth+1); err != nil {
				return err
			}
		case c != nil && c.slot >= 0:
			val, num, null, err := sc.value(depth)
			if err != nil {
				return err
			}
			e := &p.found[c.slot]
			if !null && (e.rank < 0 || c.rank < e.rank) {
				e.val, e.num, e.rank = val, num, c.rank
			}
		default:
			if err := sc.skip(depth); err != nil {
				return err
			}
		}
		sc.ws()
		switch sc.peek() {
		case ',':
			sc.i++
		case '}':
			sc.i++
			return nil
		default:
			return sc.fail("want ',' or '}'")
		}
	}
}

// jsonScanner reads JSON text from s at i.
type jsonScanner struct {
	s string
	i int
}

func (sc *jsonScanner) peek() byte {
	if sc.i < len(sc.s) {
		return sc.s[sc.i]
	}
	return 0
}

func (sc *jsonScanner) ws() {
	for sc.i < len(sc.s) {
		switch sc.s[sc.i] {
		case ' ', '\t', '\r', '\n':
			sc.i++
		default:
			return
		}
	}
}

func (sc *jsonScanner) fail(what string) error {
	return fieldError(ErrSyntax, "line", "%s at byte %d", what, sc.i)
}

// str reads a string at sc (at its '"'), decoding its escapes.
func (sc *jsonScanner) str() (string, error) {
	start := sc.i
	escaped := false
	for j := sc.i + 1; j < len(sc.s); j++ {
		c := sc.s[j]
		switch {
		case c == '\\':
			escaped = true
			j++
		case c == '"':
			sc.i = j + 1
			raw := sc.s[start+1 : j]
			if !escaped {
				return raw, nil
			}
			var out string
			if err := json.Unmarshal([]byte(sc.s[start:j+1]), &out); err != nil {
				return "", fieldError(ErrSyntax, "line", "bad string escape at byte %d", start)
			}
			return out, nil
		case c < 0x20:
			return "", fieldError(ErrSyntax, "line", "control byte in a string at byte %d", j)
		}
	}
	return "", fieldError(ErrSyntax, "line", "unterminated string at byte %d", start)
}

// value reads a scalar (string, number, true, false, null) or an array of
// member reads an object member's key and the ':' after it, with the
// white space around them, leaving sc at the value.
func (sc *jsonScanner) member() (string, error) {
	sc.ws()
	if sc.peek() != '"' {
		return "", sc.fail("want a key")
	}
	key, err := sc.str()
	if err != nil {
		return "", err
	}
	sc.ws()
	if sc.peek() != ':' {
		return "", sc.fail("want ':'")
	}
	sc.i++
	sc.ws()
	return key, nil
}

// strings, which is read joined by ", ". num reports a number.
func (sc *jsonScanner) value(depth int) (val string, num, null bool, err error) {
	switch c := sc.peek(); {
	case c == '"':
		val, err = sc.str()
		return val, false, false, err
	case c == '-' || c >= '0' && c <= '9':
		start := sc.i
		if err := sc.number(); err != nil {
			return "", false, false, err
		}
		return sc.s[start:sc.i], true, false, nil
	case c == '[':
		sc.i++
		var parts []string
		for {
			sc.ws()
			if sc.peek() == ']' && len(parts) == 0 {
				sc.i++
				return "", false, true, nil
			}
			if sc.peek() != '"' {
				// Not an array of strings: skip what is left of it.
				return "", false, true, sc.skipRestOfArray(depth)
			}
			s, err := sc.str()
			if err != nil {
				return "", false, false, err
			}
			parts = append(parts, s)
			sc.ws()
			switch sc.peek() {
			case ',':
				sc.i++
			case ']':
				sc.i++
				return strings.Join(parts, ", "), false, false, nil
			default:
				return "", false, false, sc.fail("want ',' or ']'")
			}
		}
	default:
		for _, lit := range []string{"null", "true", "false"} {
			if strings.HasPrefix(sc.s[sc.i:], lit) {
				sc.i += len(lit)
				return lit, false, lit == "null", nil
			}
		}
		if c == '{' {
			return "", false, true, sc.skip(depth)
		}
		return "", false, false, sc.fail("want a value")
	}
}

// skipRestOfArray skips the elements of an array from the one at sc.i,
// and its closing ']'.
func (sc *jsonScanner) skipRestOfArray(depth int) error {
	for {
		sc.ws()
		if err := sc.skip(depth + 1); err != nil {
			return err
		}
		sc.ws()
		switch sc.peek() {
		case ',':
			sc.i++
		case ']':
			sc.i++
			return nil
		default:
			return sc.fail("want ',' or ']'")
		}
	}
}

func (sc *jsonScanner) number() error {
	start := sc.i
	if sc.peek() == '-' {
		sc.i++
	}
	digitsFrom := func() int {
		n := 0
		for sc.i < len(sc.s) && sc.s[sc.i] >= '0' && sc.s[sc.i] <= '9' {
			sc.i++
			n++
		}
		return n
	}
	if digitsFrom() == 0 {
		return sc.fail("bad number")
	}
	if sc.peek() == '.' {
		sc.i++
		if digitsFrom() == 0 {
			return sc.fail("bad number")
		}
	}
	if c := sc.peek(); c == 'e' || c == 'E' {
		sc.i++
		if c := sc.peek(); c == '+' || c == '-' {
			sc.i++
		}
		if digitsFrom() == 0 {
			return sc.fail("bad number")
		}
	}
	if sc.i == start {
		return sc.fail("bad number")
	}
	return nil
}

// skip passes over one value of any kind.
func (sc *jsonScanner) skip(depth int) error {
	if depth > maxJSONDepth {
		return fieldError(ErrSyntax, "line", "nested deeper than %d", maxJSONDepth)
	}
	switch c := sc.peek(); c {
	case '{', '[':
		end := byte('}')
		if c == '[' {
			end = ']'
		}
		sc.i++
		sc.ws()
		if sc.peek() == end {
			sc.i++
			return nil
		}
		for {
			if c == '{' {
				if _, err := sc.member(); err != nil {
					return err
				}
			} else {
				sc.ws()
			}
			if err := sc.skip(depth + 1); err != nil {
				return err
			}
			sc.ws()
			switch sc.peek() {
			case ',':
				sc.i++
			case end:
				sc.i++
				return nil
			default:
				return sc.fail("want ',' or a closing bracket")
			}
		}
	case '"':
		// Skip without decoding.
		for j := sc.i + 1; j < len(sc.s); j++ {
			switch b := sc.s[j]; {
			case b == '\\':
				j++
			case b == '"':
				sc.i = j + 1
				return nil
			case b < 0x20:
				return fieldError(ErrSyntax, "line", "control byte in a string at byte %d", j)
			}
		}
		return fieldError(ErrSyntax, "line", "unterminated string at byte %d", sc.i)
	default:
		_, _, _, err := sc.value(depth)
		return err
	}
}
