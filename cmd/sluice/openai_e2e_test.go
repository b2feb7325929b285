package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeLLM is an OpenAI-compatible upstream: POST …/chat/completions
// answers a completion of the request's max_tokens less a varying amount,
// streamed as server-sent events when asked, with the usage when the
// request asks for it (stream_options.include_usage) or does not stream.
// It counts the tokens it served per API key, and what they cost under a
// settle that reads the usage: the usage where it was reported, the
// estimate (max_tokens + the prompt allowance) where it was not.
type fakeLLM struct {
	allowance int64
	mu        sync.Mutex       // guards the maps and n
	charged   map[string]int64 // per Authorization header
	calls     map[string]int
	n         int
}

const fakePromptTokens = 10

func (f *fakeLLM) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !strings.HasSuffix(r.URL.Path, "/chat/completions") {
		http.NotFound(w, r)
		return
	}
	var req struct {
		MaxTokens     int64 `json:"max_tokens"`
		Stream        bool  `json:"stream"`
		StreamOptions struct {
			IncludeUsage bool `json:"include_usage"`
		} `json:"stream_options"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, err.Error(), 400)
		return
	}
	f.mu.Lock()
	f.n++
	completion := req.MaxTokens - int64(f.n*7)%req.MaxTokens // 1 to max_tokens
	total := fakePromptTokens + completion
	reported := !req.Stream || req.StreamOptions.IncludeUsage
	key := r.Header.Get("Authorization")
	if reported {
		f.charged[key] += total
	} else {
		f.charged[key] += req.MaxTokens + f.allowance
	}
	f.calls[key]++
	f.mu.Unlock()
	usage := fmt.Sprintf(`{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d}`, fakePromptTokens, completion, total)
	words := strings.Repeat("tok ", int(completion))
	if !req.Stream {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id":"c","object":"chat.completion","created":1,"model":"fake","choices":[{"index":0,"message":{"role":"assistant","content":%q},"finish_reason":"stop"}],"usage":%s}`, words, usage)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	flush := w.(http.Flusher).Flush
	for i := int64(0); i < completion; i += 16 {
		fmt.Fprintf(w, "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"fake\",\"choices\":[{\"index\":0,\"delta\":{\"content\":%q}}]}\n\n", strings.Repeat("tok ", int(min(16, completion-i))))
		flush()
	}
	fmt.Fprint(w, "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"fake\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n")
	if reported {
		fmt.Fprintf(w, "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"fake\",\"choices\":[],\"usage\":%s}\n\n", usage)
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
	flush()
}

// openaiRules limits tokens per API key (the Authorization header) two
// ways: /exact/ by a day's budget of 1000, /retry/ by 60 a 2 s window,
// each request estimated at max_tokens plus a prompt allowance of 10 and
// settled on usage.total_tokens.
const openaiRules = `store:
  backend: memory
identity:
  api_key_header: Authorization
rules:
  - name: tokens
    method: POST
    path_prefix: /exact/
    scope: api_key
    algorithm: sliding_counter
    limit: 1000
    window: 24h
    settle:
      estimate_field: max_tokens
      estimate_add: 10
      actual_field: usage.total_tokens
  - name: tokens-fast
    method: POST
    path_prefix: /retry/
    scope: api_key
    algorithm: fixed_window
    limit: 60
    window: 2s
    settle:
      estimate_field: max_tokens
      estimate_add: 10
      actual_field: usage.total_tokens
`

// TestOpenAINodeSDK drives sluice serve, in front of an OpenAI-compatible
// upstream that streams and reports usage, with the official OpenAI
// Node.js SDK: a tokens-per-minute limit per API key holds exactly across
// streaming and non-streaming calls, and the SDK's own retries wait out
// the 429s' Retry-After.
func TestOpenAINodeSDK(t *testing.T) {
	if testing.Short() {
		t.Skip("installs the OpenAI SDK with npm")
	}
	t.Parallel()
	node, errNode := exec.LookPath("node")
	npm, errNPM := exec.LookPath("npm")
	if errNode != nil || errNPM != nil {
		fmt.Fprintln(os.Stderr, "SKIP TestOpenAINodeSDK: node and npm are not installed (apt-get install nodejs npm): the OpenAI SDK test did not run")
		t.Skip("node and npm are not installed")
	}
	dir := t.TempDir()
	install := exec.Command(npm, "install", "--no-audit", "--no-fund", "--silent", "openai@4")
	install.Dir = dir
	if out, err := install.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "SKIP TestOpenAINodeSDK: npm install openai failed (%v): the OpenAI SDK test did not run\n%s\n", err, out)
		t.Skipf("npm install openai: %v", err)
	}
	script, err := os.ReadFile(filepath.Join("testdata", "openai", "client.mjs"))
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "client.mjs"), string(script))

	llm := &fakeLLM{allowance: 10, charged: map[string]int64{}, calls: map[string]int{}}
	up := httptest.NewServer(llm)
	t.Cleanup(up.Close)
	cfgPath := filepath.Join(t.TempDir(), "sluice.yaml")
	writeFile(t, cfgPath, openaiRules)
	s := startServe(t, "--config", cfgPath, "--listen", "127.0.0.1:0", "--upstream", up.URL, "--admin", "127.0.0.1:0")
	base := "http://" + s.listen

	run := exec.Command(node, "client.mjs", base+"/exact/v1", base+"/retry/v1")
	run.Dir = dir
	var stderr bytes.Buffer
	run.Stderr = &stderr
	out, err := run.Output()
	if err != nil {
		t.Fatalf("node client.mjs: %v\n%s\nserve:\n%s", err, stderr.String(), s.stderr)
	}
	var res struct {
		Exact []struct {
			I          int     `json:"i"`
			Stream     bool    `json:"stream"`
			Status     int     `json:"status"`
			Total      *int64  `json:"total"`
			RetryAfter *string `json:"retryAfter"`
		} `json:"exact"`
		Retry struct {
			Attempts []struct {
				At         int64   `json:"at"`
				Status     int     `json:"status"`
				RetryAfter *string `json:"retryAfter"`
			} `json:"attempts"`
			Totals []int64 `json:"totals"`
		} `json:"retry"`
	}
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("client output %q: %v", out, err)
	}

	// The exact phase: what the upstream served, at its usage (or the
	// estimate where no usage was reported), is at most the budget, and
	// within one estimate (50) of it once the budget refuses.
	llm.mu.Lock()
	charged, calls := llm.charged["Bearer sk-exact"], llm.calls["Bearer sk-exact"]
	llm.mu.Unlock()
	var ok, streamed, refused int
	for _, c := range res.Exact {
		switch c.Status {
		case 200:
			ok++
			if c.Stream {
				streamed++
			}
		case 429:
			refused++
			if c.RetryAfter == nil {
				t.Errorf("call %d: 429 without Retry-After", c.I)
			}
		default:
			t.Errorf("call %d: status %d", c.I, c.Status)
		}
	}
	t.Logf("exact phase: %d calls served (%d streamed), %d refused, %d tokens charged of 1000", ok, streamed, refused, charged)
	if calls != ok {
		t.Errorf("the upstream served %d calls, the client saw %d succeed", calls, ok)
	}
	if charged > 1000 || charged <= 1000-50 {
		t.Errorf("charged %d tokens under a budget of 1000: want at most 1000, and more than 950 (one estimate short) once refused", charged)
	}
	if streamed == 0 || streamed == ok || refused < 3 {
		t.Errorf("want streaming and non-streaming calls served and three refused, got %d of %d streamed, %d refused", streamed, ok, refused)
	}
	// The next request's headers report the budget after every settle:
	// 1000 less what was charged, less its own estimate (10, no
	// max_tokens).
	req, _ := http.NewRequest("POST", base+"/exact/v1/chat/completions", strings.NewReader(`{"model":"fake","messages":[],"max_tokens":1}`))
	req.Header.Set("Authorization", "Bearer sk-exact")
	if 1000-charged < 11 {
		req.Body = io.NopCloser(strings.NewReader(`{"model":"fake","messages":[],"max_tokens":0}`))
	}
	resp, err := testClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	est := int64(11)
	if 1000-charged < 11 {
		est = 10
	}
	if resp.StatusCode != 200 && 1000-charged >= est {
		t.Errorf("a request of estimate %d with %d left: status %d", est, 1000-charged, resp.StatusCode)
	}
	if resp.StatusCode == 200 {
		if got, want := resp.Header.Get("X-RateLimit-Remaining"), strconv.FormatInt(1000-charged-est, 10); got != want {
			t.Errorf("X-RateLimit-Remaining after the settles: %s, want %s", got, want)
		}
	}

	// The retry phase: each 429 carries a Retry-After, and the SDK's next
	// attempt waits at least that long; all three calls succeed.
	if len(res.Retry.Totals) != 3 {
		t.Fatalf("retry phase: %d calls succeeded, want 3", len(res.Retry.Totals))
	}
	waits := 0
	for i, a := range res.Retry.Attempts {
		if a.Status != 429 {
			continue
		}
		if a.RetryAfter == nil || i+1 >= len(res.Retry.Attempts) {
			t.Fatalf("attempt %d: 429 without Retry-After, or not retried", i)
		}
		ra, err := strconv.Atoi(*a.RetryAfter)
		if err != nil {
			t.Fatalf("attempt %d: Retry-After %q", i, *a.RetryAfter)
		}
		if gap := time.Duration(res.Retry.Attempts[i+1].At-a.At) * time.Millisecond; gap < time.Duration(ra)*time.Second-50*time.Millisecond {
			t.Errorf("attempt %d: the SDK retried %v after a 429 with Retry-After %ds", i, gap, ra)
		}
		waits++
	}
	if waits == 0 {
		t.Error("retry phase: no 429 met; the budget of 60 should refuse the second call of 50")
	}
	t.Logf("retry phase: %d attempts, %d waits on Retry-After", len(res.Retry.Attempts), waits)
}

