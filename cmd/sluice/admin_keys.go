package main

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/engine"
	"github.com/sluice-go/sluice/identity"
)

// The admin listener's security and its caller endpoints.
//
// The listener binds to loopback by default: an --admin address without a
// host (":9090") is 127.0.0.1's. Bound anywhere else (0.0.0.0, a public
// address) serve refuses to start unless --admin-token-file names a file
// holding a bearer token; then every admin endpoint but /healthz asks for
// "Authorization: Bearer TOKEN", compared in constant time, and answers
// 401 with no detail to a request without it. With a token, loopback
// requests need it too.
//
//	POST /v1/reset  rule=NAME&key=KEY (a form, or JSON {"rule":…,"key":…}):
//	                forget the caller's record under the rule; logged with
//	                the remote address and whether a token was presented
//	GET  /v1/keys?rule=NAME&key=KEY: the caller's state under the rule (its
//	                override applied): the decoded record, what it may
//	                spend now, when it is full again
//
// KEY is a caller key as an operator writes it (identity.Identifier.ParseKey
// under the identity section in force): user:alice, key: and the raw API
// key, keyhash:HEX, ip:192.0.2.1, global, and a level's key within its
// tenant in a group of rules, {header:acme}user:alice.

// Browsers reach the admin listener too: a page the operator opens can
// POST a form to 127.0.0.1, and a name the attacker controls can be made
// to resolve to 127.0.0.1 (DNS rebinding) so that its scripts read the
// answers as same-origin. So every endpoint but /healthz refuses
//
//   - a Host that is neither an IP literal, localhost, the listener's own
//     host as --admin names it, nor a name --admin-host (serve: also the
//     configuration's server.admin_hosts) lists: 421 Misdirected Request.
//     DNS rebinding needs the attacker's name in Host.
//   - a state-changing request (POST, PUT, DELETE, PATCH) a browser marks as
//     cross-origin (Sec-Fetch-Site other than same-origin or none, or an
//     Origin whose host is not the Host): 403, net/http's
//     CrossOriginProtection. A client that sends neither header, such as
//     curl, is not a browser and passes.
//
// /healthz answers whatever the Host, since a probe on a listener bound to
// 0.0.0.0 names the pod's address or its service's name.

// minAdminTokenLen is the shortest token --admin-token-file may hold.
const minAdminTokenLen = 16

// maxAdminBody bounds a /v1/reset request body.
const maxAdminBody = 64 << 10

// adminGuard guards every admin endpoint but /healthz: it refuses a
// foreign Host and a cross-origin state-changing request, and asks for the
// bearer token when one is configured.
type adminGuard struct {
	tokenHash [sha256.Size]byte // of the token; zero when there is none
	hasToken  bool
	hosts     map[string]bool // the names Host may hold besides IP literals and localhost, lower case
}

// addAdminHostFlag defines --admin-host on fs.
func addAdminHostFlag(fs *flag.FlagSet) *listFlag {
	var l listFlag
	fs.Var(&l, "admin-host", "a host `name` the admin listener answers to besides IP addresses, localhost and its own --admin host (such as the name Prometheus scrapes it by); repeat for several, or separate them by commas")
	return &l
}

// checkAdminHosts checks the names of --admin-host (or a configuration's
// admin_hosts): each a host name without port, scheme or path.
func checkAdminHosts(what string, names []string) error {
	for _, n := range names {
		if n == "" || strings.ContainsAny(n, ":/ \t[]@") || len(n) > 253 {
			return usagef("%s %s: want a host name such as sluice-admin.internal, without port or scheme", what, quoteBounded(n))
		}
	}
	return nil
}

// quoteBounded quotes s, cut to at most 200 bytes.
func quoteBounded(s string) string {
	if len(s) > 200 {
		return strconv.Quote(s[:200]) + "…"
	}
	return strconv.Quote(s)
}

// splitHosts splits each of names at commas, dropping empty pieces.
func splitHosts(names []string) []string {
	var out []string
	for _, n := range names {
		for _, h := range strings.Split(n, ",") {
			if h = strings.TrimSpace(h); h != "" {
				out = append(out, h)
			}
		}
	}
	return out
}

// readAdminToken reads the token of --admin-token-file: the file's
// content without surrounding white space, at least minAdminTokenLen
// bytes.
func readAdminToken(path string) (adminGuard, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return adminGuard{}, fmt.Errorf("--admin-token-file: %w", err)
	}
	tok := strings.TrimSpace(string(data))
	if len(tok) < minAdminTokenLen {
		return adminGuard{}, usagef("--admin-token-file %s: the token is %d bytes, want at least %d (such as the output of `openssl rand -hex 32`)", path, len(tok), minAdminTokenLen)
	}
	return adminGuard{tokenHash: sha256.Sum256([]byte(tok)), hasToken: true}, nil
}

