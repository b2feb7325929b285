package replay

import (
	"errors"
	"testing"

	"github.com/sluice-go/sluice/identity"
)

// checkParsed asserts what every parsed record must hold, and that an
// error is one of the parsers' kinds.
func checkParsed(t *testing.T, rec *Record, err error) {
	if err != nil {
		if !errors.Is(err, ErrSyntax) && !errors.Is(err, ErrNoRequest) && !errors.Is(err, ErrTime) {
			t.Fatalf("error of no known kind: %v", err)
		}
		return
	}
	if _, err := identity.ParsePeer(rec.Peer); err != nil || !isToken(rec.Method) || rec.Path == "" {
		t.Fatalf("parsed a record without a peer, method or path: %+v", rec)
	}
	// A time may be moved back by a request_time, never past the epoch
	// by more than one.
	if rec.Time >= maxTime || rec.Time < -maxTime {
		t.Fatalf("parsed a time out of range: %+v", rec)
	}
}

func FuzzCombined(f *testing.F) {
	for _, s := range []string{
		`203.0.113.7 - - [30/Nov/2026:10:00:01 +0100] "GET /api/v1/orders?page=2 HTTP/1.1" 200 512 "https://example.com/" "curl/8.5.0" "198.51.100.7, 10.0.0.2" "u-1" 1796032801.250 0.042`,
		`2001:db8::1 - bob [30/Nov/2026:10:00:01 +0000] "GET /caf%C3%A9 HTTP/2.0" 200 5`,
		`198.51.100.4 - - [30/Nov/2026:09:08:06 +0000] "\x16\x03\x01\x02\x00" 400 157 "-" "-" "-" "-"`,
		`198.51.100.4 - - [30/Nov/2026:09:00:38 +0000] "GET /api/v1/ord`,
		`1.2.3.4 - - [] "" - - "\" "\\x"`,
	} {
		f.Add([]byte(s))
	}
	extra := []Field{FieldXFF, FieldUser, FieldMsec, FieldRequestTime}
	f.Fuzz(func(t *testing.T, line []byte) {
		p := &CombinedParser{Extra: extra}
		var rec Record
		err := p.Parse(line, &rec)
		checkParsed(t, &rec, err)
		// The parser's cache of the last time read answers as a fresh one.
		var again Record
		err2 := (&CombinedParser{Extra: extra}).Parse(line, &again)
		if (err == nil) != (err2 == nil) || rec != again {
			t.Fatalf("a fresh parser reads the line otherwise: %+v %v / %+v %v", rec, err, again, err2)
		}
	})
}

func FuzzJSON(f *testing.F) {
	for _, s := range []string{
		`{"time":"2026-11-30T11:00:01.25+01:00","remote_addr":"192.0.2.9","request":"GET /caf\u00e9/x HTTP/1.1","user":"\"q\"","api_key":"k\/1"}`,
		`{"ts": 1796032801.5, "req": {"remote_ip": "2001:db8::5", "uri": "/v1/a?b=c", "headers": {"X-Forwarded-For": ["198.51.100.1", "10.0.0.3"]}}, "method": "PUT", "extra": [1, {"a": [null, true]}]}`,
		`{"timestamp":1796032801250,"request_time":"0.250","remote_addr":"192.0.2.9","method":"GET","uri":"/","user":null}`,
		`{"a":[[[[[[{}]]]]]],"b":-1.5e+3}`,
		`{"time":"2026-11-30T09:03:16Z","remote_addr":"198.51.100.4","meth`,
	} {
		f.Add([]byte(s))
	}
	m, err := ParseFieldMap("ip=req.remote_ip|remote_addr,xff=req.headers.X-Forwarded-For|http_x_forwarded_for,path=req.uri|uri|path")
	if err != nil {
		f.Fatal(err)
	}
	p, err := NewJSONParser(m)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		var rec Record
		checkParsed(t, &rec, p.Parse(line, &rec))
	})
}
