// Package gen writes real-looking access logs for replay's tests and
// benchmarks: a day's worth of callers (IPv4 and IPv6 clients, some behind
// a proxy that sets X-Forwarded-For, signed-in users, API keys, a few
// heavy hitters) in the combined format or as JSON lines, with the
// anomalies real logs have: lines out of time order by a few seconds (a
// line is written when its request ends), a few far older than that, and
// lines that do not parse.
//
// The output is a pure function of the Options: the same seed writes the
// same bytes.
package gen

import (
	"bufio"
	"container/heap"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strconv"
	"time"
)

// Options say what to write.
type Options struct {
	// Seed chooses the traffic.
	Seed uint64
	// Lines is how many lines to write, bad ones included.
	Lines int
	// Start is the time of the first request.
	Start time.Time
	// Rate is the mean requests per second.
	Rate float64
	// Callers is how many distinct clients send them.
	Callers int
	// JSON writes JSON lines instead of the combined format with "xff"
	// and "user" appended.
	JSON bool
	// Anomalies adds bad lines (one in 500), lines up to 3s out of order
	// (one in 20) and lines far older than a reorder window (one in 1500).
	Anomalies bool
}

// The proxy addresses that forward with X-Forwarded-For, for a rules
// file's trusted_proxies.
const TrustedProxies = "10.0.0.0/8"

type client struct {
	ip     string
	viaLB  bool // behind the trusted proxy: peer 10.x, XFF holds ip
	user   string
	apiKey string
	weight float64
}

var paths = []struct {
	method, path string
	weight       float64
}{
	{"GET", "/api/v1/orders", 30},
	{"GET", "/api/v1/orders/%d", 20},
	{"POST", "/api/v1/orders", 6},
	{"GET", "/api/v1/search?q=%d", 12},
	{"POST", "/login", 3},
	{"GET", "/static/app.%d.js", 15},
	{"GET", "/", 8},
	{"GET", "/healthz", 2},
	{"GET", "/api/v1/caf%%C3%%A9/%d", 1},
}

var agents = []string{
	"Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0 Safari/537.36",
	"Mozilla/5.0 (Macintosh; Intel Mac OS X 14_5) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.5 Safari/605.1.15",
	"curl/8.5.0",
	"python-requests/2.32.3",
	"okhttp/4.12.0",
}

// Write writes o.Lines lines to w.
func Write(w io.Writer, o Options) error {
	rng := rand.New(rand.NewPCG(o.Seed, o.Seed^0x5eed))
	if o.Callers <= 0 {
		o.Callers = 200
	}
	if o.Rate <= 0 {
		o.Rate = 5
	}
	clients := make([]client, o.Callers)
	var total float64
	for i := range clients {
		c := &clients[i]
		if rng.IntN(5) == 0 {
			c.ip = fmt.Sprintf("2001:db8:%x:%x::%x", rng.IntN(1<<16), rng.IntN(1<<16), 1+rng.IntN(1<<16))
		} else {
			c.ip = fmt.Sprintf("%d.%d.%d.%d", 1+rng.IntN(222), rng.IntN(256), rng.IntN(256), 1+rng.IntN(254))
		}
		c.viaLB = rng.IntN(3) == 0
		if rng.IntN(2) == 0 {
			c.user = fmt.Sprintf("u%04d", i)
		}
		if rng.IntN(6) == 0 {
			c.apiKey = fmt.Sprintf("sk_live_%016x", rng.Uint64())
		}
		// A long tail: a few callers send most requests.
		c.weight = 1 / float64(1+i)
		if i < 3 {
			c.weight *= 8
		}
		total += c.weight
	}
	cum := make([]float64, len(clients))
	acc := 0.0
	for i, c := range clients {
		acc += c.weight / total
		cum[i] = acc
	}
	var ptotal float64
	for _, p := range paths {
		ptotal += p.weight
	}

	bw := bufio.NewWriterSize(w, 64<<10)
	t := o.Start.UnixNano()
	// The lines not yet written, a heap by when they reach the file (then
	// by the order they were made, so that the output is one order).
	var pending lineHeap
	flushBefore := func(at int64) error {
		for len(pending) > 0 && pending[0].at <= at {
			l := heap.Pop(&pending).(line)
			if _, err := bw.WriteString(l.text); err != nil {
				return err
			}
		}
		return nil
	}
	// Now and then one of the busier callers bursts: a script or a
	// scraper sending one kind of request far faster than the rest.
	var burst struct {
		left   int
		rate   float64
		client int
		path   int
	}
	for n := 0; n < o.Lines; n++ {
		if burst.left == 0 && rng.IntN(700) == 0 {
			burst.left = 40 + rng.IntN(260)
			burst.rate = 2 + rng.Float64()*8
			burst.client = rng.IntN(min(20, len(clients)))
			burst.path = rng.IntN(5)
		}
		rate := o.Rate
		if burst.left > 0 {
			rate += burst.rate
		}
		t += int64(rng.ExpFloat64() / rate * 1e9)
		if o.Anomalies && rng.IntN(500) == 0 {
			heap.Push(&pending, line{t, n, badLine(rng, o.JSON, t) + "\n"})
			continue
		}
		i, _ := slices.BinarySearch(cum, rng.Float64())
		c := clients[min(i, len(clients)-1)]
		x := rng.Float64() * ptotal
		p := paths[0]
		for _, q := range paths {
			if x -= q.weight; x < 0 {
				p = q
				break
			}
		}
		if burst.left > 0 && rng.Float64() < burst.rate/rate {
			burst.left--
			c, p = clients[burst.client], paths[burst.path]
		}
		target := p.path
		if p.path != "/" && p.path != "/login" && p.path != "/healthz" && p.path != "/api/v1/orders" {
			target = fmt.Sprintf(p.path, rng.IntN(1000))
		}
		took := int64(rng.ExpFloat64()*0.05e9) / 1e6 * 1e6 // request time, ms
		if rng.IntN(50) == 0 {
			took = int64(rng.IntN(3000)) * 1e6 // a slow request
		}
		end := t + took // the time logged: when the request ended
		// When the line reaches the file: nginx workers buffer their lines
		// and flush every few seconds, so lines of one second interleave
		// with those of others; now and then a worker stalls.
		written := end
		if o.Anomalies && rng.IntN(20) == 0 {
			written += int64(rng.IntN(3000)) * 1e6
		}
		if o.Anomalies && rng.IntN(1500) == 0 {
			written += int64(30+rng.IntN(60)) * 1e9
		}
		peer, xff := c.ip, ""
		if c.viaLB {
			peer = fmt.Sprintf("10.0.%d.%d", rng.IntN(4), 1+rng.IntN(8))
			xff = c.ip
			if rng.IntN(10) == 0 {
				xff = "192.0.2.66, " + c.ip // a spoofed hop to the left
			}
		}
		status := 200
		if rng.IntN(30) == 0 {
			status = 404
		}
		var text string
		if o.JSON {
			text = jsonLine(end, took, peer, xff, c, p.method, target, status, agents[rng.IntN(len(agents))])
		} else {
			text = combinedLine(end, peer, xff, c, p.method, target, status, rng.IntN(20000), agents[rng.IntN(len(agents))])
		}
		heap.Push(&pending, line{written, n, text + "\n"})
		if n%256 == 0 {
			if err := flushBefore(t - 100e9); err != nil {
				return err
			}
		}
	}
	if err := flushBefore(1<<63 - 1); err != nil {
		return err
	}
	return bw.Flush()
}