// listenAdmin binds the admin listener at addr (an empty host means
// 127.0.0.1) and returns it with its guard. Bound to an address that is
// not loopback, it needs a token: without one it is a *usageError and
// nothing stays bound.
// checkAdminFlags checks --admin and --admin-token-file as listenAdmin
// will, without binding: called before the store is opened, so that a
// mistake there is the first error an operator sees, not one found after
// the store was opened (and, on Pebble or bbolt, locked).
func checkAdminFlags(addr, tokenFile string) error {
	if addr == "" {
		return nil
	}
	var g adminGuard
	if tokenFile != "" {
		var err error
		if g, err = readAdminToken(tokenFile); err != nil {
			return err
		}
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return usagef("--admin %s: want host:port, or :port for loopback", addr)
	}
	if ip, perr := netip.ParseAddr(host); perr == nil && !ip.IsLoopback() && !g.hasToken {
		return usagef("--admin %s: %s is not loopback: its endpoints (resets among them) would be open to the network; give --admin-token-file, or bind to 127.0.0.1", addr, host)
	}
	return nil
}

func listenAdmin(addr, tokenFile string, hosts []string) (net.Listener, adminGuard, error) {
	var g adminGuard
	if tokenFile != "" {
		var err error
		if g, err = readAdminToken(tokenFile); err != nil {
			return nil, g, err
		}
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, g, usagef("--admin %s: want host:port, or :port for loopback", addr)
	}
	g.hosts = map[string]bool{}
	for _, h := range append(hosts, host) {
		if h != "" {
			g.hosts[strings.ToLower(strings.TrimSuffix(h, "."))] = true
		}
	}
	if host == "" {
		addr = net.JoinHostPort("127.0.0.1", port)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, g, fmt.Errorf("--admin: %w", err)
	}
	if tcp, ok := ln.Addr().(*net.TCPAddr); ok && !tcp.IP.IsLoopback() && !g.hasToken {
		ln.Close()
		return nil, g, usagef("--admin %s: binds %s, which is not loopback: its endpoints (resets among them) would be open to the network; give --admin-token-file, or bind to 127.0.0.1", addr, ln.Addr())
	}
	return ln, g, nil
}

// authorized reports whether r carries the token (always true without
// one).
func (g adminGuard) authorized(r *http.Request) bool {
	if !g.hasToken {
		return true
	}
	tok, ok := bearer(r)
	if !ok {
		return false
	}
	// Hashing first makes the comparison constant-time in the length too.
	sum := sha256.Sum256([]byte(tok))
	return subtle.ConstantTimeCompare(sum[:], g.tokenHash[:]) == 1
}

// bearer returns the token of an "Authorization: Bearer …" header.
func bearer(r *http.Request) (string, bool) {
	scheme, tok, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || tok == "" {
		return "", false
	}
	return strings.TrimSpace(tok), true
}

// hostAllowed reports whether the Host of r names the listener: an IP
// literal, localhost, or a name of g.hosts. A request without Host (HTTP/1.0)
// is not a browser's and passes.
func (g adminGuard) hostAllowed(r *http.Request) bool {
	host := r.Host
	if host == "" {
		return true
	}
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimSuffix(strings.TrimPrefix(host, "["), "]"), ".")
	if _, err := netip.ParseAddr(host); err == nil {
		return true
	}
	host = strings.ToLower(host)
	return host == "localhost" || g.hosts[host]
}

