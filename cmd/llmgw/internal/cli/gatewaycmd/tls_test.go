package gatewaycmd

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/llmgw/llmgw/gateway"
	"github.com/llmgw/llmgw/gatewayapi"
	"github.com/llmgw/llmgw/internal/testing/consulfake"
	"github.com/llmgw/llmgw/internal/testing/wait"
)

// writeCert writes a self-signed certificate for 127.0.0.1 with serial
// into certFile and keyFile, with modification time at.
func writeCert(t *testing.T, certFile, keyFile string, serial int64, at time.Time) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "llmgw test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []struct {
		path string
		b    []byte
	}{
		{certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})},
		{keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb})},
	} {
		if err := os.WriteFile(f.path, f.b, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(f.path, at, at); err != nil {
			t.Fatal(err)
		}
	}
}

// servedSerial is the serial of the certificate a TLS server at addr
// presents.
func servedSerial(t *testing.T, addr string) int64 {
	t.Helper()
	c, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // the test reads the certificate served
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0].SerialNumber.Int64()
}

// TestCertReload: a changed pair is served from the next handshake; a
// pair that fails to load leaves the last good one served, and counts.
func TestCertReload(t *testing.T) {
	dir := t.TempDir()
	cf, kf := filepath.Join(dir, "gw.crt"), filepath.Join(dir, "gw.key")
	t0 := time.Now().Add(-time.Hour)
	writeCert(t, cf, kf, 1, t0)
	var logs bytes.Buffer
	reg := prometheus.NewRegistry()
	cr, err := newCertReloader(cf, kf, slog.New(slog.NewTextHandler(&logs, nil)), reg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", cr.config())
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.NotFoundHandler(), ReadHeaderTimeout: time.Second}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	addr := ln.Addr().String()
	if got := servedSerial(t, addr); got != 1 {
		t.Fatalf("serial %d, want 1", got)
	}
	cr.check(false)
	if got := testutil.ToFloat64(cr.reloads.WithLabelValues("ok")); got != 0 {
		t.Errorf("reloaded %v times with nothing changed", got)
	}

	writeCert(t, cf, kf, 2, t0.Add(time.Minute))
	cr.check(false)
	if got := servedSerial(t, addr); got != 2 {
		t.Fatalf("after the change: serial %d, want 2", got)
	}

	if err := os.WriteFile(cf, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	_ = os.Chtimes(cf, t0.Add(2*time.Minute), t0.Add(2*time.Minute))
	cr.check(false)
	if got := servedSerial(t, addr); got != 2 {
		t.Errorf("after a bad file: serial %d, want 2 (the last good one)", got)
	}
	if got := testutil.ToFloat64(cr.reloads.WithLabelValues("error")); got != 1 {
		t.Errorf("errors counted %v, want 1", got)
	}
	if !strings.Contains(logs.String(), "the last good one stays") {
		t.Errorf("log:\n%s", logs.String())
	}
	cr.check(false) // unchanged bad file: not reported again
	if got := testutil.ToFloat64(cr.reloads.WithLabelValues("error")); got != 1 {
		t.Errorf("errors counted %v after looking again, want 1", got)
	}

	if _, err := newCertReloader(cf, kf, slog.New(slog.DiscardHandler), nil); err == nil || !strings.Contains(err.Error(), "tls_cert_file "+cf) {
		t.Errorf("a bad pair at start: %v", err)
	}
}

func TestHashKeyCommand(t *testing.T) {
	run := func(stdin string, args ...string) (string, string, error) {
		cmd := NewCommand()
		var out, errb bytes.Buffer
		cmd.SetIn(strings.NewReader(stdin))
		cmd.SetOut(&out)
		cmd.SetErr(&errb)
		cmd.SetArgs(append([]string{"hash-key"}, args...))
		err := cmd.Execute()
		return out.String(), errb.String(), err
	}
	out, _, err := run("sk-a\n")
	if err != nil || out != gateway.HashKey("sk-a")+"\n" {
		t.Errorf("hash-key: %q %v", out, err)
	}
	out, _, err = run("sk-a", "--name", "team-a")
	if err != nil {
		t.Fatal(err)
	}
	if ks, err := gateway.ParseKeys("out.hcl", []byte(out)); err != nil || ks.Len() != 1 {
		t.Errorf("--name's block does not parse: %v\n%s", err, out)
	}
	out, stderr, err := run("", "--new", "--name", "n")
	if err != nil {
		t.Fatal(err)
	}
	secret := strings.TrimSpace(stderr[strings.LastIndex(stderr, " ")+1:])
	if !strings.HasPrefix(secret, newSecretPrefix) || !strings.Contains(out, gateway.HashKey(secret)) || strings.Contains(out, secret) {
		t.Errorf("--new: out %q stderr %q", out, stderr)
	}
	if _, _, err := run(""); err == nil {
		t.Error("no secret: no error")
	}
}

// TestGatewayKeysAndTLS runs the command with a key file and TLS: a bad
// key file stops it at start naming file:line; a good one is enforced over
// HTTPS, and a change to it is read without a restart.
func TestGatewayKeysAndTLS(t *testing.T) {
	dir := t.TempDir()
	cf, kf := filepath.Join(dir, "gw.crt"), filepath.Join(dir, "gw.key")
	writeCert(t, cf, kf, 7, time.Now().Add(-time.Hour))
	keys := filepath.Join(dir, "keys.hcl")
	write := func(s string) {
		t.Helper()
		if err := os.WriteFile(keys, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("key \"a\" {\n  hash = \"" + gateway.HashKey("sk-a") + "\"\n  max_concurrency = 0\n}\n")
	args := []string{"--listen", "127.0.0.1:0", "--nomad", "http://127.0.0.1:1", "--models-variable", "",
		"--keys-file", keys, "--tls-cert-file", cf, "--tls-key-file", kf}
	cmd := NewCommand()
	cmd.SetArgs(args)
	cmd.SetErr(io.Discard)
	cmd.SetOut(io.Discard)
	if err := cmd.Execute(); err == nil || !strings.Contains(err.Error(), keys+":3: ") {
		t.Fatalf("bad key file at start: %v", err)
	}

	write("key \"a\" {\n  hash = \"" + gateway.HashKey("sk-a") + "\"\n}\n")
	addr, stderr, stop := startGateway(t, args)
	tr := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}} //nolint:gosec // a self-signed test certificate
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	get := func(key string) int {
		req, _ := http.NewRequest(http.MethodGet, "https://"+addr+"/v1/models", nil)
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	// The command listens (startGateway returns) before it has read the
	// key file; until then every keyed route answers 503.
	wait.Until(t, "the key file read", func() bool { return get("") != http.StatusServiceUnavailable })
	if got := get(""); got != http.StatusUnauthorized {
		t.Errorf("no key: %d", got)
	}
	if got := get("sk-a"); got != http.StatusOK {
		t.Errorf("sk-a: %d", got)
	}
	write("key \"b\" {\n  hash = \"" + gateway.HashKey("sk-b") + "\"\n}\n")
	wait.Until(t, "the changed key file read", func() bool { return get("sk-b") == http.StatusOK })
	if got := get("sk-a"); got != http.StatusUnauthorized {
		t.Errorf("sk-a after the change: %d", got)
	}
	write("key \"b\" {\n  hash = \"nope\"\n}\n")
	wait.Until(t, "the bad key file reported", func() bool { return strings.Contains(stderr.String(), "the keys in force stay") })
	if got := get("sk-b"); got != http.StatusOK {
		t.Errorf("sk-b after a bad change: %d", got)
	}
	if !strings.Contains(stderr.String(), keys+":2: ") {
		t.Errorf("the log does not name the file's line:\n%s", stderr.String())
	}
	if err := stop(); err != nil {
		t.Fatalf("gateway: %v", err)
	}
}

// shareLimits follows the count of gateways, and keeps the last share when
// the count fails.
func TestShareLimits(t *testing.T) {
	ks, err := gateway.ParseKeys("k.hcl", []byte("key \"a\" {\n  hash = \""+gateway.HashKey("sk")+"\"\n  max_concurrency = 8\n}\n"))
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	g := gateway.New(gateway.Options{Keys: gateway.StaticKeys{Set: ks}, Registerer: reg})
	g.UpdateKeys(ks, nil)
	counts := make(chan func() ([]string, error))
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		shareLimits(ctx, g, func(context.Context) ([]string, error) { return (<-counts)() }, time.Millisecond, slog.New(slog.DiscardHandler))
	}()
	share := func() float64 { return testutil.ToFloat64(gaugeOf(t, reg, "llmgw_gateway_key_limit_share")) }
	counts <- func() ([]string, error) { return []string{"a", "b", "c", "d"}, nil }
	counts <- func() ([]string, error) { return nil, context.DeadlineExceeded }
	if got := share(); got != 0.25 {
		t.Errorf("share with 4 gateways: %v", got)
	}
	// Each send is taken once the call before it has returned.
	counts <- func() ([]string, error) { return nil, context.DeadlineExceeded }
	if got := share(); got != 0.25 {
		t.Errorf("share after a failed count: %v, want the last, 0.25", got)
	}
	counts <- func() ([]string, error) { return nil, nil }
	counts <- func() ([]string, error) { return nil, context.DeadlineExceeded }
	if got := share(); got != 1 {
		t.Errorf("share with none listed: %v, want 1", got)
	}
	cancel()
	select {
	case counts <- func() ([]string, error) { return nil, nil }:
	case <-done:
	}
	<-done
}

func gaugeOf(t *testing.T, reg *prometheus.Registry, name string) prometheus.Collector {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			g := prometheus.NewGauge(prometheus.GaugeOpts{Name: name})
			g.Set(mf.GetMetric()[0].GetGauge().GetValue())
			return g
		}
	}
	t.Fatalf("no %s", name)
	return nil
}

