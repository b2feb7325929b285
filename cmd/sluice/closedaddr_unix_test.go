//go:build unix

package main

import (
	"net"
	"strconv"
	"syscall"
	"testing"
)

// closedAddr returns a loopback address nothing listens on, and nothing
// will until the test ends: the port is bound by a socket that does not
// listen, so a connection to it is refused, and no listener of another
// test, nor any connection's own port, can take it meanwhile (a port
// closed and handed back could be, by a server of another test running
// in parallel).
func closedAddr(t *testing.T) string {
	t.Helper()
	syscall.ForkLock.RLock() // no child inherits the socket
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err == nil {
		syscall.CloseOnExec(fd)
	}
	syscall.ForkLock.RUnlock()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(sa.(*syscall.SockaddrInet4).Port))
}
