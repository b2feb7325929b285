package main

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
)

// TestServeProxiesBodiesAndEncoding: bodies larger than the proxy's copy
// buffers come back whole and unmixed on request after request (the
// buffers are reused), and the client's Accept-Encoding reaches the
// upstream as the client sent it, none included: the proxy neither asks
// for gzip on the client's behalf nor decodes what the upstream sends.
func TestServeProxiesBodiesAndEncoding(t *testing.T) {
	t.Parallel()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Saw-Accept-Encoding", fmt.Sprintf("%q", r.Header.Values("Accept-Encoding")))
		if r.URL.Path == "/gzip" {
			w.Header().Set("Content-Encoding", "gzip")
			io.WriteString(w, "not really gzip")
			return
		}
		var n int
		fmt.Sscanf(r.URL.Query().Get("n"), "%d", &n)
		w.Write(bytes.Repeat([]byte{r.URL.Query().Get("c")[0]}, n))
	}))
	t.Cleanup(up.Close)
	cfg := filepath.Join(t.TempDir(), "sluice.yaml")
	writeFile(t, cfg, serveConfig(memoryStore, 5))
	s := startServe(t, "--config", cfg, "--listen", "127.0.0.1:0", "--upstream", up.URL)
	// A transport that adds no Accept-Encoding of its own.
	client := &http.Client{Transport: &http.Transport{DisableCompression: true}}
	t.Cleanup(client.CloseIdleConnections)
	for i, n := range []int{100 << 10, 3, 40 << 10, 0, 32 << 10, 1} {
		c := byte('a' + i)
		resp, err := client.Get(fmt.Sprintf("http://%s/files?n=%d&c=%c", s.listen, n, c))
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if got, want := resp.StatusCode, http.StatusOK; got != want {
			t.Fatalf("request %d: status %d, want %d", i, got, want)
		}
		if !bytes.Equal(body, bytes.Repeat([]byte{c}, n)) {
			t.Errorf("request %d: got %d bytes (%.10q…), want %d × %q", i, len(body), body, n, c)
		}
		if got, want := resp.Header.Get("X-Saw-Accept-Encoding"), "[]"; got != want {
			t.Errorf("request %d without Accept-Encoding: upstream saw %s, want %s", i, got, want)
		}
	}
	req, _ := http.NewRequest(http.MethodGet, "http://"+s.listen+"/gzip", nil)
	req.Header.Set("Accept-Encoding", "gzip")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if got, want := resp.Header.Get("X-Saw-Accept-Encoding"), `["gzip"]`; got != want {
		t.Errorf("upstream saw Accept-Encoding %s, want %s", got, want)
	}
	if got, want := resp.Header.Get("Content-Encoding"), "gzip"; got != want || string(body) != "not really gzip" {
		t.Errorf("Content-Encoding %q, body %q: want the upstream's %q and its bytes as sent", got, body, want)
	}
}
