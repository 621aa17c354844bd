package e2e

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/llmgw/llmgw/e2e/nomadtest"
	"github.com/llmgw/llmgw/gateway"
	"github.com/llmgw/llmgw/internal/gatewayclient"
	"github.com/llmgw/llmgw/nomadplugin/plugintest"
)

// TestGatewayKeysOverRealNomad runs the llmgw gateway binary with its API
// keys in a real Nomad's Variable (--keys-variable): the keys are
// enforced, a write that does not parse leaves them in force (and the
// metric says so), a good write replaces them with no restart, and
// SIGHUP is handled (not the default: the process would end). It also
// times the registry list --share-limits makes every 15 s
// (gatewayclient.NomadGateways), for docs/perf.md.
func TestGatewayKeysOverRealNomad(t *testing.T) {
	c := nomadtest.Start(t)
	bin := plugintest.Build(t, llmgwPkg)
	const path = "llmgw/gateway-keys"
	put := func(src string) {
		t.Helper()
		if _, _, err := c.API.Variables().Update(&api.Variable{Path: path, Items: map[string]string{gateway.KeysItem: src}}, nil); err != nil {
			t.Fatal(err)
		}
	}
	key := func(name, secret, body string) string {
		return fmt.Sprintf("key %q {\n  hash = %q\n%s}\n", name, gateway.HashKey(secret), body)
	}
	// A fresh server may refuse variables until its keyring is ready.
	nomadtest.Eventually(t, 60*time.Second, func() (bool, string) {
		_, _, err := c.API.Variables().Update(&api.Variable{Path: path, Items: map[string]string{
			gateway.KeysItem: key("a", "sk-a", "  models = [\"alpha\"]\n")}}, nil)
		return err == nil, fmt.Sprint(err)
	})
	gp := startGatewayBinary(t, bin, "--nomad", c.Server.Addr(), "--keys-variable", path, "--share-limits")
	gw := gp.url

	do := func(method, p, secret, body string) gwResponse {
		t.Helper()
		req, err := http.NewRequest(method, gw+p, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if secret != "" {
			req.Header.Set("Authorization", "Bearer "+secret)
		}
		resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return gwResponse{resp.StatusCode, resp.Header, b}
	}
	metric := func(name string) string {
		r := do(http.MethodGet, "/metrics", "", "")
		for l := range strings.SplitSeq(string(r.body), "\n") {
			if strings.HasPrefix(l, name+" ") {
				return strings.TrimPrefix(l, name+" ")
			}
		}
		return ""
	}

	for _, tt := range []struct {
		name, secret, model string
		status              int
		code                string
	}{
		{"no key", "", "alpha", http.StatusUnauthorized, "invalid_api_key"},
		{"unknown key", "sk-x", "alpha", http.StatusUnauthorized, "invalid_api_key"},
		{"model not allowed", "sk-a", "beta", http.StatusForbidden, "model_not_allowed"},
		{"allowed, no replica registered", "sk-a", "alpha", http.StatusNotFound, "model_not_found"},
	} {
		if r := do(http.MethodPost, "/v1/chat/completions", tt.secret, chatBody(tt.model, false)); r.status != tt.status || r.errCode() != tt.code {
			t.Errorf("%s: %d %s, want %d %s", tt.name, r.status, r.body, tt.status, tt.code)
		}
	}
	if r := do(http.MethodGet, "/v1/models", "sk-a", ""); r.status != http.StatusOK {
		t.Errorf("/v1/models with a key: %d %s", r.status, r.body)
	}
	if got := metric("llmgw_gateway_key_limit_share"); got != "1" {
		t.Errorf("limit share %q, want 1 (this gateway is registered nowhere: at least 1)", got)
	}

	put(key("a", "sk-a", "  requests_per_minute = 0\n"))
	nomadtest.Eventually(t, 30*time.Second, func() (bool, string) {
		v := metric("llmgw_gateway_key_reload_failing")
		return v == "1", "key_reload_failing " + v
	})
	if r := do(http.MethodGet, "/v1/models", "sk-a", ""); r.status != http.StatusOK {
		t.Errorf("after a bad write the key in force was dropped: %d %s", r.status, r.body)
	}
	b, _ := os.ReadFile(gp.log)
	if !strings.Contains(string(b), "nomad variable "+path+" (namespace default) item keys:3: ") {
		t.Errorf("the log does not name the variable's line:\n%s", b)
	}

	put(key("b", "sk-b", ""))
	nomadtest.Eventually(t, 30*time.Second, func() (bool, string) {
		r := do(http.MethodGet, "/v1/models", "sk-b", "")
		return r.status == http.StatusOK, fmt.Sprintf("sk-b: %d", r.status)
	})
	if r := do(http.MethodGet, "/v1/models", "sk-a", ""); r.status != http.StatusUnauthorized {
		t.Errorf("sk-a after it left the variable: %d", r.status)
	}
	if got := metric("llmgw_gateway_key_reload_failing"); got != "0" {
		t.Errorf("key_reload_failing %q after a good write", got)
	}

	if err := syscall.Kill(gp.cmd.Process.Pid, syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	nomadtest.Eventually(t, 30*time.Second, func() (bool, string) {
		b, _ := os.ReadFile(gp.log)
		return strings.Contains(string(b), "SIGHUP: reading the keys"), "no SIGHUP line in the log yet"
	})
	if r := do(http.MethodGet, "/v1/models", "sk-b", ""); r.status != http.StatusOK {
		t.Errorf("after SIGHUP: %d", r.status)
	}

	// The cost of sharing: the registry list each gateway makes every 15 s.
	const n = 200
	t0 := time.Now()
	for range n {
		if _, err := gatewayclient.NomadGateways(t.Context(), c.API, "default"); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("gatewayclient.NomadGateways against the real Nomad: %d calls, mean %s", n, (time.Since(t0) / n).Round(time.Microsecond))
	gp.stop(t)
}
