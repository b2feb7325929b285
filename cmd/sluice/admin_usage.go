package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/engine"
	"github.com/sluice-go/sluice/httplimit"
	"github.com/sluice-go/sluice/identity"
	"github.com/sluice-go/sluice/throttled"
)

// How much is left, and who is being throttled: serve's usage endpoints.
//
//	GET /v1/usage?user=ID|api_key=KEY&ip=ADDR&plan=P&header.NAME=V[&method=M&path=/P&host=H]
//	    (admin listener): a named caller's usage under every rule that
//	    applies to it, or, with path, under the rules that request would
//	    meet; nothing spent, no record written (httplimit.UsageBody). A
//	    header.NAME is read as the trusted proxy would send it.
//	GET /v1/usage[?method=M&path=/P&host=H] (--usage-listen): the same
//	    for the request's own caller, identified as the proxy identifies
//	    it; a query naming a caller is refused 400.
//	GET /v1/throttled?rule=NAME&limit=N&cursor=C (admin listener): the
//	    callers this process denied or found near their limit, per rule,
//	    in pages (package throttled).

// maxThrottledPage is the most callers one page of /v1/throttled lists;
// defaultThrottledPage is a page's size when limit is not given.
const (
	maxThrottledPage     = 1000
	defaultThrottledPage = 50
)

// namedCallerKey is the context key of the caller an operator named, for
// the admin usage reader's IdentityFunc.
type namedCallerKey struct{}

// namedCaller is the admin usage reader's IdentityFunc: the caller the
// query named.
func namedCaller(r *http.Request) (identity.Caller, error) {
	who, _ := r.Context().Value(namedCallerKey{}).(identity.Caller)
	return who, nil
}

// adminUsageParams are the query parameters /v1/usage on the admin
// listener reads, besides header.NAME.
var adminUsageParams = map[string]bool{"user": true, "api_key": true, "ip": true, "plan": true, "method": true, "path": true, "host": true}

// maxUsageHeaders is how many header.NAME parameters /v1/usage takes.
const maxUsageHeaders = 8

// usageReader is what the admin's /v1/usage reads a named caller with,
// of one configuration in force.
type usageReader struct {
	// u reads usage; its IdentityFunc is namedCaller.
	u *httplimit.Usage
	// proxy is a trusted proxy's address (the first of
	// identity.trusted_proxies), invalid when none is trusted, and fwd its
	// forwarding header: a caller named with header.NAME parameters is
	// read as coming through that proxy, which a header: rule believes.
	proxy netip.Addr
	fwd   identity.ForwardingHeader
}

// validHeaderValue reports whether v could be a header's value in a request
// net/http serves: no control byte but a tab. A caller named otherwise is
// one the proxy never meets.
func validHeaderValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if b := v[i]; b < ' ' && b != '\t' || b == 0x7f {
			return false
		}
	}
	return true
}

