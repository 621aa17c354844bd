package gatewaycmd

import (
	"bytes"
	"crypto/tls"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/llmgw/gateway"
	"github.com/llmgw/llmgw/gatewayapi"
	"github.com/llmgw/llmgw/internal/testing/consulfake"
	"github.com/llmgw/llmgw/internal/testing/testcert"
	"github.com/llmgw/llmgw/internal/testing/wait"
)

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
	testcert.Write(t, cf, kf, 7, time.Now().Add(-time.Hour))
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

// With TLS and --consul, the registration says so: its check asks for
// https:// (not verifying the certificate) and it is tagged
// gatewayapi.TLSTag, which ConsulGateways turns into an https:// URL for the
// controller's demand reads.
func TestGatewayTLSRegistration(t *testing.T) {
	dir := t.TempDir()
	cf, kf := filepath.Join(dir, "gw.crt"), filepath.Join(dir, "gw.key")
	testcert.Write(t, cf, kf, 3, time.Now().Add(-time.Hour))
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