// line is a line waiting to reach the file.
type line struct {
	at   int64 // when it reaches the file
	seq  int   // the order it was made in
	text string
}

// lineHeap orders lines by at, then seq.
type lineHeap []line

func (h lineHeap) Len() int { return len(h) }
func (h lineHeap) Less(i, j int) bool {
	return h[i].at < h[j].at || h[i].at == h[j].at && h[i].seq < h[j].seq
}
func (h lineHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *lineHeap) Push(x any)   { *h = append(*h, x.(line)) }
func (h *lineHeap) Pop() any {
	old := *h
	l := old[len(old)-1]
	*h = old[:len(old)-1]
	return l
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func combinedLine(at int64, peer, xff string, c client, method, target string, status, size int, agent string) string {
	ts := time.Unix(0, at).UTC().Format("02/Jan/2006:15:04:05 -0700")
	return fmt.Sprintf(`%s - - [%s] "%s %s HTTP/1.1" %d %d "-" "%s" "%s" "%s"`,
		peer, ts, method, target, status, size, agent, dash(xff), dash(c.user))
}

func jsonLine(at, took int64, peer, xff string, c client, method, target string, status int, agent string) string {
	ts := time.Unix(0, at).UTC().Format("2006-01-02T15:04:05.000Z07:00")
	s := `{"time":"` + ts + `","remote_addr":"` + peer + `","method":"` + method + `","uri":` + strconv.Quote(target) +
		`,"status":` + strconv.Itoa(status) + `,"request_time":"` + strconv.FormatFloat(float64(took)/1e9, 'f', 3, 64) + `"`
	if xff != "" {
		s += `,"http_x_forwarded_for":"` + xff + `"`
	}
	if c.user != "" {
		s += `,"user":"` + c.user + `"`
	}
	if c.apiKey != "" {
		s += `,"api_key":"` + c.apiKey + `"`
	}
	return s + `,"agent":` + strconv.Quote(agent) + `,"tags":["edge",{"pop":"ams"}]}`
}

// badLine is one of the lines real logs hold that are not requests.
func badLine(rng *rand.Rand, json bool, at int64) string {
	ts := time.Unix(0, at).UTC().Format("02/Jan/2006:15:04:05 -0700")
	if json {
		switch rng.IntN(3) {
		case 0:
			return `{"time":"` + time.Unix(0, at).UTC().Format(time.RFC3339) + `","remote_addr":"198.51.100.4","meth` // cut short
		case 1:
			return `{"time":"yesterday","remote_addr":"198.51.100.4","method":"GET","uri":"/"}`
		}
		return `not json at all`
	}
	switch rng.IntN(4) {
	case 0: // a TLS handshake on the plain port
		return `198.51.100.4 - - [` + ts + `] "\x16\x03\x01\x02\x00\x01\x00\x01\xFC\x03\x03" 400 157 "-" "-" "-" "-"`
	case 1: // a connection closed before a request
		return `198.51.100.4 - - [` + ts + `] "-" 408 0 "-" "-" "-" "-"`
	case 2: // cut short by a rotation
		return `198.51.100.4 - - [` + ts + `] "GET /api/v1/ord`
	}
	return `198.51.100.4 - - [31/Foo/2026:25:61:00 +0000] "GET / HTTP/1.1" 200 1 "-" "-" "-" "-"`
}