// adminUsage is GET /v1/usage on the admin listener: the usage of the
// caller the query names, read by the reader in force.
func adminUsage(in func() usageReader) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		headers := http.Header{}
		for p, vs := range q {
			name, isHeader := strings.CutPrefix(p, "header.")
			switch {
			case isHeader && (name == "" || len(name) > 128 || !identity.ValidHeaderName(name)):
				adminError(w, http.StatusBadRequest, "%s: want header.NAME, NAME a header name such as X-Org-ID", quoteBounded(p))
				return
			case !isHeader && !adminUsageParams[p]:
				adminError(w, http.StatusBadRequest, "unknown parameter %s: want user, api_key, ip, plan, header.NAME, method, path or host", quoteBounded(p))
				return
			case len(vs) > 1:
				adminError(w, http.StatusBadRequest, "%s: given %d times, want once", quoteBounded(p), len(vs))
				return
			case (isHeader || p == "user" || p == "api_key") && !validHeaderValue(vs[0]):
				adminError(w, http.StatusBadRequest, "%s: a control byte, which no request's header can carry", quoteBounded(p))
				return
			case isHeader:
				if len(headers) == maxUsageHeaders {
					adminError(w, http.StatusBadRequest, "more than %d header.NAME parameters", maxUsageHeaders)
					return
				}
				headers.Set(name, vs[0])
			}
		}
		rd := in()
		method, path, err := httplimit.CheckRequest(q.Get("method"), q.Get("path"))
		if err != nil {
			adminError(w, http.StatusBadRequest, "%v", err)
			return
		}
		remote := ""
		var client netip.Addr
		if ip := q.Get("ip"); ip != "" {
			a, err := netip.ParseAddr(ip)
			if err != nil {
				adminError(w, http.StatusBadRequest, "ip %s: want an IP address such as 192.0.2.1", quoteBounded(ip))
				return
			}
			client = a.Unmap()
			remote = netip.AddrPortFrom(client, 0).String()
		}
		if len(headers) > 0 {
			// A header: rule believes its header from a trusted proxy only:
			// the caller is read as coming through one, which forwards its
			// address.
			switch {
			case !rd.proxy.IsValid():
				adminError(w, http.StatusBadRequest, "header.NAME: a header: rule believes its header from a trusted proxy only, and identity.trusted_proxies lists none")
				return
			case !client.IsValid():
				adminError(w, http.StatusBadRequest, "header.NAME needs ip: the caller is read as coming through a trusted proxy, which forwards its address")
				return
			}
			remote = netip.AddrPortFrom(rd.proxy, 0).String()
			if rd.fwd == identity.Forwarded {
				node := client.String()
				if client.Is6() {
					node = strconv.Quote("[" + node + "]")
				}
				headers.Set("Forwarded", "for="+node)
			} else {
				headers.Set("X-Forwarded-For", client.String())
			}
		}
		who := identity.Caller{UserID: q.Get("user"), APIKey: q.Get("api_key"), Plan: q.Get("plan")}
		req := (&http.Request{Method: http.MethodGet, URL: &url.URL{Path: "/"}, Header: headers, Host: q.Get("host"), RemoteAddr: remote}).
			WithContext(context.WithValue(r.Context(), namedCallerKey{}, who))
		got, err := rd.u.Of(req, method, path)
		if err != nil {
			var ke *sluice.KeyError
			switch {
			case errors.Is(err, identity.ErrNoPeerAddr) && errors.As(err, &ke) && ke.Rule != nil:
				adminError(w, http.StatusBadRequest, "rule %s counts this caller by its IP address: give ip", ke.Rule.Name())
			case errors.Is(err, identity.ErrBadIdentity) || errors.As(err, &ke):
				adminError(w, http.StatusBadRequest, "bad caller: %s", quoteBounded(err.Error()))
			case errors.Is(err, engine.ErrStore) || errors.Is(err, engine.ErrClosed):
				adminError(w, http.StatusServiceUnavailable, "the store could not be read")
			default:
				adminError(w, http.StatusInternalServerError, "cannot read the caller's usage")
			}
			return
		}
		httplimit.WriteUsage(w, got)
	}
}

// throttledJSON is the body of GET /v1/throttled.
type throttledJSON struct {
	// Rule is the rule listed, "" for every rule.
	Rule string `json:"rule,omitempty"`
	// Callers are this page's, those denied now first.
	Callers []throttledCallerJSON `json:"callers"`
	// Total is the callers listed in all pages; NextCursor the cursor of
	// the next page, absent after the last.
	Total      int    `json:"total"`
	NextCursor string `json:"next_cursor,omitempty"`
	// PerRule is how many callers a rule keeps; Scope says what the list
	// sees: this process's decisions only.
	PerRule int    `json:"per_rule"`
	Scope   string `json:"scope"`
}

// throttledCallerJSON is one caller of GET /v1/throttled.
type throttledCallerJSON struct {
	Rule string `json:"rule"`
	// Key is the caller's key as /v1/keys and /v1/reset take it (an API
	// key as keyhash:HEX); KeyCut reports one cut to its first bytes.
	Key    string `json:"key"`
	KeyCut bool   `json:"key_cut,omitempty"`
	Shadow bool   `json:"shadow,omitempty"`
	// DeniedNow reports that the caller's last denial still holds, until
	// DeniedUntil.
	DeniedNow   bool   `json:"denied_now"`
	DeniedUntil string `json:"denied_until,omitempty"`
	// Denied and Near count its denials and near-limit allows (a tenth of
	// the limit left or less) since it took its entry.
	Denied uint64 `json:"denied"`
	Near   uint64 `json:"near_limit"`
	// Remaining and Limit are the last decision's.
	Remaining int64  `json:"remaining"`
	Limit     int64  `json:"limit"`
	FirstSeen string `json:"first_seen"`
	LastSeen  string `json:"last_seen"`
}

