package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// slowUpstream is an upstream that reads each request body to its end and
// records how each read ended, and serves /stream (a byte every gap, n of
// them, flushed) and /big (as much as the proxy takes).
type slowUpstream struct {
	*httptest.Server
	inFlight atomic.Int64   // bodies being read
	ended    chan error     // how each body read ended (nil: read in full)
	bigEnded chan error     // how each /big write ended
	mu       sync.Mutex     // guards bodies
	bodies   map[string]int // bytes of each complete body, by X-Test-Name
	gap      time.Duration  // /stream's gap
}

func newSlowUpstream(t *testing.T, gap time.Duration) *slowUpstream {
	u := &slowUpstream{ended: make(chan error, 256), bigEnded: make(chan error, 16), bodies: map[string]int{}, gap: gap}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/stream":
			rc := http.NewResponseController(w)
			for range 12 {
				w.Write([]byte("x"))
				rc.Flush()
				time.Sleep(u.gap)
			}
			return
		case "/upgrade":
			// Switch protocols and echo each line, however long between.
			w.Header().Set("Connection", "Upgrade")
			w.Header().Set("Upgrade", "echo")
			w.WriteHeader(http.StatusSwitchingProtocols)
			c, brw, err := http.NewResponseController(w).Hijack()
			if err != nil {
				return
			}
			defer c.Close()
			for {
				line, err := brw.ReadString('\n')
				if err != nil {
					return
				}
				brw.WriteString(line)
				brw.Flush()
			}
		case "/big":
			chunk := make([]byte, 64<<10)
			var err error
			for err == nil {
				_, err = w.Write(chunk)
			}
			u.bigEnded <- err
			return
		}
		if r.Method == "POST" {
			u.inFlight.Add(1)
			n, err := io.Copy(io.Discard, r.Body)
			u.inFlight.Add(-1)
			u.ended <- err
			if err == nil {
				u.mu.Lock()
				u.bodies[r.Header.Get("X-Test-Name")] = int(n)
				u.mu.Unlock()
			}
		}
		io.WriteString(w, "upstream")
	}))
	t.Cleanup(u.Close)
	return u
}

// waitFor polls cond every 10ms until it holds, failing t after limit.
func waitFor(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, limit)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// openRaw opens a connection to addr and writes head (a request line
// and headers, without the blank line) and the blank line.
func openRaw(t *testing.T, addr, head string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := io.WriteString(c, strings.ReplaceAll(head, "\n", "\r\n")+"\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	return c
}

// closedBy reads c until the server closes it, failing t after limit, and
// returns the status of the response it sent first, if any (0 if none).
func closedBy(t *testing.T, c net.Conn, limit time.Duration) int {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(limit))
	br := bufio.NewReader(c)
	status := 0
	if resp, err := http.ReadResponse(br, nil); err == nil {
		status = resp.StatusCode
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	_, err := io.Copy(io.Discard, br)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("the connection is still open after %v", limit)
	}
	return status
}

