package redis

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"sync/atomic"
	"syscall"
	"time"
)

// dialer returns the dial function of the clients Open makes: a TCP dial
// (and TLS handshake, with cfg) bounded by timeout and the call's context,
// which reports a failed dial to go-redis not as
// an error but as a connection whose every read and write fails with the
// dial's error. The caller sees the same error, at the same moment.
//
// The reason is go-redis' pool: once as many dials have failed as it has
// connections (over its whole life), it stops dialing and fails every
// call with the last dial error until a background redial, tried once a
// second, succeeds. A Redis restarted under load would then be refused for
// up to a second after it is back (1,264 errors over 6.95s were seen), and
// the breaker, whose probe would have found it back at once, could not
// tell. A connection that fails on first use is dropped by the pool like
// any broken one, and counts against nothing.
//
// The connection it returns is a lateConn (under TLS, if any): a reply
// counts as late when Redis took longer than timeout to send it, not when
// the gateway took that long to look.
//
// A connection made before the last time stale was set is not reused: the
// pool checks each one it takes (SyscallConn), and drops it.
func dialer(timeout time.Duration, cfg *tls.Config, stale *atomic.Int64) func(ctx context.Context, network, addr string) (net.Conn, error) {
	nd := &net.Dialer{Timeout: timeout, KeepAlive: 5 * time.Minute}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := nd.DialContext(ctx, network, addr)
		if err != nil {
			return failedConn{err: err, addr: addr}, nil
		}
		c = lateConn{Conn: c, timeout: timeout, wrote: new(atomic.Int64), born: time.Now().UnixNano(), stale: stale}
		if cfg == nil {
			return c, nil
		}
		tc := cfg
		if tc.ServerName == "" {
			host, _, _ := net.SplitHostPort(addr)
			tc = cfg.Clone()
			tc.ServerName = host
		}
		t := tls.Client(c, tc)
		if err := t.HandshakeContext(ctx); err != nil {
			c.Close()
			return failedConn{err: fmt.Errorf("%w: %w", errHandshake, err), addr: addr}, nil
		}
		return t, nil
	}
}

// errHandshake marks the error of a TLS handshake that failed or did not
// complete (a server that does not speak TLS never answers the client's
// hello).
var errHandshake = errors.New("TLS handshake")

// lateLook is how long a read past its deadline waits for bytes already
// on their way: long enough for the kernel to hand over what it holds.
const lateLook = time.Millisecond

// lateConn is a connection whose deadlines judge Redis, not the gateway:
// a write that meets the call's deadline carries on for timeout from its
// start, and a read whose deadline (the call's) has passed with nothing read waits on
// until timeout after the connection's last write, the request, and then
// looks once more, for lateLook, before it fails. A busy gateway may send
// a request well after its call began, or read the reply well after Redis
// sent it; neither is Redis failing to answer, and the call's deadline
// alone would refuse the decision for it. A Redis that does not answer
// still fails the read timeout after the request was written.
type lateConn struct {
	net.Conn
	timeout time.Duration
	wrote   *atomic.Int64 // Unix ns of the last write
	born    int64         // Unix ns of the dial
	stale   *atomic.Int64 // Unix ns: connections born before are not reused
}

// errStale is a pooled connection's check failing because the connection
// was made before a call failed: see Store.callBy.
var errStale = errors.New("sluice/backend/redis: a connection made before a call failed")

// Write implements net.Conn. A write that meets the call's deadline
// carries on until timeout after it began: only a Redis that does not
// take the request (its socket full) fails it.
func (c lateConn) Write(b []byte) (int, error) {
	start := time.Now()
	c.wrote.Store(start.UnixNano())
	n, err := c.Conn.Write(b)
	if n == len(b) || !errors.Is(err, os.ErrDeadlineExceeded) || time.Since(start) >= c.timeout {
		return n, err
	}
	if err := c.Conn.SetWriteDeadline(start.Add(c.timeout)); err != nil {
		return n, err
	}
	m, err := c.Conn.Write(b[n:])
	return n + m, err
}

// Read implements net.Conn.
func (c lateConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
		return n, err
	}
	if until := time.Unix(0, c.wrote.Load()).Add(c.timeout); time.Until(until) > lateLook {
		if err := c.Conn.SetReadDeadline(until); err != nil {
			return 0, err
		}
		if n, err = c.Conn.Read(b); n > 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
			return n, err
		}
	}
	if err := c.Conn.SetReadDeadline(time.Now().Add(lateLook)); err != nil {
		return 0, err
	}
	return c.Conn.Read(b)
}

// SyscallConn gives the TCP connection's descriptor, through which the
// go-redis pool checks a pooled connection before reusing it (one the
// server or a proxy closed meanwhile is dropped, not used and failed). A
// connection made before a call failed fails the check: a call that timed
// out or lost its connection most often means the others of its time are
// as dead (a restarted or failed-over server, a killed client list, a
// proxy that dropped them) without having said so yet, and each would
// fail a call of its own at the deadline, one after another. The pool
// dials afresh instead.
func (c lateConn) SyscallConn() (syscall.RawConn, error) {
	if c.stale != nil && c.born < c.stale.Load() {
		return nil, errStale
	}
	sc, ok := c.Conn.(syscall.Conn)
	if !ok {
		return nil, errors.ErrUnsupported
	}
	return sc.SyscallConn()
}

// failedConn is a dial that failed, as a connection: every read and write
// returns the dial's error.
type failedConn struct {
	err  error
	addr string
}

func (c failedConn) Read([]byte) (int, error)         { return 0, c.err }
func (c failedConn) Write([]byte) (int, error)        { return 0, c.err }
func (c failedConn) Close() error                     { return nil }
func (c failedConn) LocalAddr() net.Addr              { return failedAddr(c.addr) }
func (c failedConn) RemoteAddr() net.Addr             { return failedAddr(c.addr) }
func (c failedConn) SetDeadline(time.Time) error      { return nil }
func (c failedConn) SetReadDeadline(time.Time) error  { return nil }
func (c failedConn) SetWriteDeadline(time.Time) error { return nil }

// failedAddr is the address a failed dial was made to.
type failedAddr string

func (a failedAddr) Network() string { return "tcp" }
func (a failedAddr) String() string  { return string(a) }