func TestLoopback(t *testing.T) {
	for _, tt := range []struct {
		addr string
		want bool
	}{{"127.0.0.1:8080", true}, {"[::1]:8080", true}, {"0.0.0.0:8080", false}, {"[::]:8080", false}, {"10.0.0.5:8080", false}} {
		a, err := net.ResolveTCPAddr("tcp", tt.addr)
		if err != nil {
			t.Fatal(err)
		}
		if got := loopback(a); got != tt.want {
			t.Errorf("loopback(%s) = %v", tt.addr, got)
		}
	}
}

// With TLS and --consul, the registration says so: its check asks for
// https:// (not verifying the certificate) and it is tagged
// gatewayapi.TLSTag, which ConsulGateways turns into an https:// URL for the
// controller's demand reads.
func TestGatewayTLSRegistration(t *testing.T) {
	dir := t.TempDir()
	cf, kf := filepath.Join(dir, "gw.crt"), filepath.Join(dir, "gw.key")
	writeCert(t, cf, kf, 3, time.Now().Add(-time.Hour))
	c := consulfake.New()
	t.Cleanup(c.Close)
	addr, _, stop := startGateway(t, []string{"--listen", "127.0.0.1:0", "--consul", c.Addr(), "--tls-cert-file", cf, "--tls-key-file", kf, "--register-tags", "edge"})
	port, _ := strconv.Atoi(addr[strings.LastIndex(addr, ":")+1:])
	var reg consulfake.Service
	wait.Until(t, "the gateway registered in consul", func() bool {
		var ok bool
		reg, ok = c.Service(registrationID(port))
		return ok
	})
	if reg.Check == nil || reg.Check.HTTP != "https://"+addr+"/healthz" || !reg.Check.TLSSkipVerify || !slices.Contains(reg.Tags, gatewayapi.TLSTag) || !slices.Contains(reg.Tags, "edge") {
		t.Errorf("registration %+v, check %+v", reg, reg.Check)
	}
	if err := stop(); err != nil {
		t.Errorf("gateway: %v", err)
	}
}
