//go:build !unix

package main

import (
	"net"
	"testing"
)

// closedAddr returns a loopback address nothing listens on: a port
// listened on and closed again.
func closedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}
