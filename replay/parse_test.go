package replay

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func ns(s string) int64 {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		panic(err)
	}
	return t.UnixNano()
}

func TestCombinedParser(t *testing.T) {
	cases := []struct {
		name  string
		extra []Field
		line  string
		want  Record
	}{
		{"combined", nil,
			`203.0.113.7 - - [30/Nov/2026:10:00:01 +0100] "GET /api/v1/orders?page=2 HTTP/1.1" 200 512 "https://example.com/" "curl/8.5.0"`,
			Record{Time: ns("2026-11-30T09:00:01Z"), Method: "GET", Path: "/api/v1/orders", Peer: "203.0.113.7"}},
		{"common format", nil,
			`203.0.113.7 - alice [30/Nov/2026:10:00:01 -0230] "POST /login HTTP/1.0" 302 0`,
			Record{Time: ns("2026-11-30T12:30:01Z"), Method: "POST", Path: "/login", Peer: "203.0.113.7", User: "alice"}},
		{"IPv6 peer, xff and upstream user", []Field{FieldXFF, FieldUser},
			`2001:db8::1 - - [30/Nov/2026:10:00:01 +0000] "GET / HTTP/2.0" 200 5 "-" "ua" "198.51.100.7, 10.0.0.2" "u-42"`,
			Record{Time: ns("2026-11-30T10:00:01Z"), Method: "GET", Path: "/", Peer: "2001:db8::1", XForwardedFor: "198.51.100.7, 10.0.0.2", User: "u-42"}},
		{"absent extras and a user over remote_user", []Field{FieldXFF, FieldUser, FieldAPIKey},
			`10.0.0.1 - bob [30/Nov/2026:10:00:01 +0000] "GET / HTTP/1.1" 200 5 "-" "ua" "-" "-"`,
			Record{Time: ns("2026-11-30T10:00:01Z"), Method: "GET", Path: "/", Peer: "10.0.0.1"}},
		{"msec and request_time", []Field{FieldMsec, FieldRequestTime},
			`10.0.0.1 - - [30/Nov/2026:10:00:01 +0000] "GET / HTTP/1.1" 200 5 "-" "ua" 1796032801.250 0.200`,
			Record{Time: ns("2026-11-30T10:00:01.05Z"), Method: "GET", Path: "/", Peer: "10.0.0.1"}},
		{"escapes and a percent-encoded path", []Field{FieldSkip, FieldUser},
			`192.0.2.1 - - [30/Nov/2026:10:00:01 +0000] "GET /caf%C3%A9/a%2Fb HTTP/1.1" 200 5 "-" "say \"hi\" \x5C" "x" "\x22q\x22"`,
			Record{Time: ns("2026-11-30T10:00:01Z"), Method: "GET", Path: "/café/a/b", Peer: "192.0.2.1", User: `"q"`}},
		{"absolute-form target", nil,
			`192.0.2.1 - - [30/Nov/2026:10:00:01 +0000] "GET http://example.com/x/y?z HTTP/1.1" 200 5 "-" "ua"`,
			Record{Time: ns("2026-11-30T10:00:01Z"), Method: "GET", Path: "/x/y", Peer: "192.0.2.1"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := &CombinedParser{Extra: c.extra}
			var got Record
			if err := p.Parse([]byte(c.line), &got); err != nil {
				t.Fatal(err)
			}
			if got != c.want {
				t.Errorf("got  %+v\nwant %+v", got, c.want)
			}
		})
	}
}

func TestCombinedParserErrors(t *testing.T) {
	cases := []struct {
		line  string
		kind  error
		field string
	}{
		{`garbage`, ErrSyntax, "line"},
		{`192.0.2.1 - - [30/Nov/2026:10:00:01 +0000] "GET /x`, ErrSyntax, "line"},
		{`192.0.2.1 - - [31/Foo/2026:10:00:01 +0000] "GET / HTTP/1.1" 200 5 "-" "ua"`, ErrTime, "time_local"},
		{`192.0.2.1 - - [31/Feb/2026:10:00:01 +0000] "GET / HTTP/1.1" 200 5 "-" "ua"`, ErrTime, "time_local"},
		{`192.0.2.1 - - [30/Nov/2026:10:00:01 +0000] "-" 408 0 "-" "-"`, ErrNoRequest, "request"},
		{`192.0.2.1 - - [30/Nov/2026:10:00:01 +0000] "\x16\x03\x01" 400 0 "-" "-"`, ErrNoRequest, "request"},
		{`192.0.2.1 - - [30/Nov/2026:10:00:01 +0000] "GET /%zz HTTP/1.1" 400 0 "-" "-"`, ErrNoRequest, "request"},
		{`- - - [30/Nov/2026:10:00:01 +0000] "GET / HTTP/1.1" 200 0 "-" "-"`, ErrSyntax, "remote_addr"},
	}
	for _, c := range cases {
		p := &CombinedParser{}
		var rec Record
		err := p.Parse([]byte(c.line), &rec)
		if !errors.Is(err, c.kind) || !strings.Contains(err.Error(), c.field+":") {
			t.Errorf("%q: got %v, want %v naming %s", c.line, err, c.kind, c.field)
		}
	}
}

