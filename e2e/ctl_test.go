package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/llmgw/e2e/nomadtest"
	"github.com/llmgw/llmgw/nomadplugin/plugintest"
)

// TestCtlReadsItsOwnWrites runs `llmgw ctl` (the binary) against a
// controller on a real Nomad: once `llmgw ctl label` has returned, the next
// `llmgw ctl nodes` shows the node's new rack, and once `llmgw ctl facility
// hold` or `release` has returned, the next `llmgw ctl facility` and
// `llmgw ctl nodes` show the hold, or no longer show it. A label reaches
// Nomad's servers only with the client's next node update (5 to 10 s after
// the write on a Nomad that is not in dev mode); the test logs how long each
// label took and when `llmgw ctl nodes` first showed it.
func TestCtlReadsItsOwnWrites(t *testing.T) {
	nomadtest.Bin(t)
	bin := plugintest.Build(t, llmgwPkg)
	var clients []nomadtest.ClientOptions
	for _, n := range []string{"c-1", "c-2"} {
		clients = append(clients, nomadtest.ClientOptions{Name: n, Meta: map[string]string{
			"llmgw.site": "lab", "llmgw.room": "a", "llmgw.row": "r1", "llmgw.rack": "k1", "llmgw.pdu": "p-" + n,
		}})
	}
	c := nomadtest.Start(t, clients...)
	// One model no node can serve (the clients have no GPUs): the
	// controller places nothing, and the test is about its view.
	catalog := `
model "alpha" {
  source   = "org/alpha"
  replicas = 1
  profile "x1" {
    engine = "vllm"
    gpu    = "NVIDIA H200"
    gpus   = 1
    watts  = 250
  }
}
`
	cfg := controllerFiles(t, c.Server.Addr(), "/bin/true", catalog, `headroom = 0`)
	_, base, _ := runController(t, cfg, "ctl-1")

	ctl := func(args ...string) (string, error) {
		t.Helper()
		cmd := exec.Command(bin, append([]string{"ctl", "--addr", base}, args...)...)
		cmd.Env = append(os.Environ(), "LLMGW_TOKEN=")
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			return string(out), fmt.Errorf("llmgw ctl %s: %w: %s", strings.Join(args, " "), err, stderr.String())
		}
		return string(out), nil
	}
	type node struct {
		Name     string            `json:"name"`
		Location map[string]string `json:"location"`
		Held     []string          `json:"held"`
	}
	nodes := func() map[string]node {
		t.Helper()
		out, err := ctl("nodes", "-o", "json")
		if err != nil {
			t.Fatal(err)
		}
		var ns []node
		if err := json.Unmarshal([]byte(out), &ns); err != nil {
			t.Fatalf("llmgw ctl nodes -o json: %v: %s", err, out)
		}
		m := map[string]node{}
		for _, n := range ns {
			m[n.Name] = n
		}
		return m
	}
	nomadtest.Eventually(t, time.Minute, func() (bool, string) {
		out, err := ctl("nodes", "-o", "json")
		if err != nil {
			return false, err.Error()
		}
		return strings.Contains(out, `"c-1"`) && strings.Contains(out, `"c-2"`), out
	})

	for _, rack := range []string{"k7", "k8", "k9"} {
		start := time.Now()
		if _, err := ctl("label", "c-1", "rack="+rack); err != nil {
			t.Fatal(err)
		}
		took := time.Since(start)
		if got := nodes()["c-1"].Location["rack"]; got != rack {
			t.Errorf("llmgw ctl nodes right after llmgw ctl label c-1 rack=%s: c-1 in rack %q", rack, got)
		}
		nomadtest.Eventually(t, time.Minute, func() (bool, string) {
			got := nodes()["c-1"].Location["rack"]
			return got == rack, "c-1 in rack " + got
		})
		t.Logf("label c-1 rack=%s: llmgw ctl label took %s; llmgw ctl nodes first showed it %s after the label began",
			rack, took.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
	}

	if _, err := ctl("facility", "hold", "rack=k9", "--reason", "e2e"); err != nil {
		t.Fatal(err)
	}
	if out, err := ctl("facility"); err != nil || !strings.Contains(out, "hold (runtime) e2e") {
		t.Errorf("llmgw ctl facility right after the hold: %v\n%s", err, out)
	}
	if held := nodes()["c-1"].Held; !slices.Contains(held, "rack=k9") {
		t.Errorf("llmgw ctl nodes right after the hold: c-1 held in %v, want rack=k9", held)
	}
	if _, err := ctl("facility", "release", "rack=k9"); err != nil {
		t.Fatal(err)
	}
	if out, err := ctl("facility"); err != nil || strings.Contains(out, "e2e") {
		t.Errorf("llmgw ctl facility right after the release: %v\n%s", err, out)
	}
	if held := nodes()["c-1"].Held; len(held) != 0 {
		t.Errorf("llmgw ctl nodes right after the release: c-1 held in %v, want none", held)
	}
}
