// Package configerr is the error of a configuration file that does not
// parse or validate: the file, the line and the field at fault, and why.
// Package config exports it as config.Error; the packages that read
// envoyproxy/ratelimit's files return it too. It imports nothing but the
// root package and internal/clip, so that a package which only builds or checks a
// configuration in Go (envoyrls) can return it without importing YAML.
//
// What an error quotes of the file is bounded: Quote shows at most
// clip.Max bytes of a value, and Error's message cuts a field path or a
// reason that is longer still (maxField, maxReason), so that a 10 MB line
// never comes back as a 10 MB message.
package configerr

import (
	"strconv"
	"strings"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/internal/clip"
)

// Bounds on the parts of Error's message, in bytes, past which they are
// cut (clip.String: the cut is marked with the whole length). Reasons
// quote values through Quote and stay far below maxReason; the bound holds
// for those that do not.
const (
	maxField  = 256
	maxReason = 512
)

// Quote returns s in Go syntax for a reason, at most clip.Max bytes of it:
// a longer value is cut and marked with its length ("\"abc\"… (10000000
// bytes)").
func Quote(s string) string { return clip.Quote(s, clip.Max) }

// Clip returns s for a reason as it is, at most clip.Max bytes of it: a
// longer value is cut and marked with its length ("123… (10000000
// bytes)"). It is for text that reads without quotes, such as a number.
func Clip(s string) string { return clip.String(s, clip.Max) }

// Error reports a configuration that does not parse or validate, with the
// place and the key at fault. It matches sluice.ErrInvalidConfig and
// unwraps to the cause (a *sluice.RuleError for an invalid rule).
type Error struct {
	// File is the name the configuration was parsed under.
	File string
	// Line is the 1-based line at fault, or 0 when unknown.
	Line int
	// Field is the path of the key at fault, such as "rules[1].window", or
	// empty for the document as a whole.
	Field string
	// Reason says what is wrong.
	Reason string
	// Err is the underlying error, or nil.
	Err error
}

// Error returns "file:line: field: reason", leaving out what is unknown.
// A field path over 256 bytes or a reason over 512 bytes is cut, the cut marked
// with the whole length.
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		b.WriteString(":")
		b.WriteString(strconv.Itoa(e.Line))
	}
	b.WriteString(": ")
	if e.Field != "" {
		b.WriteString(clip.String(e.Field, maxField))
		b.WriteString(": ")
	}
	b.WriteString(clip.String(e.Reason, maxReason))
	return b.String()
}

// Unwrap returns the underlying error, if any.
func (e *Error) Unwrap() error { return e.Err }

// Is reports whether target is sluice.ErrInvalidConfig.
func (e *Error) Is(target error) bool { return target == sluice.ErrInvalidConfig }

// Join appends key to the field path: "rules[1]" and "window" are
// "rules[1].window"; an empty path is the document's top level.
func Join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// Index is the field path of a list's element: "rules" and 1 are
// "rules[1]".
func Index(path string, i int) string {
	return path + "[" + strconv.Itoa(i) + "]"
}
