package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/sluice-go/sluice/backend"
	"github.com/sluice-go/sluice/config"
	"github.com/sluice-go/sluice/engine"
)

// drainTimeout bounds how long a stopping long-running command waits for
// the requests or calls in flight to finish.
const drainTimeout = 10 * time.Second

// process is the life of a long-running command (serve, rls), from its
// flags to its exit status. The command parses its own flags and reads its
// own configuration; process then
//
//   - checks the listeners' flags (TLS, --admin) before the store is
//     opened (checkListeners),
//   - opens the store and builds the engine over it (openEngine),
//   - binds the command's listener and the admin listener, serves both,
//     logs "listening" and calls ready (run),
//   - waits for its context to end (SIGTERM or SIGINT) or a listener to
//     fail, drains both listeners, stops the command's configuration
//     source, closes the engine, which flushes the store, and logs
//     "stopped" (run).
//
// Every message starts with name; a set-up error is written by fail and
// its status (2 for a usage error or an invalid configuration, 1 for any
// other failure) is the command's exit status. Reloading is the command's
// configuration source's: it is started before run and stopped by
// listener.stop.
type process struct {
	name string       // the command as its messages name it: "sluice serve"
	errw io.Writer    // stderr, serialised: written from many goroutines
	log  *slog.Logger // the text logger on errw
	fail func(status int, format string, a ...any) int

	store backend.Backend // open after openEngine
	eng   *engine.Engine  // the engine over store; closed by run or close

	// reportClose makes close report a store that does not close
	// cleanly on the way out of a failed start.
	reportClose bool
}

// newProcess starts the life of the command name, whose messages go to
// stderr.
func newProcess(name string, stderr io.Writer) *process {
	errw := &lockedWriter{w: stderr}
	return &process{
		name: name,
		errw: errw,
		log:  slog.New(slog.NewTextHandler(errw, nil)),
		fail: failer(errw, name),
	}
}

// addAdminFlags defines --admin and --admin-token-file on fs; listing is
// the command's own read-only endpoint on the admin listener ("/rules").
func addAdminFlags(fs *flag.FlagSet, listing string) (admin, tokenFile *string) {
	admin = fs.String("admin", "", "the `address` of the admin listener (/metrics, /healthz, "+listing+", /v1/reset, /v1/keys); none when empty; no host means 127.0.0.1")
	tokenFile = fs.String("admin-token-file", "", "a `file` holding the admin listener's bearer token; required when --admin is not loopback")
	return admin, tokenFile
}

// checkListeners checks the listener flags before the store is opened, so
// that a mistake there is the first error an operator sees: the TLS flags,
// which give the listener's TLS configuration (nil without TLS) offering
// the protocols alpn, and --admin with --admin-token-file. ok is false
// when the command must exit with status.
func (p *process) checkListeners(tlsf tlsFlags, alpn []string, admin, adminTokenFile string) (cfg *tls.Config, status int, ok bool) {
	cfg, err := tlsf.config(p.log, alpn...)
	if err == nil {
		err = checkAdminFlags(admin, adminTokenFile)
	}
	if err != nil {
		return nil, p.fail(exitStatus(err), "%v", err), false
	}
	return cfg, 0, true
}

// openEngine opens the store bf names and builds the engine over it, with
// the store's options as tune leaves them (tune may be nil) and the
// process's logger. ok is false when the command must exit with status;
// otherwise the command must end with run, or with close on an error of
// its own.
func (p *process) openEngine(bf backendFlags, tune func(*engine.Options)) (status int, ok bool) {
	if bf.name == config.BackendRedis {
		setRedisLogger(p.log)
	}
	b, opts, err := openGatewayBackend(bf, p.log)
	if err != nil {
		var ue *usageError
		if errors.As(err, &ue) {
			return p.fail(2, "%v", err), false
		}
		return p.fail(1, "opening the %s store: %v", bf.name, err), false
	}
	if tune != nil {
		tune(&opts)
	}
	opts.Logger = p.log
	eng, err := engine.New(b, &opts)
	if err != nil {
		b.Close()
		return p.fail(1, "starting the engine: %v", err), false
	}
	p.store, p.eng = b, eng
	return 0, true
}

// close closes the engine, which flushes the store, on the way out of a
// command that failed after openEngine (run closes it otherwise); a
// failure is reported when reportClose is set.
func (p *process) close() {
	if p.eng == nil {
		return
	}
	err := p.eng.Close()
	p.eng = nil
	if err != nil && p.reportClose {
		fmt.Fprintf(p.errw, "%s: closing the store: %v\n", p.name, err)
	}
}

