// Package nospace tells the durable stores (backend/bolt, backend/pebble)
// that a write failed because the disk is full, and how much room a
// directory's file system has left.
package nospace

import (
	"errors"
	"fmt"
	"strings"
	"syscall"

	"github.com/sluice-go/sluice/backend"
)

// Is reports whether err says the file system is out of space or the
// user's quota is used up (ENOSPC, EDQUOT), unwrapped or, from a library
// that formats its causes into its own message, by its text.
func Is(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, backend.ErrNoSpace) || errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
		return true
	}
	msg := err.Error()
	return strings.Contains(msg, syscall.ENOSPC.Error()) || strings.Contains(msg, syscall.EDQUOT.Error())
}

// Wrap returns err, from op of the store named store on path, as an error
// wrapping backend.ErrNoSpace and err that says the disk is full.
func Wrap(store, op, path string, err error) error {
	return fmt.Errorf("%s: %s: %s: the disk is full: %w: %w", store, op, path, backend.ErrNoSpace, err)
}