// adminThrottled is GET /v1/throttled: a page of tr's list. perRule is
// tr's bound, for the answer.
func adminThrottled(tr *throttled.Tracker, perRule int, rules func() *sluice.Ruleset) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if tr == nil {
			adminError(w, http.StatusNotFound, "the throttled list is off (--throttled-per-rule 0)")
			return
		}
		q := r.URL.Query()
		for p := range q {
			if p != "rule" && p != "limit" && p != "cursor" {
				adminError(w, http.StatusBadRequest, "unknown parameter %s: want rule, limit or cursor", quoteBounded(p))
				return
			}
		}
		rule := q.Get("rule")
		if rule != "" && rules().Rule(rule) == nil {
			adminError(w, http.StatusNotFound, "no rule named %s is in force", quoteBounded(rule))
			return
		}
		n := defaultThrottledPage
		if s := q.Get("limit"); s != "" {
			v, err := strconv.Atoi(s)
			if err != nil || v < 1 || v > maxThrottledPage {
				adminError(w, http.StatusBadRequest, "limit %s: want 1 to %d", quoteBounded(s), maxThrottledPage)
				return
			}
			n = v
		}
		page, err := tr.List(rule, n, q.Get("cursor"))
		if err != nil {
			adminError(w, http.StatusBadRequest, "cursor %s: want the next_cursor of a previous page", quoteBounded(q.Get("cursor")))
			return
		}
		out := throttledJSON{Rule: rule, Callers: make([]throttledCallerJSON, 0, len(page.Callers)), Total: page.Total,
			NextCursor: page.Next, PerRule: perRule, Scope: "this process: each gateway of a fleet lists the callers it decided"}
		for _, c := range page.Callers {
			cj := throttledCallerJSON{Rule: c.Rule, Key: identity.ShowKey(c.Key), KeyCut: c.Cut, Shadow: c.Shadow,
				DeniedNow: c.DeniedNow, Denied: c.Denied, Near: c.Near, Remaining: c.Remaining, Limit: c.Limit,
				FirstSeen: c.First.UTC().Format(time.RFC3339Nano), LastSeen: c.Last.UTC().Format(time.RFC3339Nano)}
			if c.DeniedNow {
				cj.DeniedUntil = c.Until.UTC().Format(time.RFC3339Nano)
			}
			out.Callers = append(out.Callers, cj)
		}
		writeJSON(w, out)
	}
}

// mountUsageEndpoints returns a handler serving GET /v1/usage with usage
// and GET /v1/throttled with list, answering another method on either with
// 405 and its Allow header, and passing every other request to rest.
func mountUsageEndpoints(usage, list http.HandlerFunc, rest http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/usage", usage)
	mux.HandleFunc("GET /v1/throttled", list)
	for _, path := range []string{"/v1/usage", "/v1/throttled"} {
		mux.HandleFunc(path, func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Allow", "GET, HEAD")
			adminError(w, http.StatusMethodNotAllowed, "use GET")
		})
	}
	mux.Handle("/", rest)
	return mux
}

// usageListener is --usage-listen: a listener answering GET /v1/usage for
// the request's own caller (httplimit.Usage) and nothing else.
type usageListener struct {
	srv *http.Server
	ln  net.Listener
}

// listenUsage binds addr (TLS with tlsCfg when not nil) to serve own's
// usage reader, the one in force.
func listenUsage(addr string, tlsCfg *tls.Config, own func() *httplimit.Usage, errorLog *log.Logger) (*usageListener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--usage-listen: %w", err)
	}
	if tlsCfg != nil {
		ln = tls.NewListener(ln, tlsCfg)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/usage", func(w http.ResponseWriter, r *http.Request) { own().ServeHTTP(w, r) })
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		adminError(w, http.StatusNotFound, "this listener answers GET /v1/usage only")
	})
	return &usageListener{srv: &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 75 * time.Second, ErrorLog: errorLog}, ln: ln}, nil
}
