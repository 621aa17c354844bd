package e2e

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/llmgw/e2e/nomadtest"
	"github.com/llmgw/llmgw/internal/testing/hostile"
	"github.com/llmgw/llmgw/internal/testing/localnomad"
	"github.com/llmgw/llmgw/nomadplugin/plugintest"
)

// hostileToken is the controller's API token in the hostile-input run.
const hostileToken = "hostile-e2e-token"

// TestHostileInputsOverRealNomad is the hostile-input suite
// (internal/testing/hostile) on a real Nomad: two replicas of llama.cpp's
// real server placed by the controller (its binary, with an API token)
// through the llmgw driver on two clients, the gateway's binary
// discovering them from Nomad, every class of hostile input sent with
// legitimate traffic beside it, and the suite's goals checked: no process
// dies (the controller, the gateway, both engines), every legitimate
// request answered, breakers closed, memory growth per hostile request in
// flight at most 64 MB. HOSTILE_TABLE=<file> writes the results' table.
func TestHostileInputsOverRealNomad(t *testing.T) {
	in := installRealEngine(t, "Hello world!")
	c, engine := sameRackClients(t, 2, in.Binary)
	cfg := controllerFilesEngines(t, c.Server.Addr(), fmt.Sprintf("{ vllm = %q, llamacpp = %q }", engine, in.Binary),
		fmt.Sprintf(prefixCatalog, in.Model, 2), "headroom = 0\n")
	// Writes need the token here, as on a cluster an operator runs: the
	// tests' loopback insecure_writes goes.
	path := ctlConfigPath(cfg)
	src, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	withToken := strings.Replace(string(src), "insecure_writes = true", fmt.Sprintf("api_token = %q", hostileToken), 1)
	if withToken == string(src) {
		t.Fatalf("%s has no insecure_writes = true to replace", path)
	}
	if err := os.WriteFile(path, []byte(withToken), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := plugintest.Build(t, llmgwPkg)
	ctl := startCtlBinary(t, bin, path, "ctl")
	nomadtest.Eventually(t, 4*time.Minute, func() (bool, string) {
		regs := serviceReplicas(t, c.API, "chat")
		return len(regs) == 2, fmt.Sprintf("Nomad's registrations of chat: %v, want 2", regs)
	})
	gw := startGatewayBinary(t, bin, "--nomad", c.Server.Addr(), "--check-interval", "1s")
	nomadtest.Eventually(t, 2*time.Minute, func() (bool, string) {
		resp, err := http.Post(gw.url+"/v1/chat/completions", "application/json",
			strings.NewReader(`{"model":"chat","messages":[{"role":"user","content":"hi"}],"max_tokens":2}`))
		if err != nil {
			return false, err.Error()
		}
		b, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK, string(b)
	})

	pids := map[string]int{"controller": ctl.cmd.Process.Pid, "gateway": gw.cmd.Process.Pid}
	for _, a := range c.Clients {
		for i, pid := range pidsOf(a, filepath.Base(in.Binary)) {
			pids[fmt.Sprintf("engine %s/%d", a.Name, i)] = pid
		}
	}
	if n := len(pids) - 2; n != 2 {
		t.Fatalf("found %d llama-server processes under the clients, want 2: %v", n, pids)
	}
	tg := hostile.Targets{
		Controller: "http://" + cfg.Listen, Token: hostileToken,
		Gateway: gw.url, Model: "chat", Node: c.Clients[0].Name, HoldDomain: "rack=k1", Pids: pids,
	}
	hostile.Report(t, hostile.Run(t, tg, hostile.Classes()))
	// The engines Nomad runs are the ones that were there at the start.
	for name, pid := range pids {
		if strings.HasPrefix(name, "engine") && !slices.Contains(pidsOf(clientOf(c, name), filepath.Base(in.Binary)), pid) {
			t.Errorf("%s (pid %d) is gone", name, pid)
		}
	}
}

// clientOf is the client agent an "engine <client>/<i>" name is under.
func clientOf(c *nomadtest.Cluster, name string) *localnomad.Agent {
	client, _, _ := strings.Cut(strings.TrimPrefix(name, "engine "), "/")
	for _, a := range c.Clients {
		if a.Name == client {
			return a
		}
	}
	return c.Clients[0]
}