func TestJSONParser(t *testing.T) {
	m, err := ParseFieldMap("ip=req.remote_ip|remote_addr,xff=req.headers.X-Forwarded-For|http_x_forwarded_for,path=req.uri|uri")
	if err != nil {
		t.Fatal(err)
	}
	p, err := NewJSONParser(m)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, line string
		want       Record
	}{
		{"nested and header arrays",
			`{"ts": 1796032801.5, "req": {"remote_ip": "2001:db8::5", "method": "x", "uri": "/v1/a?b=c", "headers": {"X-Forwarded-For": ["198.51.100.1", "10.0.0.3"]}}, "method": "PUT", "user": "ann", "extra": [1, {"a": [null, true]}]}`,
			Record{Time: ns("2026-11-30T10:00:01.5Z"), Method: "PUT", Path: "/v1/a", Peer: "2001:db8::5", XForwardedFor: "198.51.100.1, 10.0.0.3", User: "ann"}},
		{"a request line, RFC 3339 time and escapes",
			`{"time":"2026-11-30T11:00:01.25+01:00","remote_addr":"192.0.2.9","request":"GET /caf\u00e9/x HTTP/1.1","user":"\"q\"","api_key":"k\/1"}`,
			Record{Time: ns("2026-11-30T10:00:01.25Z"), Method: "GET", Path: "/café/x", Peer: "192.0.2.9", User: `"q"`, APIKey: "k/1"}},
		{"milliseconds, request_time, null and dashes",
			`{"timestamp":1796032801250,"request_time":"0.250","remote_addr":"192.0.2.9","method":"GET","uri":"/","user":null,"http_x_forwarded_for":"-"}`,
			Record{Time: ns("2026-11-30T10:00:01Z"), Method: "GET", Path: "/", Peer: "192.0.2.9"}},
		{"time_local as a string",
			`{"time":"30/Nov/2026:10:00:01 +0000","remote_addr":"192.0.2.9","method":"GET","uri":"/p"}`,
			Record{Time: ns("2026-11-30T10:00:01Z"), Method: "GET", Path: "/p", Peer: "192.0.2.9"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var got Record
			if err := p.Parse([]byte(c.line), &got); err != nil {
				t.Fatal(err)
			}
			if got != c.want {
				t.Errorf("got  %+v\nwant %+v", got, c.want)
			}
		})
	}
	bad := []struct {
		line  string
		kind  error
		field string
	}{
		{`not json`, ErrSyntax, "line"},
		{`{"time":1,"remote_addr":"192.0.2.9","method":"GET","uri":"/"} trailing`, ErrSyntax, "line"},
		{`{"remote_addr":"192.0.2.9","method":"GET","uri":"/"}`, ErrTime, "time"},
		{`{"time":"yesterday","remote_addr":"192.0.2.9","method":"GET","uri":"/"}`, ErrTime, "time"},
		{`{"time":1,"method":"GET","uri":"/"}`, ErrSyntax, "ip"},
		{`{"time":1,"remote_addr":"192.0.2.9"}`, ErrNoRequest, "method"},
		{`{"time":1,"remote_addr":"192.0.2.9","method":"G T","uri":"/"}`, ErrNoRequest, "method"},
		{`{"time":1,"remote_addr":"192.0.2.9","method":"GET","uri":"/\q"}`, ErrSyntax, "line"},
		{`{"time":1,"remote_addr":"192.0.2.9","method":"GET","uri":"/"` + strings.Repeat(`,"a":[`, 70), ErrSyntax, "line"},
	}
	for _, c := range bad {
		var rec Record
		err := p.Parse([]byte(c.line), &rec)
		if !errors.Is(err, c.kind) || !strings.Contains(err.Error(), c.field+":") {
			t.Errorf("%q: got %v, want %v naming %s", clip(c.line), err, c.kind, c.field)
		}
	}
}

func TestParseFieldMapErrors(t *testing.T) {
	for _, s := range []string{"when=ts", "time", "time=", "ip=a..b"} {
		m, err := ParseFieldMap(s)
		if err == nil {
			_, err = NewJSONParser(m)
		}
		if err == nil {
			t.Errorf("ParseFieldMap(%q): no error", s)
		}
	}
	if _, err := ParseCombinedExtras("xff,cookie"); err == nil || !strings.Contains(err.Error(), `"cookie"`) {
		t.Errorf("ParseCombinedExtras: got %v, want an error naming the field", err)
	}
}