// TestServeSettleEdges puts serve in front of an upstream that streams
// slowly, fails, or would take a body it may not: a client that hangs up
// mid-stream keeps its estimate, an upstream error is settled at zero, and
// a body over max_body is refused with 413 before the upstream sees it.
func TestServeSettleEdges(t *testing.T) {
	var upstreamCalls sync.Map // path → count
	hung := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := upstreamCalls.LoadOrStore(r.URL.Path, new(int))
		*n.(*int)++
		io.Copy(io.Discard, r.Body)
		switch {
		case strings.HasSuffix(r.URL.Path, "/fail"):
			http.Error(w, "overloaded", http.StatusServiceUnavailable)
		case strings.HasSuffix(r.URL.Path, "/hang"):
			w.Header().Set("Content-Type", "text/event-stream")
			io.WriteString(w, "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n")
			w.(http.Flusher).Flush()
			select { // the client hangs up; the usage never comes
			case <-r.Context().Done():
			case <-time.After(10 * time.Second):
			}
			close(hung)
		default:
			io.WriteString(w, `{"usage":{"total_tokens":1}}`)
		}
	}))
	t.Cleanup(up.Close)
	cfgPath := filepath.Join(t.TempDir(), "sluice.yaml")
	writeFile(t, cfgPath, `store:
  backend: memory
identity:
  api_key_header: Authorization
rules:
  - name: tokens
    method: POST
    path_prefix: /v1/
    scope: api_key
    algorithm: sliding_counter
    limit: 1000
    window: 24h
    settle:
      estimate_field: max_tokens
      max_body: 4096
      actual_field: usage.total_tokens
`)
	s := startServe(t, "--config", cfgPath, "--listen", "127.0.0.1:0", "--upstream", up.URL, "--admin", "127.0.0.1:0")
	base := "http://" + s.listen
	send := func(path, key, body string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest("POST", base+path, strings.NewReader(body))
		req.Header.Set("Authorization", key)
		resp, err := testClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	// remaining is what key has left, read from a request of estimate 1
	// that the upstream settles at 1.
	remaining := func(key string) string {
		t.Helper()
		resp := send("/v1/probe", key, `{"max_tokens":1}`)
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.Header.Get("X-RateLimit-Remaining")
	}

	// A client that hangs up mid-stream: the estimate, 300, stands.
	resp := send("/v1/hang", "Bearer a", `{"max_tokens":300}`)
	buf := make([]byte, 16)
	if _, err := io.ReadAtLeast(resp.Body, buf, 1); err != nil {
		t.Fatalf("the stream's first event did not arrive unbuffered: %v", err)
	}
	resp.Body.Close() // hang up
	select {
	case <-hung:
	case <-time.After(10 * time.Second):
		t.Fatal("the upstream never saw the client go")
	}
	// The settle runs as serve's handler returns, after the upstream's:
	// wait until the metrics count the estimate as stood, then read it.
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, metrics := get(t, "http://"+s.admin+"/metrics")
		if strings.Contains(metrics, `sluice_settles_total{result="unsettled",rule="tokens"} 1`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the hung-up stream's estimate never counted as stood:\n%s", metrics)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got := remaining("Bearer a"); got != "699" { // 1000 - 300 (stood) - 1 (the probe's estimate)
		t.Fatalf("remaining after a client hung up on a 300 estimate: %s, want 699", got)
	}

	// An upstream error: settled at zero.
	resp = send("/v1/fail", "Bearer b", `{"max_tokens":300}`)
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 503 {
		t.Fatalf("upstream error: status %d", resp.StatusCode)
	}
	if got := remaining("Bearer b"); got != "999" {
		t.Fatalf("remaining after an upstream error: %s, want 999 (nothing charged)", got)
	}

	// A body over max_body: 413, and the upstream never sees it.
	resp = send("/v1/big", "Bearer c", `{"max_tokens":1,"pad":"`+strings.Repeat("x", 5000)+`"}`)
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("big body: status %d, want 413", resp.StatusCode)
	}
	if _, seen := upstreamCalls.Load("/v1/big"); seen {
		t.Fatal("the upstream saw the body refused")
	}
	if got := remaining("Bearer c"); got != "999" {
		t.Fatalf("remaining after a refused body: %s, want 999", got)
	}

	// A reload with a wrong settle section is refused whole, naming the
	// rule and the field; the rule in force goes on settling.
	cfg, err := os.ReadFile(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	replaceFile(t, cfgPath, strings.Replace(string(cfg), "      max_body: 4096\n", "      max_body: 4096\n      actual_header: X-Tokens\n", 1))
	waitMetric(t, s.admin, `sluice_config_reloads_total{result="error"}`, 1)
	if !strings.Contains(s.stderr.String(), "rules[0].settle") || !strings.Contains(s.stderr.String(), `rule \"tokens\"`) && !strings.Contains(s.stderr.String(), "rule tokens") {
		t.Errorf("the refused reload's log names no rule and field:\n%s", s.stderr)
	}
	if got := remaining("Bearer c"); got != "998" {
		t.Fatalf("remaining after a refused reload: %s, want 998 (the probe before settled at 1)", got)
	}
}
