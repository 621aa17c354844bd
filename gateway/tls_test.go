package gateway

import (
	"bytes"
	"crypto/tls"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/llmgw/llmgw/internal/testing/testcert"
)

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
	testcert.Write(t, cf, kf, 1, t0)
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

	testcert.Write(t, cf, kf, 2, t0.Add(time.Minute))
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

	if _, err := newCertReloader(cf, kf, slog.New(slog.DiscardHandler), nil); err == nil || !strings.Contains(err.Error(), "certificate "+cf) {
		t.Errorf("a bad pair at start: %v", err)
	}
}
