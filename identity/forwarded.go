package identity

// The parser of the forwarding headers: X-Forwarded-For (de facto) and
// Forwarded (RFC 7239), walked from the right past the trusted proxies.

import (
	"net/netip"
	"strings"
)

// walkXFF walks X-Forwarded-For values from the right (see
// Identifier.ClientIP), starting after the trusted peer, and returns the
// client; ok is false when the walk reached an entry it cannot read before
// an address that is not a trusted proxy.
func (id *Identifier) walkXFF(values []string, peer netip.Addr) (client netip.Addr, ok bool) {
	last := peer
	for i := len(values) - 1; i >= 0; i-- {
		v := values[i]
		for {
			j := strings.LastIndexByte(v, ',')
			if elem := trimOWS(v[j+1:]); elem != "" {
				a, ok := parseXFFHop(elem)
				if !ok {
					return netip.Addr{}, false
				}
				if !id.isTrusted(a) {
					return a, true
				}
				last = a
			}
			if j < 0 {
				break
			}
			v = v[:j]
		}
	}
	return last, true
}

// parseXFFHop reads one X-Forwarded-For entry: "192.0.2.1",
// "192.0.2.1:80", "2001:db8::1", "[2001:db8::1]" or "[2001:db8::1]:443".
func parseXFFHop(s string) (netip.Addr, bool) {
	var host string
	if s[0] == '[' {
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return netip.Addr{}, false
		}
		if rest := s[end+1:]; rest != "" && (rest[0] != ':' || !isPort(rest[1:])) {
			return netip.Addr{}, false
		}
		host = s[1:end]
		a, err := netip.ParseAddr(host)
		if err != nil || !a.Is6() || a.Zone() != "" {
			return netip.Addr{}, false
		}
		return a.Unmap(), true
	}
	if a, err := netip.ParseAddr(s); err == nil {
		if a.Zone() != "" {
			return netip.Addr{}, false
		}
		return a.Unmap(), true
	}
	host, port, ok := strings.Cut(s, ":")
	if !ok || !isPort(port) {
		return netip.Addr{}, false
	}
	a, err := netip.ParseAddr(host)
	if err != nil || !a.Is4() {
		return netip.Addr{}, false
	}
	return a, true
}

// hop is one element of a forwarding header: an address, or not ok when
// it could not be read.
type hop struct {
	addr netip.Addr
	ok   bool
}

// walkForwarded walks Forwarded values from the right, as walkXFF does.
func (id *Identifier) walkForwarded(values []string, peer netip.Addr) (client netip.Addr, ok bool) {
	if len(values) == 0 {
		return peer, true
	}
	var buf [8]hop
	hops := buf[:0]
	for _, v := range values {
		hops = appendForwarded(hops, v)
	}
	last := peer
	for i := len(hops) - 1; i >= 0; i-- {
		h := hops[i]
		if !h.ok {
			return netip.Addr{}, false
		}
		if !id.isTrusted(h.addr) {
			return h.addr, true
		}
		last = h.addr
	}
	return last, true
}

// appendForwarded appends a hop for each non-empty element of one
// Forwarded field line. A quoted-string never spans lines; one left open
// runs to the end of its line, making the rest of the line one bad
// element.
func appendForwarded(hops []hop, s string) []hop {
	for s != "" {
		var elem string
		elem, s = cutOutsideQuotes(s, ',')
		if h, nonEmpty := parseForwardedElement(elem); nonEmpty {
			hops = append(hops, h)
		}
	}
	return hops
}

// cutOutsideQuotes splits s at the first sep outside a quoted-string.
func cutOutsideQuotes(s string, sep byte) (before, after string) {
	inQuote := false
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case inQuote && c == '\\':
			i++
		case c == '"':
			inQuote = !inQuote
		case !inQuote && c == sep:
			return s[:i], s[i+1:]
		}
	}
	return s, ""
}

