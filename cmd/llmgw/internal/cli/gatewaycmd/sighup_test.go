//go:build unix

package gatewaycmd

import (
	"crypto/tls"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/llmgw/llmgw/gateway"
	"github.com/llmgw/llmgw/internal/testing/testcert"
	"github.com/llmgw/llmgw/internal/testing/wait"
)

// SIGHUP makes the command's gateway read the key file and the TLS
// certificate again, unchanged as they are (which their looks every few
// seconds would not read again).
func TestGatewaySIGHUP(t *testing.T) {
	dir := t.TempDir()
	cf, kf, keys := filepath.Join(dir, "gw.crt"), filepath.Join(dir, "gw.key"), filepath.Join(dir, "keys.hcl")
	testcert.Write(t, cf, kf, 5, time.Now().Add(-time.Hour))
	if err := os.WriteFile(keys, []byte("key \"a\" {\n  hash = \""+gateway.HashKey("sk-a")+"\"\n}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	addr, stderr, stop := startGateway(t, []string{"--listen", "127.0.0.1:0", "--nomad", "http://127.0.0.1:1", "--models-variable", "",
		"--keys-file", keys, "--tls-cert-file", cf, "--tls-key-file", kf})
	tr := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}} //nolint:gosec // a self-signed test certificate
	defer tr.CloseIdleConnections()
	metrics := func() string {
		resp, err := (&http.Client{Transport: tr}).Get("https://" + addr + "/metrics")
		if err != nil {
			return err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	wait.Until(t, "the key file read once", func() bool {
		return strings.Contains(metrics(), `llmgw_gateway_key_reloads_total{outcome="ok"} 1`)
	})
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	wait.Until(t, "the key file and the certificate read again", func() bool {
		m := metrics()
		return strings.Contains(m, `llmgw_gateway_key_reloads_total{outcome="ok"} 2`) &&
			strings.Contains(m, `llmgw_gateway_tls_reloads_total{outcome="ok"} 1`)
	})
	if !strings.Contains(stderr.String(), "SIGHUP") {
		t.Errorf("the log does not say SIGHUP came:\n%s", stderr.String())
	}
	if err := stop(); err != nil {
		t.Fatalf("gateway: %v", err)
	}
}
