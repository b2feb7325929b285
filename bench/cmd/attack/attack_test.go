package main

import (
	"net"
	"os"
	"testing"
	"time"
)

func TestParseStat(t *testing.T) {
	// A command name with a space and a parenthesis, as a process may
	// name itself; utime 250 and stime 30 ticks.
	line := "4242 (my (odd) cmd) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 30 0 0 20 0 3 0 100 1000 200 18446744073709551615"
	got, err := parseStat(line)
	if err != nil {
		t.Fatal(err)
	}
	if want := 2.8; got != want {
		t.Errorf("parseStat = %v, want %v", got, want)
	}
	if _, err := parseStat("4242 (cut"); err == nil {
		t.Error("parseStat of a line without its fields: no error")
	}
	if _, err := cpuSeconds(os.Getpid()); err != nil {
		t.Errorf("cpuSeconds of this process: %v", err)
	}
}

func TestReadUntilClosed(t *testing.T) {
	a, b := net.Pipe()
	go func() {
		b.Write([]byte("HTTP/1.1 408 Request Timeout\r\nConnection: close\r\n\r\n"))
		b.Close()
	}()
	if got, want := readUntilClosed(a), "HTTP/1.1 408 Request Timeout"; got != want {
		t.Errorf("readUntilClosed = %q, want %q", got, want)
	}
	a, b = net.Pipe()
	go b.Close()
	if got, want := readUntilClosed(a), "closed (EOF)"; got != want {
		t.Errorf("readUntilClosed of a silent close = %q, want %q", got, want)
	}
}

func TestFloodSummary(t *testing.T) {
	r := floodRow{took: 30 * time.Second, outcomes: []connOutcome{
		{cut: true, after: 10 * time.Second, how: "closed (EOF)"},
		{cut: true, after: 12 * time.Second, how: "closed (EOF)"},
		{},
		{err: os.ErrDeadlineExceeded},
	}}
	cut, held, failed := r.summary()
	if want := "2, after 10.0 / 12.0 / 12.0 s (min / median / max); 2× closed (EOF)"; cut != want {
		t.Errorf("cut = %q, want %q", cut, want)
	}
	if want := "1, still open after 30 s"; held != want {
		t.Errorf("held = %q, want %q", held, want)
	}
	if want := "1: i/o timeout"; failed != want {
		t.Errorf("failed = %q, want %q", failed, want)
	}
}
