package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// testPKI is a CA and the means to sign certificates with it.
type testPKI struct {
	ca     *x509.Certificate
	caKey  *ecdsa.PrivateKey
	caFile string
	pool   *x509.CertPool
	dir    string
}

func newPKI(t *testing.T) *testPKI {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(der)
	p := &testPKI{ca: ca, caKey: key, dir: t.TempDir(), pool: x509.NewCertPool()}
	p.pool.AddCert(ca)
	p.caFile = filepath.Join(p.dir, "ca.pem")
	writeFile(t, p.caFile, string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})))
	return p
}

// issue writes a certificate of serial for 127.0.0.1 (a server's, or a
// client's) and its key to certFile and keyFile, by renames, as a
// renewal does.
func (p *testPKI) issue(t *testing.T, serial int64, client bool, certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	usage := x509.ExtKeyUsageServerAuth
	if client {
		usage = x509.ExtKeyUsageClientAuth
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "sluice test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, ExtKeyUsage: []x509.ExtKeyUsage{usage}, KeyUsage: x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.ca, &key.PublicKey, p.caKey)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	for file, block := range map[string]*pem.Block{certFile: {Type: "CERTIFICATE", Bytes: der}, keyFile: {Type: "EC PRIVATE KEY", Bytes: kb}} {
		writeFile(t, file+".new", string(pem.EncodeToMemory(block)))
		if err := os.Rename(file+".new", file); err != nil {
			t.Fatal(err)
		}
	}
}

// serialOf connects to addr with TLS and returns the serial of the
// certificate it presents.
func serialOf(t *testing.T, addr string, cfg *tls.Config) int64 {
	t.Helper()
	c, err := tls.Dial("tcp", addr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0].SerialNumber.Int64()
}

// serve's listener speaks TLS with --tls-cert and --tls-key, serves a
// renewed certificate without a restart, and with a client CA (here the
// configuration's server.tls_client_ca, beside its tls_cert and tls_key)
// admits only clients with a certificate the CA signed.
func TestServeTLS(t *testing.T) {
	t.Parallel()
	up := upstream(t)
	pki := newPKI(t)
	cert, key := filepath.Join(pki.dir, "server.pem"), filepath.Join(pki.dir, "server.key")
	pki.issue(t, 100, false, cert, key)
	cfgPath := filepath.Join(t.TempDir(), "sluice.yaml")
	writeFile(t, cfgPath, gatewayConfig(memoryStore, "10.0.0.0/8", 100))
	s := startServe(t, "--config", cfgPath, "--listen", "127.0.0.1:0", "--upstream", up.URL, "--tls-cert", cert, "--tls-key", key)

	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pki.pool}}}
	resp, err := client.Get("https://" + s.listen + "/x")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("X-RateLimit-Limit") != "100" {
		t.Errorf("over TLS: %d %v", resp.StatusCode, resp.Header)
	}
	if got := serialOf(t, s.listen, &tls.Config{RootCAs: pki.pool}); got != 100 {
		t.Fatalf("serial %d, want 100", got)
	}
	pki.issue(t, 101, false, cert, key)
	deadline := time.Now().Add(5 * time.Second)
	for serialOf(t, s.listen, &tls.Config{RootCAs: pki.pool}) != 101 {
		if time.Now().After(deadline) {
			t.Fatal("the renewed certificate was not served within 5s")
		}
		time.Sleep(100 * time.Millisecond)
	}

	// Mutual TLS, the files named by the configuration's server section,
	// relative to its directory.
	mtlsPath := filepath.Join(pki.dir, "sluice.yaml")
	writeFile(t, mtlsPath, "server:\n  tls_cert: server.pem\n  tls_key: server.key\n  tls_client_ca: ca.pem\n"+gatewayConfig(memoryStore, "10.0.0.0/8", 100))
	m := startServe(t, "--config", mtlsPath, "--listen", "127.0.0.1:0", "--upstream", up.URL)
	if _, err := client.Get("https://" + m.listen + "/x"); err == nil {
		t.Error("mutual TLS: a client without a certificate was served")
	}
	ccert, ckey := filepath.Join(pki.dir, "client.pem"), filepath.Join(pki.dir, "client.key")
	pki.issue(t, 200, true, ccert, ckey)
	pair, err := tls.LoadX509KeyPair(ccert, ckey)
	if err != nil {
		t.Fatal(err)
	}
	mc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pki.pool, Certificates: []tls.Certificate{pair}}}}
	if resp, err := mc.Get("https://" + m.listen + "/x"); err != nil || resp.StatusCode != 200 {
		t.Errorf("mutual TLS with the client's certificate: %v", err)
	} else {
		resp.Body.Close()
	}
}

// rls's gRPC listener speaks TLS, and the flags are checked.
func TestRLSTLS(t *testing.T) {
	pki := newPKI(t)
	cert, key := filepath.Join(pki.dir, "server.pem"), filepath.Join(pki.dir, "server.key")
	pki.issue(t, 300, false, cert, key)
	p := startRLS(t, "--config", "testdata/rls/sluice", "--tls-cert", cert, "--tls-key", key)
	conn, err := grpc.NewClient(p.grpc, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: pki.pool})))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := rlspb.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, &rlspb.RateLimitRequest{Domain: "api", Descriptors: nil})
	if err == nil || !strings.Contains(err.Error(), "descriptor list must not be empty") {
		t.Errorf("a call over TLS: %v %v, want the server's own answer", resp, err)
	}
	for _, args := range [][]string{
		{"rls", "--config", "testdata/rls/sluice", "--grpc", "127.0.0.1:0", "--tls-cert", cert},
		{"rls", "--config", "testdata/rls/sluice", "--grpc", "127.0.0.1:0", "--tls-client-ca", pki.caFile},
	} {
		if code, _, stderr := runCmd(t, "", args...); code != 2 || !strings.Contains(stderr, "--tls-cert and --tls-key: give both") {
			t.Errorf("%v: exit %d, %q", args, code, stderr)
		}
	}
	if code, _, stderr := runCmd(t, "", "rls", "--config", "testdata/rls/sluice", "--grpc", "127.0.0.1:0", "--tls-cert", pki.caFile, "--tls-key", cert); code != 1 || !strings.Contains(stderr, "--tls-cert") {
		t.Errorf("a key that is not the certificate's: exit %d, %q", code, stderr)
	}
}
