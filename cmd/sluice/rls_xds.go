package main

import (
	"crypto/tls"
	"crypto/x509"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sluice-go/sluice/envoyrls"
	"github.com/sluice-go/sluice/envoyrls/rlsfile"
	"github.com/sluice-go/sluice/envoyrls/xds"
	"github.com/sluice-go/sluice/metrics"
)

// xdsFlags are rls's flags for a configuration from an xDS control plane.
type xdsFlags struct {
	server, node, metadata, headers *string
	caFile, certFile, keyFile, name *string
}

func addXDSFlags(fs *flag.FlagSet) xdsFlags {
	return xdsFlags{
		server:   fs.String("xds", "", "take the configuration from the xDS control plane at this `host:port` (envoyproxy/ratelimit's CONFIG_TYPE=GRPC_XDS_SOTW) instead of --config"),
		node:     fs.String("xds-node", xds.DefaultNodeID, "the node `id` sent to the control plane, which keys its snapshots by it"),
		metadata: fs.String("xds-node-metadata", "", "the node's metadata, `key=value,...`"),
		headers:  fs.String("xds-headers", "", "gRPC metadata sent on the xDS stream, `key:value,...` (an authorization header, say)"),
		caFile:   fs.String("xds-tls-ca", "", "dial the control plane over TLS, trusting the certificates of this PEM `file`"),
		certFile: fs.String("xds-tls-cert", "", "the client certificate `file` (PEM) presented to the control plane; with --xds-tls-key"),
		keyFile:  fs.String("xds-tls-key", "", "the private key `file` of --xds-tls-cert"),
		name:     fs.String("xds-tls-server-name", "", "the `name` the control plane's certificate must carry; empty means its host"),
	}
}

// rlsXDSEnv is envoyproxy/ratelimit's xDS settings, read when
// CONFIG_TYPE=GRPC_XDS_SOTW.
type rlsXDSEnv struct {
	on                 bool
	server, node       string
	metadata, headers  string
	tls                bool
	ca, cert, key, san string
	backoff, maxWait   time.Duration
	maxMessage         int
}

// readXDSEnv reads the CONFIG_GRPC_XDS_* and XDS_CLIENT_* settings, with
// envoyproxy/ratelimit's defaults.
func readXDSEnv(getenv func(string) string) (rlsXDSEnv, []string, error) {
	var e rlsXDSEnv
	var notes []string
	switch t := getenv("CONFIG_TYPE"); strings.ToUpper(t) {
	case "", "FILE":
		return e, nil, nil
	case "GRPC_XDS_SOTW":
		e.on = true
	default:
		return e, nil, fmt.Errorf("CONFIG_TYPE=%s: want FILE or GRPC_XDS_SOTW", t)
	}
	e.server = getenv("CONFIG_GRPC_XDS_SERVER_URL")
	if e.server == "" {
		e.server = "localhost:18000"
	}
	e.node = getenv("CONFIG_GRPC_XDS_NODE_ID")
	e.metadata = getenv("CONFIG_GRPC_XDS_NODE_METADATA")
	e.headers = getenv("CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS")
	if v := getenv("CONFIG_GRPC_XDS_SERVER_USE_TLS"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return e, nil, fmt.Errorf("CONFIG_GRPC_XDS_SERVER_USE_TLS=%s: want true or false", v)
		}
		e.tls = b
	}
	e.ca, e.cert, e.key, e.san = getenv("CONFIG_GRPC_XDS_SERVER_TLS_CACERT"), getenv("CONFIG_GRPC_XDS_CLIENT_TLS_CERT"), getenv("CONFIG_GRPC_XDS_CLIENT_TLS_KEY"), getenv("CONFIG_GRPC_XDS_SERVER_TLS_SAN")
	for _, d := range []struct {
		name string
		to   *time.Duration
	}{{"XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", &e.backoff}, {"XDS_CLIENT_BACKOFF_MAX_INTERVAL", &e.maxWait}} {
		if v := getenv(d.name); v != "" {
			t, err := time.ParseDuration(v)
			if err != nil || t <= 0 {
				return e, nil, fmt.Errorf("%s=%s: want a positive duration such as 10s", d.name, v)
			}
			*d.to = t
		}
	}
	if v := getenv("XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return e, nil, fmt.Errorf("XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES=%s: want a number of bytes", v)
		}
		e.maxMessage = n
	}
	for _, name := range []string{"CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL", "XDS_CLIENT_BACKOFF_RANDOM_FACTOR", "XDS_CLIENT_BACKOFF_JITTER"} {
		if getenv(name) != "" {
			notes = append(notes, name+" is not read: a failed xDS stream is reopened after a jittered wait from XDS_CLIENT_BACKOFF_INITIAL_INTERVAL, doubling up to XDS_CLIENT_BACKOFF_MAX_INTERVAL")
		}
	}
	return e, notes, nil
}

// over fills the flags not given on the command line from e.
func (f xdsFlags) over(e rlsXDSEnv, given map[string]bool) {
	set := func(name string, to *string, v string) {
		if !given[name] && v != "" {
			*to = v
		}
	}
	set("xds", f.server, e.server)
	set("xds-node", f.node, e.node)
	set("xds-node-metadata", f.metadata, e.metadata)
	set("xds-headers", f.headers, e.headers)
	set("xds-tls-cert", f.certFile, e.cert)
	set("xds-tls-key", f.keyFile, e.key)
	set("xds-tls-server-name", f.name, e.san)
	if e.tls {
		set("xds-tls-ca", f.caFile, e.ca)
	}
}

