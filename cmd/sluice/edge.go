package main

// serve's defences against slow and idle clients: inactivity timeouts on
// reading a request body and on writing a response, and a cap on the
// connections open at once. The idle timeout between requests is
// http.Server.IdleTimeout's.

import (
	"context"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// slowClientGuard wraps a handler with inactivity timeouts: reading the
// request body may wait at most body between two reads that return data,
// and each write of the response at most send (nginx's client_body_timeout
// and send_timeout). Neither bounds the whole exchange: a body or a
// response that keeps moving lasts as long as it moves. The deadlines are
// the connection's (the stream's, on HTTP/2), moved forward through
// http.ResponseController before each read and each write.
//
// A body whose client stops sending is cut: its read fails, which ends the
// upstream request (the proxy's transport closes it), and the client is
// answered 408 Request Timeout, as nginx answers it.
//
// So is a body that keeps moving too slowly, with minRate set: once grace
// has passed since the guard saw the request, the body read so far must
// have come at minRate bytes a second on average (Kestrel's
// MinRequestBodyDataRate). Without it a client sending a byte a second
// would hold its upstream connection as long as it liked, since serve
// streams a body upstream instead of buffering it first as nginx does.
type slowClientGuard struct {
	next       http.Handler
	body, send time.Duration
	minRate    int64         // bytes a second; 0: no minimum
	grace      time.Duration // before minRate applies
}

// bodyTimedOutKey is the context key of a request's *timedBody.
type bodyTimedOutKey struct{}

func (g slowClientGuard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rc := http.NewResponseController(w)
	// A keep-alive connection keeps the last request's write deadline:
	// give this request its own before anything is written.
	rc.SetWriteDeadline(time.Now().Add(g.send))
	tw := &timedWriter{ResponseWriter: w, rc: rc, send: g.send}
	if r.Body != nil && r.Body != http.NoBody {
		b := &timedBody{ReadCloser: r.Body, rc: rc, timeout: g.body, minRate: g.minRate}
		if g.minRate > 0 {
			b.rateFrom = time.Now().Add(g.grace)
		}
		r.Body = b
		r = r.WithContext(context.WithValue(r.Context(), bodyTimedOutKey{}, b))
	}
	g.next.ServeHTTP(tw, r)
}

// bodyTimedOut reports whether the body of the request whose context is
// ctx was cut by the body timeout.
func bodyTimedOut(ctx context.Context) bool {
	b, _ := ctx.Value(bodyTimedOutKey{}).(*timedBody)
	return b != nil && b.timedOut.Load()
}

// timedBody is a request body each read of which may wait at most timeout,
// and which, with minRate set, must have arrived at minRate bytes a second
// from rateFrom on.
type timedBody struct {
	io.ReadCloser
	rc       *http.ResponseController
	timeout  time.Duration
	minRate  int64     // bytes a second; 0: no minimum
	rateFrom time.Time // the end of the grace: read bytes are counted from it
	read     int64     // bytes read so far
	timedOut atomic.Bool
	done     bool // EOF seen: the deadline is cleared
}

// deadline is when the next read must have returned: timeout from now, or
// sooner, the instant the bytes read so far fall below minRate since the
// grace ended (in the past if they have already, which ends the next read
// at once).
func (b *timedBody) deadline(now time.Time) time.Time {
	d := now.Add(b.timeout)
	if b.minRate > 0 {
		// read bytes at minRate last read/minRate seconds past the grace
		// (in whole seconds and the rest, so that no product overflows; a
		// count that would last past a day is ahead of any timeout).
		if secs := b.read / b.minRate; secs < 86400 {
			owed := time.Duration(secs)*time.Second + time.Duration(b.read%b.minRate*int64(time.Second)/b.minRate)
			if r := b.rateFrom.Add(owed); r.Before(d) {
				d = r
			}
		}
	}
	return d
}

func (b *timedBody) Read(p []byte) (int, error) {
	if b.done {
		return b.ReadCloser.Read(p)
	}
	b.rc.SetReadDeadline(b.deadline(time.Now()))
	n, err := b.ReadCloser.Read(p)
	b.read += int64(n)
	if err == io.EOF {
		// Read in full: no deadline on the connection while the upstream
		// answers (net/http reads in the background then, to see the
		// client go away, and a deadline would end the request).
		b.done = true
		b.rc.SetReadDeadline(time.Time{})
	} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
		b.timedOut.Store(true)
	}
	return n, err
}

// timedWriter is a response writer each write (and flush) of which may
// wait at most send. Unwrap lets http.ResponseController reach the
// connection's writer, to flush it or to hand it over (an upgrade):
// net/http clears a hijacked connection's deadlines, so an upgraded
// connection is not cut by the guard.
type timedWriter struct {
	http.ResponseWriter
	rc   *http.ResponseController
	send time.Duration
}

func (t *timedWriter) arm() { t.rc.SetWriteDeadline(time.Now().Add(t.send)) }

func (t *timedWriter) WriteHeader(code int) {
	t.arm()
	t.ResponseWriter.WriteHeader(code)
}

func (t *timedWriter) Write(p []byte) (int, error) {
	t.arm()
	return t.ResponseWriter.Write(p)
}

// FlushError flushes the response, waiting at most send.
func (t *timedWriter) FlushError() error {
	t.arm()
	return t.rc.Flush()
}

// Flush implements http.Flusher.
func (t *timedWriter) Flush() { t.FlushError() }

// Unwrap returns the writer underneath, for http.ResponseController.
func (t *timedWriter) Unwrap() http.ResponseWriter { return t.ResponseWriter }

// limitListener accepts at most n connections open at once: past that,
// Accept waits until one closes, and new connections wait in the kernel's
// accept queue (as nginx's worker_connections leaves them), where a
// client's connect timeout or the queue's length refuses them.
type limitListener struct {
	net.Listener
	sem  chan struct{}
	done chan struct{} // closed by Close, to end a waiting Accept
	once sync.Once
}

// newLimitListener returns ln accepting at most n connections at once.
func newLimitListener(ln net.Listener, n int) *limitListener {
	return &limitListener{Listener: ln, sem: make(chan struct{}, n), done: make(chan struct{})}
}

func (l *limitListener) Accept() (net.Conn, error) {
	select {
	case l.sem <- struct{}{}:
	case <-l.done:
		return nil, net.ErrClosed
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.sem
		return nil, err
	}
	return &limitConn{Conn: c, release: func() { <-l.sem }}, nil
}

func (l *limitListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return l.Listener.Close()
}

// limitConn gives its slot back once, when it is closed.
type limitConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}
