package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
)

// benchServe runs serve in-process on config in front of a trivial
// upstream, and returns the proxy's base URL.
func benchServe(b *testing.B, config string) string {
	b.Helper()
	body := []byte("ok\n")
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		w.Write(body)
	}))
	b.Cleanup(up.Close)
	path := filepath.Join(b.TempDir(), "sluice.yaml")
	if err := os.WriteFile(path, []byte(config), 0o644); err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	readyc := make(chan string, 1)
	go func() {
		done <- runServe(ctx, []string{"--config", path, "--listen", "127.0.0.1:0", "--upstream", up.URL},
			io.Discard, io.Discard, func(l, _ string) { readyc <- l })
	}()
	var listen string
	select {
	case listen = <-readyc:
	case code := <-done:
		b.Fatalf("serve exited with %d", code)
	}
	b.Cleanup(func() {
		cancel()
		if code := <-done; code != 0 {
			b.Errorf("serve exited with %d", code)
		}
	})
	return "http://" + listen
}

// BenchmarkServe measures requests through serve on loopback, client and
// upstream included: a profile of it (-cpuprofile, -memprofile) shows what
// the proxy hop costs per request.
func BenchmarkServe(b *testing.B) {
	for _, bc := range []struct{ name, config string }{
		{"memory", "store:\n  backend: memory\nidentity:\n  user_header: X-User-ID\nrules:\n  - name: open\n    path_prefix: /open\n    scope: user\n    algorithm: token_bucket\n    limit: 1000000000\n    window: 1s\n"},
		{"norule", "store:\n  backend: memory\nrules: []\n"},
	} {
		b.Run(bc.name, func(b *testing.B) {
			base := benchServe(b, bc.config)
			tr := &http.Transport{MaxIdleConnsPerHost: 64, DisableCompression: true}
			defer tr.CloseIdleConnections()
			client := &http.Client{Transport: tr}
			var seq int64
			b.SetParallelism(8)
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					req, _ := http.NewRequest("GET", base+"/open/item", nil)
					req.Header["X-User-Id"] = []string{fmt.Sprint(seq % 64)}
					resp, err := client.Do(req)
					if err != nil {
						b.Error(err)
						return
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != 200 {
						b.Errorf("status %d", resp.StatusCode)
						return
					}
				}
			})
		})
	}
}