// wrap guards every path of h but /healthz: a foreign Host is answered
// 421, a cross-origin state-changing request 403, a request without the
// token (when one is configured) 401.
func (g adminGuard) wrap(h http.Handler) http.Handler {
	xorigin := http.NewCrossOriginProtection()
	xorigin.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "cross-origin request refused: the admin endpoints answer no browser page of another origin", http.StatusForbidden)
	}))
	guarded := xorigin.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !g.authorized(r) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="sluice admin"`)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	}))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			h.ServeHTTP(w, r)
			return
		}
		if !g.hostAllowed(r) {
			http.Error(w, "misdirected request: the admin listener answers to IP addresses, localhost and the names of --admin-host only", http.StatusMisdirectedRequest)
			return
		}
		guarded.ServeHTTP(w, r)
	})
}

// adminKeys serves /v1/reset and /v1/keys over the engine and the rules in
// force.
type adminKeys struct {
	// inForce returns the rules and the identity section in force, of
	// one configuration (a reload replaces both at once).
	inForce func() (*sluice.Ruleset, *identity.Identifier)
	eng     *engine.Engine
	log     *slog.Logger
}

// newAdminKeys returns the caller endpoints over eng and the configuration
// inForce returns, whose identity section reads the caller keys.
func newAdminKeys(inForce func() (*sluice.Ruleset, *identity.Identifier), eng *engine.Engine, log *slog.Logger) *adminKeys {
	return &adminKeys{inForce: inForce, eng: eng, log: log}
}

// mount returns a handler serving the caller endpoints and passing every
// other request to rest.
func (a *adminKeys) mount(rest http.Handler) http.Handler {
	return mountCallerEndpoints(a.reset, a.keys, rest)
}

// mountCallerEndpoints returns a handler serving POST /v1/reset with reset
// and GET /v1/keys with keys, answering another method on either with 405
// and its Allow header, and passing every other request to rest.
func mountCallerEndpoints(reset, keys http.HandlerFunc, rest http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/reset", reset)
	mux.HandleFunc("GET /v1/keys", keys)
	for path, allow := range map[string]string{"/v1/reset": "POST", "/v1/keys": "GET, HEAD"} {
		mux.HandleFunc(path, func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Allow", allow)
			adminError(w, http.StatusMethodNotAllowed, "use %s", allow)
		})
	}
	mux.Handle("/", rest)
	return mux
}

// adminError answers an error as JSON {"error": …}.
func adminError(w http.ResponseWriter, code int, format string, args ...any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(map[string]string{"error": fmt.Sprintf(format, args...)})
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}

// target reads the rule and caller of a request: the rule in force, the
// caller's key, and the rule with the caller's override. ok is false when
// it has answered the request.
func (a *adminKeys) target(w http.ResponseWriter, ruleName, written string) (rs *sluice.Ruleset, rule *sluice.CompiledRule, key string, ok bool) {
	if ruleName == "" || written == "" {
		adminError(w, http.StatusBadRequest, "give rule and key (a caller key such as user:alice, key:API_KEY or ip:192.0.2.1)")
		return nil, nil, "", false
	}
	rs, id := a.inForce()
	if rule = rs.Rule(ruleName); rule == nil {
		adminError(w, http.StatusNotFound, "no rule named %q is in force", ruleName)
		return nil, nil, "", false
	}
	key, err := id.ParseKey(written)
	if err != nil {
		adminError(w, http.StatusBadRequest, "key: %v", err)
		return nil, nil, "", false
	}
	return rs, rule, key, true
}

// reset is POST /v1/reset.
func (a *adminKeys) reset(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, maxAdminBody)
	var in struct {
		Rule string `json:"rule"`
		Key  string `json:"key"`
	}
	if ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); ct == "application/json" {
		if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
			adminError(w, http.StatusBadRequest, "want a JSON object {\"rule\": …, \"key\": …}")
			return
		}
	} else {
		if err := r.ParseForm(); err != nil {
			adminError(w, http.StatusBadRequest, "want a form of rule and key")
			return
		}
		in.Rule, in.Key = r.PostForm.Get("rule"), r.PostForm.Get("key")
	}
	_, rule, key, ok := a.target(w, in.Rule, in.Key)
	if !ok {
		return
	}
	_, tokenGiven := bearer(r)
	shown := identity.ShowKey(key)
	removed, err := resetRecord(r.Context(), a.eng, rule.Limit(), key)
	if err != nil {
		a.log.Error("sluice serve: admin reset failed", "rule", rule.Name(), "key", shown, "remote", r.RemoteAddr, "token", tokenGiven, "err", err)
		adminError(w, http.StatusServiceUnavailable, "the store could not reset the key")
		return
	}
	a.log.Info("sluice serve: admin reset", "rule", rule.Name(), "key", shown, "remote", r.RemoteAddr, "token", tokenGiven, "removed", removed)
	answerReset(w, removed, map[string]any{"rule": rule.Name(), "key": shown})
}

// resetRecord removes the record of key under l and reports whether there
// was one.
func resetRecord(ctx context.Context, eng *engine.Engine, l engine.Limit, key string) (removed bool, err error) {
	rec, err := eng.Record(ctx, l, key)
	if err != nil {
		return false, err
	}
	if err := eng.Reset(ctx, l, key); err != nil {
		return false, err
	}
	return rec != nil, nil
}

// answerReset answers a reset: 200 with "reset": true when a record was
// removed; 404 with "reset": false when there was none, for a reset that
// found nothing has not unblocked anyone (a mistyped key or rule most
// often).
func answerReset(w http.ResponseWriter, removed bool, body map[string]any) {
	body["reset"] = removed
	if !removed {
		body["error"] = "no record to reset: the caller has spent nothing under this limit, or the key or the limit is not the one it is counted under (GET /v1/keys shows a caller's key as it is counted)"
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		enc.Encode(body)
		return
	}
	writeJSON(w, body)
}

// keyStateJSON is the body of GET /v1/keys.
type keyStateJSON struct {
	Rule string `json:"rule"`
	// Key is the caller key the store holds, as identity.ShowKey shows
	// it (an API key as keyhash:HEX), which /v1/reset takes back.
	Key string `json:"key"`
	// Override reports that the caller has its own limit under the rule;
	// Limit, Window and Burst are then the caller's.
	Override  bool   `json:"override"`
	Algorithm string `json:"algorithm"`
	Limit     int64  `json:"limit"`
	Window    string `json:"window"`
	Burst     int64  `json:"burst"`
	Cost      int64  `json:"cost"`
	// Record is the stored state, decoded as sluice inspect shows it; nil
	// when the caller has none (fresh, or expired).
	Record *stateView `json:"record"`
	// Raw is the record in hex.
	Raw string `json:"raw,omitempty"`
	// RecordError says why a record did not decode (it is then treated as
	// absent by the next decision).
	RecordError string `json:"record_error,omitempty"`
	// Remaining is what the caller may spend now; AllowedNow whether a
	// request of the rule's cost would pass.
	Remaining  int64 `json:"remaining"`
	AllowedNow bool  `json:"allowed_now"`
	// RetryAfterSeconds is how long until a request of the rule's cost
	// would pass (0 when it would now).
	RetryAfterSeconds float64 `json:"retry_after_seconds"`
	// FullInSeconds and FullAt say when the caller's whole capacity is
	// back.
	FullInSeconds float64 `json:"full_in_seconds"`
	FullAt        string  `json:"full_at"`
}

// keys is GET /v1/keys.
func (a *adminKeys) keys(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	rs, rule, key, ok := a.target(w, q.Get("rule"), q.Get("key"))
	if !ok {
		return
	}
	c := rs.Override(rule, key)
	spec := c.Rule()
	out := keyStateJSON{Rule: c.Name(), Key: identity.ShowKey(key), Override: c != rule, Algorithm: string(spec.Algorithm),
		Limit: spec.Limit, Window: spec.Window.String(), Burst: spec.Burst, Cost: spec.Cost}
	if err := out.read(r.Context(), a.eng, c.Limit(), key, c.Cost()); err != nil {
		keyStoreError(w, a.log, "sluice serve: admin keys", err)
		return
	}
	writeJSON(w, out)
}

// read fills the caller's state from eng: the stored record of key under
// l, decoded, and what a request of cost would get now (peeked, nothing
// spent).
func (out *keyStateJSON) read(ctx context.Context, eng *engine.Engine, l engine.Limit, key string, cost int64) error {
	rec, err := eng.Record(ctx, l, key)
	if err != nil {
		return err
	}
	if rec != nil {
		out.Raw = hex.EncodeToString(rec)
		if st, _, derr := decodeState(rec); derr != nil {
			out.RecordError = derr.Error()
		} else {
			out.Record = &st
		}
	}
	now := eng.Clock().Now() // one instant: full_at is now plus the reset exactly
	st, err := sluice.PeekStateAt(ctx, eng, l, key, cost, now)
	if err != nil {
		return err
	}
	out.AllowedNow, out.Remaining = st.Allowed, st.Remaining
	out.RetryAfterSeconds = st.RetryAfter.Seconds()
	out.FullInSeconds = st.Reset.Seconds()
	out.FullAt = time.Unix(0, now+int64(st.Reset)).UTC().Format(time.RFC3339Nano)
	return nil
}

// keyStoreError answers an engine error of /v1/keys, logging under msg
// what is not the store's.
func keyStoreError(w http.ResponseWriter, log *slog.Logger, msg string, err error) {
	if errors.Is(err, engine.ErrClosed) || errors.Is(err, engine.ErrStore) {
		adminError(w, http.StatusServiceUnavailable, "the store could not be read")
		return
	}
	log.Error(msg, "err", err)
	adminError(w, http.StatusInternalServerError, "cannot read the key")
}
