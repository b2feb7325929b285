// Package braces escapes a key for a place delimited by braces: '%', '{'
// and '}' are written as %25, %7B and %7D, so that a key never closes, or
// opens, the braces it is written in. Redis keys use it for their Cluster
// hash tag (backend/redis), and the shown form of a key counted within a
// tenant, {TENANT}KEY, for its tenant (identity).
package braces

import "strings"

// Append appends s to dst with '%', '{' and '}' escaped.
func Append[S ~string | ~[]byte](dst []byte, s S) []byte {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '%':
			dst = append(dst, "%25"...)
		case '{':
			dst = append(dst, "%7B"...)
		case '}':
			dst = append(dst, "%7D"...)
		default:
			dst = append(dst, c)
		}
	}
	return dst
}

// Escape returns s with '%', '{' and '}' escaped: s itself when it has
// none of them.
func Escape(s string) string {
	if !strings.ContainsAny(s, "%{}") {
		return s
	}
	return string(Append(make([]byte, 0, len(s)+8), s))
}

// Unescape is Escape's reverse. ok is false for a '%' not followed by 25,
// 7B or 7D, and for a brace: no string Escape returns holds one.
func Unescape(s string) (_ string, ok bool) {
	if strings.ContainsAny(s, "{}") {
		return "", false
	}
	if !strings.Contains(s, "%") {
		return s, true
	}
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); i++ {
		if s[i] != '%' {
			b.WriteByte(s[i])
			continue
		}
		switch {
		case strings.HasPrefix(s[i:], "%25"):
			b.WriteByte('%')
		case strings.HasPrefix(s[i:], "%7B"):
			b.WriteByte('{')
		case strings.HasPrefix(s[i:], "%7D"):
			b.WriteByte('}')
		default:
			return "", false
		}
		i += 2
	}
	return b.String(), true
}
