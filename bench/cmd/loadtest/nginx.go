package main

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// debianNginx is where Debian's nginx package installs the binary.
const debianNginx = "/usr/sbin/nginx"

// findNginx returns the nginx binary on PATH or at debianNginx, or "" when
// there is none.
func findNginx() string {
	if p, err := exec.LookPath("nginx"); err == nil {
		return p
	}
	if _, err := os.Stat(debianNginx); err == nil {
		return debianNginx
	}
	return ""
}

// nginxProc is an nginx running in the foreground for the load test.
type nginxProc struct {
	plain, limited string // the addresses of the two servers
	version        string // what nginx -v printed
	cmd            *exec.Cmd
	exited         chan error
}

// nginxConf is the configuration: two workers (as serve runs on
// GOMAXPROCS 2 here), keep-alive connections to the upstream (HTTP/1.1,
// Connection cleared), X-Forwarded-For appended as serve's proxy does, and
// two servers: a plain proxy, and the same proxy with limit_req on every
// request, keyed by the client address, at a rate and burst no run
// reaches, so it decides every request and never denies. Every path is in
// the temporary directory; nginx logs every request there, as its default
// configuration does.
const nginxConf = `daemon off;
worker_processes 2;
%[1]s
pid %[2]s/nginx.pid;
error_log %[2]s/error.log warn;
events { worker_connections 4096; }
http {
	access_log %[2]s/access.log;
	client_body_temp_path %[2]s/body;
	proxy_temp_path %[2]s/proxy;
	fastcgi_temp_path %[2]s/fastcgi;
	uwsgi_temp_path %[2]s/uwsgi;
	scgi_temp_path %[2]s/scgi;
	upstream app {
		server %[3]s;
		keepalive 64;
	}
	limit_req_zone $binary_remote_addr zone=perip:10m rate=1000000r/s;
	server {
		listen %[4]s;
		location / {
			proxy_pass http://app;
			proxy_http_version 1.1;
			proxy_set_header Connection "";
			proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
		}
	}
	server {
		listen %[5]s;
		location / {
			limit_req zone=perip burst=1000000 nodelay;
			proxy_pass http://app;
			proxy_http_version 1.1;
			proxy_set_header Connection "";
			proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
		}
	}
}
`

// freePort returns a loopback address no one listens on at the moment.
func freePort() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// startNginx writes the configuration into dir, starts bin on it in front
// of upstream (a URL) and waits until both servers accept connections.
func startNginx(bin, dir, upstream string) (*nginxProc, error) {
	u, err := url.Parse(upstream)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	n := &nginxProc{exited: make(chan error, 1)}
	if n.plain, err = freePort(); err != nil {
		return nil, err
	}
	if n.limited, err = freePort(); err != nil {
		return nil, err
	}
	if out, err := exec.Command(bin, "-v").CombinedOutput(); err == nil {
		n.version = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(string(out)), "nginx version: "))
	}
	user := ""
	if os.Geteuid() == 0 {
		user = "user root;" // workers keep access to the temporary directory
	}
	conf := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(conf, fmt.Appendf(nil, nginxConf, user, dir, u.Host, n.plain, n.limited), 0o644); err != nil {
		return nil, err
	}
	errLog := filepath.Join(dir, "error.log")
	n.cmd = exec.Command(bin, "-p", dir, "-c", conf, "-e", errLog)
	var out strings.Builder
	n.cmd.Stdout, n.cmd.Stderr = &out, &out
	if err := n.cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting nginx: %w", err)
	}
	go func() { n.exited <- n.cmd.Wait() }()
	deadline := time.Now().Add(15 * time.Second)
	for _, addr := range []string{n.plain, n.limited} {
		for {
			c, err := net.DialTimeout("tcp", addr, time.Second)
			if err == nil {
				c.Close()
				break
			}
			select {
			case err := <-n.exited:
				log, _ := os.ReadFile(errLog)
				return nil, fmt.Errorf("nginx exited: %v\n%s%s", err, out.String(), log)
			case <-time.After(20 * time.Millisecond):
			}
			if time.Now().After(deadline) {
				n.stop()
				return nil, errors.New("nginx does not accept connections on " + addr)
			}
		}
	}
	return n, nil
}

// stop ends nginx (SIGINT: fast shutdown) and waits for it, killing it after
// 10 seconds.
func (n *nginxProc) stop() {
	n.cmd.Process.Signal(os.Interrupt)
	select {
	case <-n.exited:
	case <-time.After(10 * time.Second):
		n.cmd.Process.Kill()
		<-n.exited
	}
}
