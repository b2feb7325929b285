// Package clip shortens text that came from a client or from a file
// before a message, a log line or a table shows it, so that what Sluice
// says about an input costs at most a few hundred bytes whatever the
// input's size. A cut is always marked: the excerpt is followed by "…" and
// the whole length ("… (10000000 bytes)"), so no excerpt can pass for the
// whole value.
//
// Every function is pure and safe for concurrent use. String and Quote do
// work in proportion to the excerpt, not to the input; Distinct (and
// Tail with a fingerprint) hashes the whole input.
package clip

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"unicode/utf8"
)

// Max is the bytes of an input a message quotes: what an operator needs to
// recognise a value, far less than a value can be.
const Max = 200

// Overhead bounds what a result adds to its excerpt: the marker of a cut
// with the length and, for Distinct, the fingerprint (and for Quote the two
// quotes). Every result is at most n + Overhead bytes for an excerpt of n.
const Overhead = 64

// Head returns the longest prefix of s of at most n bytes that does not
// split a UTF-8 sequence: s itself when it is n bytes or fewer. An n below
// zero counts as zero.
func Head(s string, n int) string {
	n = max(n, 0)
	if len(s) <= n {
		return s
	}
	// s[:n] would split the rune that starts at the last rune start before
	// n when that rune is valid and runs past n: then cut before it.
	// Invalid bytes are cut anywhere.
	for i := n; i >= 0 && i > n-utf8.UTFMax; i-- {
		if !utf8.RuneStart(s[i]) {
			continue
		}
		if i < n {
			if r, size := utf8.DecodeRuneInString(s[i:]); (r != utf8.RuneError || size > 1) && i+size > n {
				return s[:i]
			}
		}
		break
	}
	return s[:n]
}

// Tail returns the marker that follows the excerpt of a cut s: "… (N
// bytes)", N being len(s); with fingerprint, "… (N bytes, sha256 X)", X
// being the first 8 bytes of the SHA-256 of s in hex, so that two cut
// values with one excerpt and one length are still told apart.
func Tail(s string, fingerprint bool) string {
	b := make([]byte, 0, Overhead)
	b = append(b, "… ("...)
	b = strconv.AppendInt(b, int64(len(s)), 10)
	b = append(b, " bytes"...)
	if fingerprint {
		sum := sha256.Sum256([]byte(s))
		b = append(b, ", sha256 "...)
		b = hex.AppendEncode(b, sum[:8])
	}
	return string(append(b, ')'))
}

// String returns s when it is at most n bytes, and otherwise Head(s, n)
// followed by Tail(s, false): "abc… (10000000 bytes)".
func String(s string, n int) string {
	if len(s) <= max(n, 0) {
		return s
	}
	return Head(s, n) + Tail(s, false)
}

// Distinct is String for a list of values, such as the keys of a table:
// a cut value's marker carries its fingerprint (Tail(s, true)). A value of
// at most n bytes is itself; a cut one is longer than n bytes, so it never
// reads as an uncut value, and two values that differ almost never read
// alike (a 64-bit fingerprint).
func Distinct(s string, n int) string {
	if len(s) <= max(n, 0) {
		return s
	}
	return Head(s, n) + Tail(s, true)
}

// Quote returns s quoted in Go syntax, as strconv.Quote does, when that is
// at most n+2 bytes (n, quotes excluded). Otherwise it quotes the longest
// prefix of s whose quoted form fits in n+2 bytes, cut between two runes
// (or two invalid bytes), and adds Tail(s, false) after the closing quote:
// "\"abc\"… (10000000 bytes)". Only the excerpt is escaped, so a quote of a
// huge s costs O(n).
func Quote(s string, n int) string {
	n = max(n, 0)
	b := make([]byte, 0, min(len(s), n)+Overhead)
	b = append(b, '"')
	var piece [16]byte // one rune's escape: at most 10 bytes, and 2 quotes
	for i := 0; i < len(s); {
		_, size := utf8.DecodeRuneInString(s[i:])
		q := strconv.AppendQuote(piece[:0], s[i:i+size])
		q = q[1 : len(q)-1]
		if len(b)-1+len(q) > n {
			b = append(b, '"')
			return string(b) + Tail(s, false)
		}
		b = append(b, q...)
		i += size
	}
	return string(append(b, '"'))
}
