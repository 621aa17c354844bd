package hostile_test

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/llmgw/llmgw/controller/render"
	"github.com/llmgw/llmgw/internal/testing/consulfake"
	"github.com/llmgw/llmgw/internal/testing/hostile"
	"github.com/llmgw/llmgw/internal/testing/nomadfake"
	"github.com/llmgw/llmgw/internal/testing/realengine"
	"github.com/llmgw/llmgw/internal/testing/syncbuf"
	"github.com/llmgw/llmgw/internal/testing/wait"
	"github.com/llmgw/llmgw/nomadplugin/plugintest"
)

const (
	model = "tiny"
	token = "hostile-suite-token"
)

// proc is a binary under test; exited closes when it exits.
type proc struct {
	cmd    *exec.Cmd
	out    *syncbuf.Buffer
	exited chan struct{}
	err    error
}

func start(t *testing.T, bin string, args ...string) *proc {
	t.Helper()
	p := &proc{cmd: exec.Command(bin, args...), out: &syncbuf.Buffer{}, exited: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", args[0], err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.exited:
		case <-time.After(20 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.exited
		}
		if t.Failed() {
			t.Logf("llmgw %s output (last lines):\n%s", args[0], lastLines(p.out.String(), 40))
		}
	})
	return p
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func ready(t *testing.T, p *proc, what, url string, header map[string]string) {
	t.Helper()
	wait.For(t, what+" to answer", func() (bool, string) {
		select {
		case <-p.exited:
			t.Fatalf("%s exited: %v\n%s", what, p.err, lastLines(p.out.String(), 40))
		default:
		}
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		for k, v := range header {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false, err.Error()
		}
		b, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK, fmt.Sprintf("%s: %s", resp.Status, b)
	})
}

// TestHostileInputs runs every class of the hostile-input suite against
// the controller (the binary, against the fake Nomad, with a token) and
// the gateway (the binary, over Consul's fake catalog) in front of two
// replicas of llama.cpp's real server, with legitimate traffic beside each
// class, and checks the suite's goals: no process dies, every legitimate
// request is answered, breakers stay closed, memory grows by at most 64 MB
// per hostile request in flight. HOSTILE_TABLE=<file> writes the results
// as the Markdown table docs/reliability.md quotes.
func TestHostileInputs(t *testing.T) {
	if testing.Short() {
		t.Skip("the hostile-input suite runs the binaries and llama.cpp's server for minutes; skipped with -short")
	}
	tiny := realengine.TinyModel(t) // skips, saying so, without llama-server
	// The binaries operators run, so that a crash is a process that
	// exits, and memory is theirs alone.
	bin := plugintest.Build(t, "github.com/llmgw/llmgw/cmd/llmgw")
	e1 := realengine.Start(t, tiny)
	e2 := realengine.Start(t, tiny)

	nomad := nomadfake.New()
	t.Cleanup(nomad.Close)
	nomad.AddNode(nomadfake.NodeSpec{
		Name:    "n1",
		Meta:    map[string]string{"llmgw.site": "s1", "llmgw.room": "a", "llmgw.row": "row1", "llmgw.rack": "r1", "llmgw.pdu": "p1"},
		Devices: []nomadfake.DeviceGroup{nomadfake.NvidiaGPUs("NVIDIA H200", 700, 143771, "n1-gpu0", "n1-gpu1")},
	})

	dir := t.TempDir()
	write := func(name, src string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(src), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	catalog := write("catalog.hcl", fmt.Sprintf(`model %q {
  source   = %q
  replicas = 1
  profile "p" {
    engine = "llamacpp"
    gpu    = "NVIDIA H200"
    gpus   = 1
  }
}
`, model, tiny))
	facility := write("facility.hcl", "budget \"rack=r1\" { watts = 100000 }\n")
	ctlAddr := fmt.Sprintf("127.0.0.1:%d", realengine.FreePort(t))
	cfg := write("llmgw.hcl", fmt.Sprintf(`nomad { address = %q }
listen    = %q
api_token = %q
catalog   = %q
facility  = %q
`, nomad.URL(), ctlAddr, token, catalog, facility))
	ctl := start(t, bin, "controller", "--config", cfg)
	auth := map[string]string{"Authorization": "Bearer " + token}
	ready(t, ctl, "the controller", "http://"+ctlAddr+"/v1/models", auth)

	consul := consulfake.New()
	t.Cleanup(consul.Close)
	for i, e := range []*realengine.Server{e1, e2} {
		consul.Register(consulfake.Service{
			ID: fmt.Sprintf("_nomad-task-r%d", i), Name: render.ServiceName(model), Address: "127.0.0.1", Port: e.Port,
			Tags: []string{"llmgw", "model=" + model, "profile=p", "replica=r" + strconv.Itoa(i)},
		})
	}
	gwAddr := fmt.Sprintf("127.0.0.1:%d", realengine.FreePort(t))
	gw := start(t, bin, "gateway", "--listen", gwAddr, "--consul", consul.Addr(), "--log-level", "warn")
	ready(t, gw, "the gateway", "http://"+gwAddr+"/healthz", nil)
	wait.For(t, "the gateway to serve "+model, func() (bool, string) {
		resp, err := http.Post("http://"+gwAddr+"/v1/chat/completions", "application/json",
			strings.NewReader(`{"model":"`+model+`","messages":[{"role":"user","content":"hi"}],"max_tokens":2}`))
		if err != nil {
			return false, err.Error()
		}
		b, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK, string(b)
	})

	tg := hostile.Targets{
		Controller: "http://" + ctlAddr, Token: token,
		Gateway: "http://" + gwAddr, Model: model, Node: "n1", HoldDomain: "rack=r1",
		Pids: map[string]int{
			"controller": ctl.cmd.Process.Pid, "gateway": gw.cmd.Process.Pid,
			"engine r0": e1.Cmd.Process.Pid, "engine r1": e2.Cmd.Process.Pid,
		},
	}
	hostile.Report(t, hostile.Run(t, tg, hostile.Classes()))
}
