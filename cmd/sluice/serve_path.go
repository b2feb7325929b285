package main

import (
	"flag"
	"fmt"
	"net/http"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/config"
)

// addForwardPathFlag registers --forward-path on fs: which spelling of a
// request's path serve sends upstream, over the configuration file's
// forward_path (which a reload changes).
func addForwardPathFlag(fs *flag.FlagSet) *string {
	return fs.String("forward-path", "", "the path sent `upstream`, over the configuration's forward_path: canonical (default: the path the rules matched, \"//\", \".\" and \"..\" resolved) or original (as the client spelt it)")
}

// checkForwardPath checks --forward-path's value v; empty is not given.
func checkForwardPath(v config.ForwardPath) error {
	if v != "" && !v.Valid() {
		return fmt.Errorf("--forward-path %s: want %s or %s", v, config.ForwardCanonical, config.ForwardOriginal)
	}
	return nil
}

// forwardPathOf returns the forward path in force under cfg: the flag's
// when given, else cfg's, else ForwardCanonical.
func forwardPathOf(flag config.ForwardPath, cfg *config.Config) config.ForwardPath {
	switch {
	case flag != "":
		return flag
	case cfg.ForwardPath != "":
		return cfg.ForwardPath
	}
	return config.ForwardCanonical
}

// forwardDirector wraps the reverse proxy's director next for the forward
// path mode: under ForwardCanonical the outgoing request's path is the
// canonical one (sluice.CanonicalPath of the decoded path, re-encoded as
// net/url encodes a path, so a %2F goes as "/") before next joins it to the
// upstream's base path; the query is sent as received. Under
// ForwardOriginal, next alone: the path goes as received, byte for byte.
func forwardDirector(mode config.ForwardPath, next func(*http.Request)) func(*http.Request) {
	if mode != config.ForwardCanonical {
		return next
	}
	return func(r *http.Request) {
		canonicalizeURLPath(r)
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
