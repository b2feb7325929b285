package main

import (
	"crypto/tls"
	"crypto/x509"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"
)

// tlsFlags are a listener's TLS: --tls-cert and --tls-key (both or
// neither), and --tls-client-ca for mutual TLS.
type tlsFlags struct {
	cert, key, clientCA *string
}

// addTLSFlags registers the TLS flags of the listener named what.
func addTLSFlags(fs *flag.FlagSet, what string) tlsFlags {
	return tlsFlags{
		cert:     fs.String("tls-cert", "", "serve "+what+" over TLS with this PEM certificate `file` (the chain, leaf first); with --tls-key. Reread when it changes"),
		key:      fs.String("tls-key", "", "the PEM private key `file` of --tls-cert"),
		clientCA: fs.String("tls-client-ca", "", "require clients to present a certificate signed by one in this PEM `file` (mutual TLS); with --tls-cert. Reread when it changes"),
	}
}

// config returns the server TLS configuration the flags ask for, or nil
// for none. The files are read now, so that a mistake is an error at
// start, and again whenever one of them changes (checked at most once a
// second, on a handshake): a renewed certificate is served without a
// restart, and a file that no longer loads keeps the last good one, logged.
//
// protos are the ALPN protocols the listener speaks (gRPC needs "h2").
func (f tlsFlags) config(log *slog.Logger, protos ...string) (*tls.Config, error) {
	switch {
	case *f.cert == "" && *f.key == "" && *f.clientCA == "":
		return nil, nil
	case *f.cert == "" || *f.key == "":
		return nil, usagef("--tls-cert and --tls-key: give both (and --tls-client-ca only with them)")
	}
	src := &tlsFiles{cert: *f.cert, key: *f.key, ca: *f.clientCA, protos: protos, log: log}
	if err := src.load(); err != nil {
		return nil, err
	}
	cfg := &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: protos,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return src.current(), nil
		},
	}
	return cfg, nil
}

// tlsFiles holds a listener's certificate and client CA, reread when the
// files change.
type tlsFiles struct {
	cert, key, ca string
	protos        []string
	log           *slog.Logger

	mu      sync.Mutex
	cfg     *tls.Config // what handshakes use now
	mods    [3]time.Time
	checked time.Time
}

// load reads the files and, when they load, puts them in force.
func (t *tlsFiles) load() error {
	pair, err := tls.LoadX509KeyPair(t.cert, t.key)
	if err != nil {
		return fmt.Errorf("--tls-cert %s, --tls-key %s: %w", t.cert, t.key, err)
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{pair}, NextProtos: t.protos}
	if t.ca != "" {
		pem, err := os.ReadFile(t.ca)
		if err != nil {
			return fmt.Errorf("--tls-client-ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return fmt.Errorf("--tls-client-ca %s: holds no PEM certificate", t.ca)
		}
		cfg.ClientCAs, cfg.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	t.cfg, t.mods = cfg, t.modTimes()
	return nil
}

// modTimes returns the files' modification times (zero for one missing).
func (t *tlsFiles) modTimes() [3]time.Time {
	var m [3]time.Time
	for i, p := range []string{t.cert, t.key, t.ca} {
		if p == "" {
			continue
		}
		if st, err := os.Stat(p); err == nil {
			m[i] = st.ModTime()
		}
	}
	return m
}

// current returns the configuration in force, first rereading the files
// if a second has passed since the last look and one of them changed.
func (t *tlsFiles) current() *tls.Config {
	t.mu.Lock()
	defer t.mu.Unlock()
	if now := time.Now(); now.Sub(t.checked) >= time.Second {
		t.checked = now
		if m := t.modTimes(); m != t.mods {
			prev := t.cfg
			if err := t.load(); err != nil {
				t.cfg, t.mods = prev, m // keep the last good one; log this change once
				t.log.Error("sluice: the TLS files changed but do not load; the previous certificate stays in use", "err", err)
			} else {
				t.log.Info("sluice: TLS certificate reloaded", "cert", t.cert, "client_ca", t.ca)
			}
		}
	}
	return t.cfg
}
