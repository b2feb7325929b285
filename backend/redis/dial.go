package redis

import (
	"context"
	"crypto/tls"
	"net"
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
func dialer(timeout time.Duration, cfg *tls.Config) func(ctx context.Context, network, addr string) (net.Conn, error) {
	nd := &net.Dialer{Timeout: timeout, KeepAlive: 5 * time.Minute}
	dial := nd.DialContext
	if cfg != nil {
		dial = (&tls.Dialer{NetDialer: nd, Config: cfg}).DialContext
	}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return failedConn{err: err, addr: addr}, nil
		}
		return c, nil
	}
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