// Slow clients against the real serve process, with every timeout at 1s
// and a cap of 8 connections: a flood of bodies that stop sending is cut
// (408) after the body timeout and their upstream requests end; a body
// that trickles with gaps shorter than the timeout, and a response that
// streams so, are never cut, however long they take; a client that stops
// reading a large response is cut and the upstream's write ends; idle
// keep-alive connections are closed; over the cap new connections wait,
// and are served once others close. A normal caller is answered
// throughout.
func TestServeProcessSlowClients(t *testing.T) {
	bin := buildBinary(t)
	const timeout = time.Second
	gap := timeout / 4
	up := newSlowUpstream(t, gap)
	cfgPath := filepath.Join(t.TempDir(), "gateway.yaml")
	writeFile(t, cfgPath, gatewayConfig(memoryStore, "", 100000))
	p := startServeProcess(t, bin, "--config", cfgPath, "--listen", "127.0.0.1:0", "--upstream", up.URL,
		"--admin", "127.0.0.1:0",
		"--client-body-timeout", timeout.String(), "--send-timeout", timeout.String(), "--idle-timeout", timeout.String(),
		"--client-body-min-rate", "0", // the inactivity timeouts alone: TestServeProcessSlowBodyRate tests the rate
		"--max-connections", "8")
	m := serveAdminRE.FindStringSubmatch(p.stderr.String())
	if m == nil {
		t.Fatalf("no admin address in the log:\n%s", p.stderr)
	}
	admin := m[1]
	normal := func(what string) {
		t.Helper()
		if code, _ := send(t, "GET", "http://"+p.listen+"/ok"); code != 200 {
			t.Errorf("a normal caller %s: %d, want 200", what, code)
		}
	}
	// Bounds on waits: generous, never asserted as speeds.
	const patience = 30 * time.Second

	t.Run("slow-body flood", func(t *testing.T) {
		const n = 4
		var conns []net.Conn
		for i := range n {
			c := openRaw(t, p.listen, fmt.Sprintf("POST /upload HTTP/1.1\nHost: gw\nX-Test-Name: slow%d\nContent-Length: 1000", i))
			io.WriteString(c, "a") // one byte, then nothing
			conns = append(conns, c)
		}
		waitFor(t, patience, "the slow bodies reaching the upstream", func() bool { return up.inFlight.Load() == n })
		normal("during the flood")
		for i, c := range conns {
			if got := closedBy(t, c, patience); got != http.StatusRequestTimeout {
				t.Errorf("slow body %d: answered %d, want 408", i, got)
			}
		}
		for i := range n {
			select {
			case err := <-up.ended:
				if err == nil {
					t.Errorf("upstream body %d read in full, want it cut", i)
				}
			case <-time.After(patience):
				t.Fatalf("upstream request %d still reading its body", i)
			}
		}
		waitFor(t, patience, "the upstream requests ending", func() bool { return up.inFlight.Load() == 0 })
		if got := metricValue(t, admin, "sluice_client_body_timeouts_total"); got != n {
			t.Errorf("sluice_client_body_timeouts_total = %v, want %d", got, n)
		}
	})

	t.Run("steady trickle is not cut", func(t *testing.T) {
		const size = 12 // 12 gaps of a quarter of the timeout: three timeouts long
		c := openRaw(t, p.listen, fmt.Sprintf("POST /upload HTTP/1.1\nHost: gw\nX-Test-Name: trickle\nContent-Length: %d\nConnection: close", size))
		start := time.Now()
		for range size {
			time.Sleep(gap)
			if _, err := io.WriteString(c, "t"); err != nil {
				t.Fatalf("the trickle was cut after %v: %v", time.Since(start), err)
			}
		}
		if got := closedBy(t, c, patience); got != 200 {
			t.Errorf("trickled body: %d, want 200", got)
		}
		<-up.ended
		up.mu.Lock()
		got := up.bodies["trickle"]
		up.mu.Unlock()
		if got != size {
			t.Errorf("the upstream read %d bytes of the trickle, want %d", got, size)
		}
		if took := time.Since(start); took < 2*timeout {
			t.Logf("the trickle took %v only; it shows nothing about a deadline on the whole exchange", took)
		}
	})

	t.Run("streaming response is not cut", func(t *testing.T) {
		resp, err := http.Get("http://" + p.listen + "/stream")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil || len(b) != 12 {
			t.Errorf("streamed response: %d bytes, %v; want 12 and no error", len(b), err)
		}
	})

	t.Run("client that stops reading", func(t *testing.T) {
		c := openRaw(t, p.listen, "GET /big HTTP/1.1\nHost: gw")
		// Read nothing: the proxy's writes block once the socket buffers
		// fill, and the send timeout closes the connection.
		select {
		case err := <-up.bigEnded:
			if err == nil {
				t.Error("upstream /big write ended without an error")
			}
		case <-time.After(patience):
			t.Fatal("the upstream still writing to a client that reads nothing")
		}
		closedBy(t, c, patience)
		normal("after the stalled reader")
	})

	t.Run("upgraded connection is not cut", func(t *testing.T) {
		c := openRaw(t, p.listen, "GET /upgrade HTTP/1.1\nHost: gw\nConnection: Upgrade\nUpgrade: echo")
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, nil)
		if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
			t.Fatalf("upgrade: %v %v, want 101", resp, err)
		}
		// Quiet for longer than every timeout, then a line each way: the
		// connection handed over carries no deadline of the guard's.
		time.Sleep(3 * timeout)
		c.SetDeadline(time.Now().Add(patience))
		if _, err := io.WriteString(c, "ping\n"); err != nil {
			t.Fatalf("writing after a quiet spell: %v", err)
		}
		if line, err := br.ReadString('\n'); err != nil || line != "ping\n" {
			t.Errorf("echo after a quiet spell: %q, %v; want ping", line, err)
		}
	})

	t.Run("idle flood", func(t *testing.T) {
		var conns []net.Conn
		for range 6 {
			c := openRaw(t, p.listen, "GET /ok HTTP/1.1\nHost: gw")
			conns = append(conns, c)
		}
		for i, c := range conns {
			// The first response, then the server closes the idle
			// keep-alive connection.
			if got := closedBy(t, c, patience); got != 200 {
				t.Errorf("idle connection %d: answered %d, want 200 then closed", i, got)
			}
		}
		normal("after the idle flood")
	})

	t.Run("connection cap", func(t *testing.T) {
		// The test's own keep-alive connections hold no slot...
		testClient.CloseIdleConnections()
		http.DefaultClient.CloseIdleConnections()
		// ...and eight connections that send nothing hold every slot.
		var held []net.Conn
		for range 8 {
			c, err := net.Dial("tcp", p.listen)
			if err != nil {
				t.Fatal(err)
			}
			held = append(held, c)
		}
		var answered atomic.Int64 // UnixNano of the answer
		done := make(chan int, 1)
		go func() {
			resp, err := (&http.Client{Timeout: patience}).Get("http://" + p.listen + "/ok")
			if err != nil {
				done <- 0
				return
			}
			resp.Body.Close()
			answered.Store(time.Now().UnixNano())
			done <- resp.StatusCode
		}()
		// Give the over-cap caller time to be served if nothing held it.
		time.Sleep(timeout / 2)
		released := time.Now().UnixNano()
		if answered.Load() != 0 {
			t.Errorf("a ninth connection was served while eight held every slot")
		}
		for _, c := range held {
			c.Close()
		}
		if got := <-done; got != 200 {
			t.Fatalf("the waiting caller: %d, want 200 once slots were free", got)
		}
		if a := answered.Load(); a < released {
			t.Errorf("the waiting caller was answered before any slot was released")
		}
		normal("after the cap")
	})
}

