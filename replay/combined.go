package replay

import (
	"fmt"
	"strings"
)

// Field names a field appended to the combined format, or a JSON key's
// meaning in a FieldMap.
type Field string

// The fields a log line can carry beyond the request line.
const (
	// FieldXFF is $http_x_forwarded_for, the X-Forwarded-For header.
	FieldXFF Field = "xff"
	// FieldForwarded is $http_forwarded, the Forwarded header.
	FieldForwarded Field = "forwarded"
	// FieldUser is the user id an authenticating layer set (an upstream
	// header such as $upstream_http_x_user_id, or $remote_user). In the
	// combined format it overrides the format's own user field.
	FieldUser Field = "user"
	// FieldAPIKey is the API key header ($http_x_api_key).
	FieldAPIKey Field = "apikey"
	// FieldPlan is the plan header ($http_x_plan, the identity section's
	// plan_header), read as serve reads it: only from a trusted proxy.
	FieldPlan Field = "plan"
	// FieldMsec is $msec, Unix seconds with milliseconds: a finer time
	// than $time_local's whole seconds, used in its place.
	FieldMsec Field = "msec"
	// FieldRequestTime is $request_time, the seconds the request took:
	// subtracted from the logged time, which is the request's end, to
	// give its start.
	FieldRequestTime Field = "request_time"
	// FieldSkip is a field that is read and ignored ("-").
	FieldSkip Field = "-"
)

// CombinedExtras lists the fields a combined log may carry after the user
// agent, as ParseCombinedExtras accepts them.
var CombinedExtras = []Field{FieldXFF, FieldForwarded, FieldUser, FieldAPIKey, FieldPlan, FieldMsec, FieldRequestTime, FieldSkip}

// ParseCombinedExtras reads a comma-separated list of the fields appended
// to the combined format, in order, such as "xff,user". An empty string is
// none.
func ParseCombinedExtras(s string) ([]Field, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var out []Field
	for _, name := range strings.Split(s, ",") {
		f := Field(strings.TrimSpace(name))
		ok := false
		for _, k := range CombinedExtras {
			ok = ok || f == k
		}
		if !ok {
			return nil, fmt.Errorf("unknown field %q (want a list of %v)", string(f), CombinedExtras)
		}
		out = append(out, f)
	}
	return out, nil
}

// CombinedParser reads the nginx/Apache combined log format,
//
//	$remote_addr - $remote_user [$time_local] "$request" $status $body_bytes_sent "$http_referer" "$http_user_agent"
//
// followed by the Extra fields, quoted or not, in order (a line with fewer
// leaves the rest absent; "-" is absent). The common format, without the
// referer and user agent, is read too when Extra is empty. Quoted fields
// may hold nginx's \xHH escapes and Apache's \" and \\.
//
// The user is $remote_user unless a FieldUser extra is given.
type CombinedParser struct {
	// Extra names the fields after the user agent.
	Extra []Field

	lastTime string // the last $time_local read, and its value:
	lastNS   int64  // most lines of a busy log share their second
}

// Parse reads one line (without its newline) into rec, every field of
// which it sets. An error wraps ErrSyntax, ErrNoRequest or ErrTime and
// names the field.
func (p *CombinedParser) Parse(line []byte, rec *Record) error {
	s := string(line) // one copy; every field is a substring of it
	*rec = Record{}
	var tok [16]string
	n := 0
	for i := 0; ; {
		for i < len(s) && s[i] == ' ' {
			i++
		}
		if i >= len(s) {
			break
		}
		if n == len(tok) {
			break // more fields than any layout we read: ignore the rest
		}
		var (
			t   string
			err error
		)
		switch s[i] {
		case '"':
			t, i, err = quoted(s, i)
		case '[':
			j := strings.IndexByte(s[i:], ']')
			if j < 0 {
				return fieldError(ErrSyntax, "time", "no closing ]")
			}
			t, i = s[i+1:i+j], i+j+1
		default:
			j := strings.IndexByte(s[i:], ' ')
			if j < 0 {
				j = len(s) - i
			}
			t, i = s[i:i+j], i+j
		}
		if err != nil {
			return err
		}
		tok[n] = t
		n++
	}
	switch {
	case n < 7:
		return fieldError(ErrSyntax, "line", "want the combined format (%d fields, want 9 or more)", n)
	case n < 9 && len(p.Extra) > 0:
		return fieldError(ErrSyntax, "line", "want the combined format and %d more fields, got %d fields", len(p.Extra), n)
	}
	rec.Peer = tok[0]
	if rec.Peer == "" || rec.Peer == "-" {
		return fieldError(ErrSyntax, "remote_addr", "missing")
	}
	if err := checkPeer("remote_addr", rec.Peer); err != nil {
		return err
	}
	rec.User = dash(tok[2])
	ts := tok[3]
	if ts == p.lastTime && ts != "" {
		rec.Time = p.lastNS
	} else {
		ns, ok := parseLocalTime(ts)
		if !ok {
			return fieldError(ErrTime, "time_local", "want 02/Jan/2006:15:04:05 -0700, got %q", clip(ts))
		}
		p.lastTime, p.lastNS = ts, ns
		rec.Time = ns
	}
	var err error
	if rec.Method, rec.Path, err = splitRequest(unescape(tok[4])); err != nil {
		return err
	}
	var reqTime int64
	for k, f := range p.Extra {
		if 9+k >= n {
			break
		}
		v := dash(unescape(tok[9+k]))
		switch f {
		case FieldXFF:
			rec.XForwardedFor = v
		case FieldForwarded:
			rec.Forwarded = v
		case FieldUser:
			rec.User = v
		case FieldAPIKey:
			rec.APIKey = v
		case FieldPlan:
			rec.Plan = v
		case FieldMsec:
			ns, ok := parseSeconds(v)
			if !ok {
				return fieldError(ErrTime, "msec", "want Unix seconds such as 1700000000.123, got %q", clip(v))
			}
			rec.Time = ns
		case FieldRequestTime:
			if v == "" {
				continue
			}
			d, ok := parseSeconds(v)
			if !ok {
				return fieldError(ErrTime, "request_time", "want seconds such as 0.042, got %q", clip(v))
			}
			reqTime = d
		}
	}
	rec.Time -= reqTime
	return nil
}

// quoted reads the quoted field starting at s[i] == '"' and returns its
// contents (still escaped) and the index after the closing quote.
func quoted(s string, i int) (string, int, error) {
	for j := i + 1; j < len(s); j++ {
		switch s[j] {
		case '\\':
			j++
		case '"':
			return s[i+1 : j], j + 1, nil
		}
	}
	return "", 0, fieldError(ErrSyntax, "line", "a quoted field has no closing quote")
}

// unescape undoes the escapes of a quoted log field: nginx's \xHH, and \"
// and \\. Anything else after a backslash is kept as it is.
func unescape(s string) string {
	if strings.IndexByte(s, '\\') < 0 {
		return s
	}
	b := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '\\' || i+1 == len(s) {
			b = append(b, c)
			continue
		}
		switch n := s[i+1]; {
		case n == '"' || n == '\\':
			b = append(b, n)
			i++
		case n == 'x' && i+3 < len(s) && isHex(s[i+2]) && isHex(s[i+3]):
			b = append(b, unhex(s[i+2])<<4|unhex(s[i+3]))
			i += 3
		default:
			b = append(b, c)
		}
	}
	return string(b)
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case c >= 'a':
		return c - 'a' + 10
	case c >= 'A':
		return c - 'A' + 10
	}
	return c - '0'
}
