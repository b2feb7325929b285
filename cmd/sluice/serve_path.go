package main

import (
	"flag"
	"fmt"
	"net/http"
	"sync/atomic"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/config"
)

// pathForwarder chooses the spelling of a request's path that serve sends
// upstream (forward_path): the canonical path the rules matched, by
// default, or the path as the client spelt it. The --forward-path flag,
// when given, holds it; otherwise the configuration file's forward_path
// does, and a reload changes it.
type pathForwarder struct {
	flag *string      // --forward-path; empty when not given
	mode atomic.Value // the config.ForwardPath in force
}

// addForwardPathFlag registers --forward-path on fs.
func addForwardPathFlag(fs *flag.FlagSet) *pathForwarder {
	f := &pathForwarder{}
	f.flag = fs.String("forward-path", "", "the path sent `upstream`, over the configuration's forward_path: canonical (default: the path the rules matched, \"//\", \".\" and \"..\" resolved) or original (as the client spelt it)")
	return f
}

// start checks the flag and puts the mode in force: the flag's, or cfg's.
func (f *pathForwarder) start(cfg *config.Config) error {
	if v := config.ForwardPath(*f.flag); v != "" && !v.Valid() {
		return fmt.Errorf("--forward-path %s: want %s or %s", *f.flag, config.ForwardCanonical, config.ForwardOriginal)
	}
	f.reload(cfg)
	return nil
}

// reload puts cfg's forward_path in force, unless the flag holds it.
func (f *pathForwarder) reload(cfg *config.Config) {
	m := config.ForwardPath(*f.flag)
	if m == "" {
		m = cfg.ForwardPath
	}
	if m == "" {
		m = config.ForwardCanonical
	}
	f.mode.Store(m)
}

// director wraps the reverse proxy's director next: under
// ForwardCanonical the outgoing request's path is the canonical one
// (sluice.CanonicalPath of the decoded path, re-encoded as net/url encodes
// a path, so a %2F goes as "/") before next joins it to the upstream's
// base path; the query is sent as received. Under ForwardOriginal, next
// alone: the path goes as received, byte for byte.
func (f *pathForwarder) director(next func(*http.Request)) func(*http.Request) {
	return func(r *http.Request) {
		if f.mode.Load().(config.ForwardPath) == config.ForwardCanonical {
			canonicalizeURLPath(r)
		}
		next(r)
	}
}

// canonicalizeURLPath puts r's URL path in canonical form: Path becomes
// sluice.CanonicalPath(Path), and RawPath, which keeps the client's own
// encoding, is dropped, so that the path is sent as net/url encodes Path.
// The "*" of OPTIONS * is no path, and stays.
func canonicalizeURLPath(r *http.Request) {
	if r.URL.Path == "*" {
		return
	}
	r.URL.Path = sluice.CanonicalPath(r.URL.Path)
	r.URL.RawPath = ""
}