// A real serve process with a minimum body rate of 1000 bytes a second
// after a grace of 1s (and an inactivity timeout far longer): a body that
// keeps moving at a tenth of the rate is cut with 408 and its upstream read
// ends, counted as a body timeout; a body at twenty times the rate is
// passed whole. Nothing here depends on how fast the machine is beyond
// those margins: the slow body never reaches the rate, and the fast one
// stays above it unless the test's writer stalls for most of a second.
func TestServeProcessSlowBodyRate(t *testing.T) {
	bin := buildBinary(t)
	up := newSlowUpstream(t, time.Millisecond)
	cfgPath := filepath.Join(t.TempDir(), "gateway.yaml")
	writeFile(t, cfgPath, gatewayConfig(memoryStore, "", 100000))
	p := startServeProcess(t, bin, "--config", cfgPath, "--listen", "127.0.0.1:0", "--upstream", up.URL,
		"--admin", "127.0.0.1:0", "--client-body-timeout", "60s",
		"--client-body-min-rate", "1000", "--client-body-rate-grace", "1s")
	m := serveAdminRE.FindStringSubmatch(p.stderr.String())
	if m == nil {
		t.Fatalf("no admin address in the log:\n%s", p.stderr)
	}
	admin := m[1]
	const patience = 30 * time.Second

	// 10 bytes every 100ms: 100 bytes a second, a tenth of the minimum.
	slow := openRaw(t, p.listen, "POST /upload HTTP/1.1\nHost: gw\nX-Test-Name: slow\nContent-Length: 100000")
	stop := make(chan struct{})
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			if _, err := io.WriteString(slow, "0123456789"); err != nil {
				return
			}
		}
	}()
	status := closedBy(t, slow, patience)
	close(stop)
	if status != http.StatusRequestTimeout {
		t.Errorf("a body at a tenth of the minimum rate: answered %d, want 408", status)
	}
	select {
	case err := <-up.ended:
		if err == nil {
			t.Errorf("the slow body was read in full upstream, want it cut")
		}
	case <-time.After(patience):
		t.Fatalf("the upstream is still reading the slow body")
	}
	if got := metricValue(t, admin, "sluice_client_body_timeouts_total"); got != 1 {
		t.Errorf("sluice_client_body_timeouts_total = %v, want 1", got)
	}

	// 2000 bytes every 100ms for 2s: twenty times the minimum.
	const chunk, chunks = 2000, 20
	fast := openRaw(t, p.listen, fmt.Sprintf("POST /upload HTTP/1.1\nHost: gw\nX-Test-Name: fast\nContent-Length: %d\nConnection: close", chunk*chunks))
	piece := strings.Repeat("f", chunk)
	for i := range chunks {
		time.Sleep(100 * time.Millisecond)
		if _, err := io.WriteString(fast, piece); err != nil {
			t.Fatalf("the fast body was cut after %d chunks: %v", i, err)
		}
	}
	if got := closedBy(t, fast, patience); got != 200 {
		t.Errorf("a body at twenty times the minimum rate: answered %d, want 200", got)
	}
	<-up.ended
	up.mu.Lock()
	got := up.bodies["fast"]
	up.mu.Unlock()
	if got != chunk*chunks {
		t.Errorf("the upstream read %d bytes of the fast body, want %d", got, chunk*chunks)
	}
}