// parseForwardedElement reads one forwarded-element ("for=...;proto=...")
// for its for= node. nonEmpty is false for an element with no pairs at
// all.
func parseForwardedElement(elem string) (h hop, nonEmpty bool) {
	var node string
	haveFor, bad := false, false
	for elem != "" {
		var pair string
		pair, elem = cutOutsideQuotes(elem, ';')
		pair = trimOWS(pair)
		if pair == "" {
			continue
		}
		nonEmpty = true
		name, value, ok := strings.Cut(pair, "=")
		if !ok || !isToken(name) {
			bad = true
			continue
		}
		if value, ok = forwardedValue(value); !ok {
			bad = true
			continue
		}
		if strings.EqualFold(name, "for") {
			if haveFor {
				bad = true // a parameter must not repeat within an element
			}
			haveFor, node = true, value
		}
	}
	if bad || !haveFor {
		return hop{}, nonEmpty
	}
	a, ok := parseForwardedNode(node)
	return hop{addr: a, ok: ok}, nonEmpty
}

// forwardedValue reads a token or a quoted-string.
func forwardedValue(v string) (string, bool) {
	if v == "" || v[0] != '"' {
		return v, isToken(v)
	}
	if len(v) < 2 || v[len(v)-1] != '"' {
		return "", false
	}
	inner := v[1 : len(v)-1]
	escaped := false
	for i := 0; i < len(inner); i++ {
		c := inner[i]
		switch {
		case c == '\\':
			if i+1 == len(inner) || !isQuotedPairChar(inner[i+1]) {
				return "", false
			}
			escaped = true
			i++
		case c == '"' || !isQDText(c):
			return "", false
		}
	}
	if !escaped {
		return inner, true
	}
	var b strings.Builder
	b.Grow(len(inner))
	for i := 0; i < len(inner); i++ {
		if inner[i] == '\\' {
			i++
		}
		b.WriteByte(inner[i])
	}
	return b.String(), true
}

// parseForwardedNode reads an RFC 7239 node: "192.0.2.1", "192.0.2.1:80",
// "[2001:db8::1]" or "[2001:db8::1]:443" (the port may be obfuscated,
// "_p"). "unknown", obfuscated names ("_hidden") and anything else are not
// ok.
func parseForwardedNode(s string) (netip.Addr, bool) {
	if s == "" {
		return netip.Addr{}, false
	}
	if s[0] == '[' {
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return netip.Addr{}, false
		}
		if rest := s[end+1:]; rest != "" && (rest[0] != ':' || !isNodePort(rest[1:])) {
			return netip.Addr{}, false
		}
		a, err := netip.ParseAddr(s[1:end])
		if err != nil || !a.Is6() || a.Zone() != "" {
			return netip.Addr{}, false
		}
		return a.Unmap(), true
	}
	host, port, hasPort := strings.Cut(s, ":")
	if hasPort && !isNodePort(port) {
		return netip.Addr{}, false
	}
	a, err := netip.ParseAddr(host)
	if err != nil || !a.Is4() {
		return netip.Addr{}, false
	}
	return a, true
}

// isPort reports whether s is 1 to 5 digits.
func isPort(s string) bool {
	if s == "" || len(s) > 5 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// isNodePort reports whether s is an RFC 7239 node-port: a port or an
// obfuscated port ("_" followed by letters, digits, ".", "_" and "-").
func isNodePort(s string) bool {
	if s == "" || s[0] != '_' {
		return isPort(s)
	}
	if len(s) == 1 {
		return false
	}
	for i := 1; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// trimOWS trims spaces and tabs from both ends of s.
func trimOWS(s string) string {
	for s != "" && (s[0] == ' ' || s[0] == '\t') {
		s = s[1:]
	}
	for s != "" && (s[len(s)-1] == ' ' || s[len(s)-1] == '\t') {
		s = s[:len(s)-1]
	}
	return s
}

// isToken reports whether s is an HTTP token (RFC 9110), as header names
// and unquoted parameter values are.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !isTokenChar(s[i]) {
			return false
		}
	}
	return true
}

func isTokenChar(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

// isQDText reports whether c may stand unescaped in a quoted-string.
func isQDText(c byte) bool {
	return c == '\t' || c == ' ' || c == 0x21 || (0x23 <= c && c <= 0x5b) || (0x5d <= c && c <= 0x7e) || c >= 0x80
}

// isQuotedPairChar reports whether c may follow a backslash in a
// quoted-string.
func isQuotedPairChar(c byte) bool {
	return c == '\t' || c == ' ' || (0x21 <= c && c <= 0x7e) || c >= 0x80
}
