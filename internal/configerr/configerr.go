// Package configerr is the error of a configuration file that does not
// parse or validate: the file, the line and the field at fault, and why.
// Package config exports it as config.Error; the packages that read
// envoyproxy/ratelimit's files return it too. It imports nothing but the
// root package, so that a package which only builds or checks a
// configuration in Go (envoyrls) can return it without importing YAML.
package configerr

import (
	"strconv"
	"strings"

	"github.com/sluice-go/sluice"
)

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
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		b.WriteString(":")
		b.WriteString(strconv.Itoa(e.Line))
	}
	b.WriteString(": ")
	if e.Field != "" {
		b.WriteString(e.Field)
		b.WriteString(": ")
	}
	b.WriteString(e.Reason)
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