// listener is a command's own listener: the proxy of serve, the gRPC
// service of rls.
type listener struct {
	flag string // the flag that names addr, without "--": "listen", "grpc"
	addr string // the address to bind

	// serve serves on ln until drain stops it.
	serve func(ln net.Listener) error
	// drain stops accepting and finishes what is in flight, giving up
	// when ctx ends; an error is reported and makes the exit status 1.
	drain func(ctx context.Context) error
	// stop, if not nil, runs once both listeners are drained and before
	// the store closes: it stops the configuration source.
	stop func()
	// attrs are what the "listening" line says after the listeners'
	// addresses: the command's configuration, then its store.
	attrs []any
}

// adminListener is the admin listener: /metrics, /healthz and the
// command's own endpoints, behind a bearer token when one is given.
type adminListener struct {
	addr, tokenFile string // --admin (none when empty), --admin-token-file
	// hosts are the host names Host may hold besides IP literals,
	// localhost and addr's own host (--admin-host).
	hosts []string

	// handler builds what the listener serves, the guard aside.
	handler func() http.Handler
	// errorLog is the server's http.Server.ErrorLog.
	errorLog *log.Logger
	// reportDrain makes a failure to drain the listener an error of the
	// process (exit status 1), as the command's listener's is.
	reportDrain bool
}

// run binds l and admin, serves them until ctx ends or one fails, then
// drains them, stops the configuration source and closes the engine. ready,
// if not nil, is called once both are bound with their addresses (admin's
// is empty without --admin). It returns the exit status: 0 on a clean
// stop, 1 when a listener failed or the store did not close cleanly.
func (p *process) run(ctx context.Context, l listener, admin adminListener, ready func(addr, adminAddr string)) int {
	defer p.close()
	ln, err := net.Listen("tcp", l.addr)
	if err != nil {
		return p.fail(1, "--%s: %v", l.flag, err)
	}
	errc := make(chan error, 2)
	var adminSrv *http.Server
	adminAddr := ""
	if admin.addr != "" {
		aln, guard, err := listenAdmin(admin.addr, admin.tokenFile, admin.hosts) // admin_keys.go
		if err != nil {
			ln.Close()
			var ue *usageError
			if errors.As(err, &ue) {
				return p.fail(2, "%v", err)
			}
			return p.fail(1, "%v", err)
		}
		adminAddr = aln.Addr().String()
		adminSrv = &http.Server{
			Handler:           guard.wrap(admin.handler()),
			ReadHeaderTimeout: 10 * time.Second,
			ErrorLog:          admin.errorLog,
		}
		go func() { errc <- adminSrv.Serve(aln) }()
	}
	go func() { errc <- l.serve(ln) }()
	p.log.Info(p.name+": listening", append([]any{l.flag, ln.Addr().String(), "admin", adminAddr}, l.attrs...)...)
	if ready != nil {
		ready(ln.Addr().String(), adminAddr)
	}

	status := 0
	select {
	case <-ctx.Done():
	case err := <-errc:
		fmt.Fprintf(p.errw, "%s: %v\n", p.name, err)
		status = 1
	}
	// Stop accepting and drain what is in flight, on both listeners.
	sctx, cancel := context.WithTimeout(context.Background(), drainTimeout)
	defer cancel()
	if err := l.drain(sctx); err != nil {
		fmt.Fprintf(p.errw, "%s: draining: %v\n", p.name, err)
		status = 1
	}
	if adminSrv != nil {
		if err := adminSrv.Shutdown(sctx); err != nil && admin.reportDrain {
			fmt.Fprintf(p.errw, "%s: draining: %v\n", p.name, err)
			status = 1
		}
	}
	if l.stop != nil {
		l.stop()
	}
	// The engine's Close flushes the store; make its failure count.
	err = p.eng.Close()
	p.eng = nil
	if err != nil {
		fmt.Fprintf(p.errw, "%s: closing the store: %v\n", p.name, err)
		status = 1
	}
	if status == 0 {
		p.log.Info(p.name + ": stopped")
	}
	return status
}

// untilStopped makes a long-running command of run: it runs until SIGTERM
// or SIGINT (which end its context), with no readiness callback.
func untilStopped(run func(ctx context.Context, args []string, stdout, stderr io.Writer, ready func(addr, adminAddr string)) int) func(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	return func(args []string, _ io.Reader, stdout, stderr io.Writer) int {
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
		defer stop()
		return run(ctx, args, stdout, stderr, nil)
	}
}

// storeAttrs are the store's attributes in a "listening" line: the
// backend, and its directory or its Redis addresses and key prefix.
func storeAttrs(bf backendFlags) []any {
	attrs := []any{"store", bf.name}
	switch bf.name {
	case config.BackendPebble, config.BackendBolt:
		attrs = append(attrs, "dir", bf.dir)
	case config.BackendRedis:
		attrs = append(attrs, "redis", strings.Join(bf.redis.Addrs, ","), "key_prefix", bf.redis.KeyPrefix)
	}
	return attrs
}