// options builds the client's options from the flags.
func (f xdsFlags) options(e rlsXDSEnv) (xds.Options, error) {
	o := xds.Options{Server: *f.server, NodeID: *f.node, Backoff: e.backoff, MaxBackoff: e.maxWait, MaxMessageSize: e.maxMessage}
	if o.Backoff > 0 && o.MaxBackoff == 0 {
		o.MaxBackoff = max(o.Backoff, xds.DefaultMaxBackoff)
	}
	if o.MaxBackoff > 0 && o.Backoff == 0 {
		o.Backoff = min(o.MaxBackoff, xds.DefaultBackoff)
	}
	if o.MaxBackoff < o.Backoff {
		return o, usagef("XDS_CLIENT_BACKOFF_MAX_INTERVAL %v is shorter than XDS_CLIENT_BACKOFF_INITIAL_INTERVAL %v", o.MaxBackoff, o.Backoff)
	}
	var err error
	// envoyproxy/ratelimit splits the node metadata at '=' and the
	// headers at ':', as its settings do.
	if o.NodeMetadata, err = pairs(*f.metadata, "=", "--xds-node-metadata (CONFIG_GRPC_XDS_NODE_METADATA)"); err != nil {
		return o, err
	}
	if o.Headers, err = pairs(*f.headers, ":", "--xds-headers (CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS)"); err != nil {
		return o, err
	}
	useTLS := *f.caFile != "" || *f.certFile != "" || *f.keyFile != "" || *f.name != ""
	if e.tls {
		useTLS = true
	}
	if !useTLS {
		return o, nil
	}
	c := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: *f.name}
	if *f.caFile != "" {
		pem, err := os.ReadFile(*f.caFile)
		if err != nil {
			return o, usagef("--xds-tls-ca: %v", err)
		}
		c.RootCAs = x509.NewCertPool()
		if !c.RootCAs.AppendCertsFromPEM(pem) {
			return o, usagef("--xds-tls-ca %s: holds no PEM certificate", *f.caFile)
		}
	}
	switch {
	case *f.certFile != "" && *f.keyFile != "":
		cert, err := tls.LoadX509KeyPair(*f.certFile, *f.keyFile)
		if err != nil {
			return o, usagef("--xds-tls-cert, --xds-tls-key: %v", err)
		}
		c.Certificates = []tls.Certificate{cert}
	case *f.certFile != "" || *f.keyFile != "":
		return o, usagef("--xds-tls-cert and --xds-tls-key: give both")
	}
	o.TLS = c
	return o, nil
}

// pairs reads "k<sep>v,k<sep>v" into a map; an empty string is none.
func pairs(s, sep, what string) (map[string]string, error) {
	if s == "" {
		return nil, nil
	}
	m := map[string]string{}
	for _, p := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(p, sep)
		if !ok || strings.TrimSpace(k) == "" {
			return nil, usagef("%s: %q is not key%svalue", what, p, sep)
		}
		m[strings.TrimSpace(k)] = strings.TrimSpace(v)
	}
	return m, nil
}

// rlsConfigSource is where rls's configuration comes from: a watched file
// or directory, or a control plane.
type rlsConfigSource struct {
	name  string          // what the start-up line says
	ready <-chan struct{} // closed when a configuration is in force; nil for files, in force from the start
	close func() error
	once  sync.Once
	err   error
}

// Close stops the source; the configuration in force stays. Closing twice
// is harmless.
func (s *rlsConfigSource) Close() error {
	s.once.Do(func() { s.err = s.close() })
	return s.err
}

// startRLSConfigSource keeps srv's configuration: from the control plane
// xo names, or else from the files at path, watched and reloaded on
// SIGHUP once unchanged for settle. Each change is counted in reloads.
func startRLSConfigSource(srv *envoyrls.Server, path string, load envoyrls.LoadOptions, settle time.Duration, xo xds.Options, log *slog.Logger, reloads *metrics.Metrics) (*rlsConfigSource, error) {
	if xo.Server == "" {
		w, err := rlsfile.Watch(path, srv, rlsfile.WatchOptions{
			Logger:   log,
			SIGHUP:   true,
			Load:     load,
			Settle:   settle,
			OnReload: func(_ *envoyrls.Config, err error) { reloads.ObserveReload(err) },
		})
		if err != nil {
			return nil, fmt.Errorf("watching %s: %v", path, err)
		}
		return &rlsConfigSource{name: path, close: w.Close}, nil
	}
	xo.Logger = log
	xo.OnUpdate = func(_ string, _ *envoyrls.Config, err error) { reloads.ObserveReload(err) }
	c, err := xds.Start(srv, xo)
	if err != nil {
		return nil, err
	}
	// SIGHUP reloads files; here there is nothing to reread, and the
	// signal must not end the process.
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGHUP)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-sig:
				log.Info("sluice rls: SIGHUP: the configuration comes from the control plane, which pushes its changes; nothing to reload", "xds", xo.Server)
			case <-done:
				return
			}
		}
	}()
	return &rlsConfigSource{name: "xds://" + xo.Server, ready: c.Ready(), close: func() error {
		signal.Stop(sig)
		close(done)
		return c.Close()
	}}, nil
}
