// Command llmgw-demo is what `make demo` runs: a local Nomad (one server and
// three clients on loopback, each in its own rack and PDU, eight mock H200s
// each through nomad-device-nvml, the llmgw driver) with a job that takes
// two GPUs, then the llmgw controller on the demo catalog
// (jobs/examples/demo) serving its replicas with fake-engine, then the
// llmgw gateway over Nomad's service registrations, with one chat
// completion sent through it. It prints where the APIs are, waits for
// Ctrl-C and tears everything down. Without a
// Nomad binary it says what is missing and runs the offline planner on the
// example facility instead.
//
// It is a development tool, not a binary operators install: like
// fake-engine it links the harnesses under internal/testing, which the
// architecture tests allow for these two binaries only.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/llmgw/llmgw/controllerapi"
	"github.com/llmgw/llmgw/engine/contract"
	"github.com/llmgw/llmgw/gateway"
	"github.com/llmgw/llmgw/internal/testing/hubserver"
	"github.com/llmgw/llmgw/internal/testing/llamabuild"
	"github.com/llmgw/llmgw/internal/testing/localnomad"
	"github.com/llmgw/llmgw/internal/testing/tinymodel"
)

func main() {
	binDir := flag.String("bin", "bin", "directory holding the built llmgw binaries")
	once := flag.Bool("once", false, "tear down as soon as the demo job has run (for tests)")
	keep := flag.Bool("keep", false, "keep the agents' data and logs after tear-down")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *binDir, *once, *keep); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

func findNomad() string {
	if b := os.Getenv("NOMAD_BIN"); b != "" {
		return b
	}
	if p, err := exec.LookPath("nomad"); err == nil {
		return p
	}
	return ""
}

func run(ctx context.Context, binDir string, once, keep bool) error {
	binDir, err := filepath.Abs(binDir)
	if err != nil {
		return err
	}
	nomad := findNomad()
	if nomad == "" {
		return planInstead(ctx, binDir)
	}
	plugin := filepath.Join(binDir, "nomad-device-nvml")
	driver := filepath.Join(binDir, "nomad-driver-llmgw")
	sup := filepath.Join(binDir, "llmgw-supervisor")
	engine := filepath.Join(binDir, "fake-engine")
	llmgw := filepath.Join(binDir, "llmgw")
	for _, b := range []string{plugin, driver, sup, engine, llmgw} {
		if _, err := os.Stat(b); err != nil {
			return fmt.Errorf("%s is missing: run make build first", b)
		}
	}
	fmt.Printf("Starting a local Nomad from %s: one server, three clients with 8 mock NVIDIA H200 each.\n", nomad)
	c, err := localnomad.New(nomad, "")
	if err != nil {
		return err
	}
	defer func() {
		fmt.Println("\nTearing down (jobs, then agents)...")
		if err := c.Shutdown(keep); err != nil {
			fmt.Fprintln(os.Stderr, "demo: tear-down:", err)
		}
		if keep {
			fmt.Println("Agent data and logs kept in", c.Root)
		}
	}()
	// The real llama.cpp server, when make llama-server has built it,
	// serves one more model of the demo's catalog; fake-engine stands in
	// for vLLM either way.
	var real *llamabuild.Installed
	if ok, why := llamabuild.Available(); ok {
		in, err := llamabuild.Install(filepath.Join(c.Root, "llama.cpp"), demoTinyModel)
		if err != nil {
			return fmt.Errorf("installing the real llama.cpp engine for the demo: %w", err)
		}
		real = &in
		fmt.Printf("Real engine: %s with a tiny test model (%s), for the model %q.\n", llamabuild.Describe(), in.Model, realModel)
	} else {
		fmt.Printf("Real engine: none, every replica runs fake-engine (%s).\n", why)
	}
	allowed := []string{engine}
	storeConf := func(string) string { return "" }
	if real != nil {
		allowed = append(allowed, real.Binary)
		// The real engine's model comes through each node's model store,
		// fetched once per node from a local hub that speaks the Hugging
		// Face hub's download protocol (as a mirror would).
		hub := hubserver.New(hubserver.Options{})
		if err := hub.Listen("127.0.0.1:0"); err != nil {
			return fmt.Errorf("the demo's local hub: %w", err)
		}
		defer hub.Close()
		if _, err := hub.AddFiles(realRepo, "main", map[string]string{realFile: real.Model}); err != nil {
			return fmt.Errorf("the demo's local hub: %w", err)
		}
		fmt.Printf("Local hub: %s serving %s@main (%s), the model the nodes' stores fetch.\n", hub.URL(), realRepo, realFile)
		storeConf = func(node string) string {
			dir := filepath.Join(c.Root, "stores", node)
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return ""
			}
			_ = os.Chmod(filepath.Dir(dir), 0o755)
			return fmt.Sprintf("\n    model_cache   = %q\n    hub_url       = %q", dir, hub.URL())
		}
	}
	pluginDir := filepath.Join(c.Root, "plugins")
	if err := localnomad.PluginDir(pluginDir, plugin, driver, sup); err != nil {
		return err
	}
	for i, loc := range []struct{ row, rack, pdu string }{
		{"r01", "r01-k01", "p01-k01-a"},
		{"r01", "r01-k02", "p01-k02-a"},
		{"r02", "r02-k01", "p02-k01-a"},
	} {
		name := fmt.Sprintf("gpu-%d", i+1)
		_, err := c.AddClient(localnomad.ClientOptions{
			Name:      name,
			PluginDir: pluginDir,
			Meta: map[string]string{
				"llmgw.site": "demo", "llmgw.room": "a",
				"llmgw.row": loc.row, "llmgw.rack": loc.rack, "llmgw.pdu": loc.pdu,
			},
			Plugins: map[string]string{
				"nomad-device-nvml": fmt.Sprintf(`
    mock {
      system = "dgxh200"
      seed   = %q
    }`, name),
				"nomad-driver-llmgw": `
    ready_timeout = "5m"` + storeConf(name) + localnomad.DriverPolicy(allowed...),
			},
		})
		if err != nil {
			return err
		}
	}
	wctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	if err := c.WaitReady(wctx); err != nil {
		return fmt.Errorf("waiting for the clients: %w", err)
	}
	if err := showNodes(wctx, c); err != nil {
		return err
	}
	if err := runGPUJob(wctx, c); err != nil {
		return err
	}
	token, err := newToken()
	if err != nil {
		return err
	}
	// The gateway's address first: the controller reads its demand (what
	// wakes a model at zero) from it.
	gwPort, err := freePort()
	if err != nil {
		return err
	}
	gwAddr := fmt.Sprintf("127.0.0.1:%d", gwPort)
	api, stopController, exited, err := startController(ctx, c, llmgw, engine, real, token, gwAddr)
	if err != nil {
		return err
	}
	defer stopController()
	served, err := showReplicas(wctx, api, token, exited)
	if err != nil {
		return err
	}
	gw, stopGateway, gwExited, err := startGateway(c, llmgw, gwAddr)
	if err != nil {
		return err
	}
	defer stopGateway()
	gctx, gcancel := context.WithTimeout(ctx, time.Minute)
	defer gcancel()
	model, err := tryGateway(gctx, gw, served, gwExited, real != nil)
	if err != nil {
		return err
	}
	if real != nil {
		if err := showWeights(gctx, api, token); err != nil {
			return err
		}
		sctx, scancel := context.WithTimeout(ctx, 4*time.Minute)
		defer scancel()
		if err := sleepAndWake(sctx, api, token, gw); err != nil {
			return err
		}
	}
	console, err := checkConsole(ctx, api)
	if err != nil {
		return err
	}
	fmt.Printf("\nNomad API: %s   (export NOMAD_ADDR=%s; nomad job status)\n", c.Server.Addr(), c.Server.Addr())
	fmt.Printf("llmgw API: %s   (its api_token is below; curl -H \"Authorization: Bearer $LLMGW_TOKEN\" %s/v1/replicas; %s/metrics needs none)\n", api, api, api)
	fmt.Printf("  export LLMGW_ADDR=%s LLMGW_TOKEN=%s   (then: llmgw ctl replicas; llmgw ctl facility hold rack=r01-k01)\n", api, token)
	fmt.Printf("llmgw console: %s   (open it in a browser: replicas, models, facility, explain; paste the token in its token field)\n", console)
	fmt.Printf("llmgw gateway: %s   (OpenAI-compatible: curl %s/v1/models; %s/metrics)\n", gw, gw, gw)
	fmt.Printf("  curl -sN %s/v1/chat/completions -H 'Content-Type: application/json' \\\n", gw)
	fmt.Printf("    -d '{\"model\":%q,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"stream\":true}'\n", model)
	fmt.Printf("Agent logs: %s/*/agent.log; controller log: %s/controller.log; gateway log: %s/gateway.log\n", c.Root, c.Root, c.Root)
	if once {
		return nil
	}
	fmt.Println("Press Ctrl-C to stop.")
	<-ctx.Done()
	return nil
}

// showNodes waits for every node's GPUs and prints them with their power.
func showNodes(ctx context.Context, c *localnomad.Cluster) error {
	var lines []string
	err := localnomad.Poll(ctx, func() (bool, string, error) {
		lines = lines[:0]
		nodes, _, err := c.API.Nodes().List(nil)
		if err != nil {
			return false, err.Error(), nil
		}
		for _, n := range nodes {
			full, _, err := c.API.Nodes().Info(n.ID, nil)
			if err != nil {
				return false, err.Error(), nil
			}
			gpus, healthy, limit := 0, 0, int64(0)
			if full.NodeResources != nil {
				for _, d := range full.NodeResources.Devices {
					if d.Vendor != "nvidia" {
						continue
					}
					for _, in := range d.Instances {
						gpus++
						if in.Healthy {
							healthy++
						}
					}
					if a := d.Attributes["power_limit"]; a != nil && a.IntVal != nil {
						limit = *a.IntVal
					}
				}
			}
			if gpus == 0 {
				return false, "waiting for " + n.Name + "'s GPUs", nil
			}
			lines = append(lines, fmt.Sprintf("  %-6s rack=%-8s pdu=%-10s %d/%d healthy NVIDIA H200, power_limit %d W each",
				n.Name, full.Meta["llmgw.rack"], full.Meta["llmgw.pdu"], healthy, gpus, limit))
		}
		return len(lines) == 3, fmt.Sprintf("%d of 3 nodes with GPUs", len(lines)), nil
	})
	if err != nil {
		return err
	}
	sort.Strings(lines)
	fmt.Println("\nNodes as Nomad sees them:")
	fmt.Println(strings.Join(lines, "\n"))
	return nil
}

// runGPUJob runs jobs/gpu-env.nomad.hcl's equivalent and prints what the
// task was given.
func runGPUJob(ctx context.Context, c *localnomad.Cluster) error {
	str := func(s string) *string { return &s }
	num := func(n int) *int { return &n }
	count := uint64(2)
	job := &api.Job{
		ID: str("gpu-env"), Name: str("gpu-env"), Type: str("batch"), Datacenters: []string{"*"},
		TaskGroups: []*api.TaskGroup{{
			Name:             str("g"),
			RestartPolicy:    &api.RestartPolicy{Attempts: num(0), Mode: str("fail")},
			ReschedulePolicy: &api.ReschedulePolicy{Attempts: num(0), Unlimited: new(bool)},
			Tasks: []*api.Task{{
				Name: "show", Driver: "raw_exec",
				Config: map[string]any{"command": "/bin/sh", "args": []string{"-c", "echo CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES LLMGW_GPU_UUIDS=$LLMGW_GPU_UUIDS"}},
				Resources: &api.Resources{CPU: num(100), MemoryMB: num(64),
					Devices: []*api.RequestedDevice{{Name: "nvidia/gpu", Count: &count}}},
			}},
		}},
	}
	fmt.Println("\nRunning job gpu-env (raw_exec, device \"nvidia/gpu\" { count = 2 })...")
	if _, _, err := c.API.Jobs().Register(job, nil); err != nil {
		return fmt.Errorf("register gpu-env: %w", err)
	}
	var allocID string
	err := localnomad.Poll(ctx, func() (bool, string, error) {
		allocs, _, err := c.API.Jobs().Allocations("gpu-env", true, nil)
		if err != nil {
			return false, err.Error(), nil
		}
		for _, a := range allocs {
			switch a.ClientStatus {
			case api.AllocClientStatusComplete:
				allocID = a.ID
				return true, "", nil
			case api.AllocClientStatusFailed:
				return false, "", errors.New("gpu-env failed; see the client logs")
			}
		}
		return false, "gpu-env not complete yet", nil
	})
	if err != nil {
		return err
	}
	alloc, _, err := c.API.Allocations().Info(allocID, nil)
	if err != nil {
		return err
	}
	lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := c.Logs(lctx, alloc, "show", "stdout")
	if err != nil {
		return err
	}
	fmt.Printf("  allocation %s on %s printed: %s\n", alloc.ID[:8], alloc.NodeName, strings.TrimSpace(out))
	return nil
}

// planInstead runs the offline planner on the example facility.
func planInstead(ctx context.Context, binDir string) error {
	fmt.Println("make demo: no Nomad agent binary found. Set NOMAD_BIN to one, or put `nomad` on PATH,")
	fmt.Println("to run llmgw's plugins in a local Nomad. Meanwhile, the offline planner on the example")
	fmt.Println("facility (jobs/examples: 256 nodes, PDU and rack budgets, one hold):")
	fmt.Println()
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, "llmgw"), "plan",
		"--fleet", "jobs/examples/fleet.hcl", "--facility", "jobs/examples/facility.hcl", "--catalog", "jobs/examples/catalog.hcl")
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	return cmd.Run()
}

// startController writes llmgw.hcl for the demo and runs `llmgw
// controller` in its own process group; it returns the API's address, a
// function that stops it, and one that reports (with its log) whether it
// has exited.
//
// The controller's API needs a token (api_token, given to it in the
// environment as LLMGW_API_TOKEN), for reads and writes alike: the demo
// runs as an operator would, not in insecure_writes mode.
func startController(_ context.Context, c *localnomad.Cluster, llmgw, engine string, real *llamabuild.Installed, token, gateway string) (string, func(), func() error, error) {
	repo, err := os.Getwd()
	if err != nil {
		return "", nil, nil, err
	}
	catalog := filepath.Join(repo, "jobs/examples/demo/catalog.hcl")
	engines := fmt.Sprintf("{ vllm = %q }", engine)
	if real != nil {
		// The demo catalog and one model more, served by the real engine.
		b, err := os.ReadFile(catalog)
		if err != nil {
			return "", nil, nil, err
		}
		catalog = filepath.Join(c.Root, "catalog.hcl")
		b = append(b, fmt.Sprintf(realModelBlock, realModel, realRepo, realFile, napModel, realRepo, realFile)...)
		if err := os.WriteFile(catalog, b, 0o644); err != nil {
			return "", nil, nil, err
		}
		engines = fmt.Sprintf("{ vllm = %q, llamacpp = %q }", engine, real.Binary)
	}
	port, err := freePort()
	if err != nil {
		return "", nil, nil, err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	// fake-engine stands in for vLLM in strict mode: it refuses any command
	// line vLLM's parser at the pinned version would.
	vllm, err := contract.Load("vllm")
	if err != nil {
		return "", nil, nil, err
	}
	strict := vllm.Spec()
	cfg := filepath.Join(c.Root, "llmgw.hcl")
	body := fmt.Sprintf(`nomad { address = %q }
listen    = %q
api_token = env("LLMGW_API_TOKEN")
catalog   = %q
facility  = %q
driver {
  ready_timeout  = "5m"
  kill_timeout   = "10s"
  shutdown_delay = "0s"
  check_interval = "2s"
  check_timeout  = "1s"
  engines        = %s
  env            = { FAKE_ENGINE_STRICT = %q }
}
reconcile { interval = "10s" }
autoscale {
  interval = "2s"
  gateways = ["http://%s"]
}
`, c.Server.Addr(), addr, catalog, filepath.Join(repo, "jobs/examples/demo/facility.hcl"), engines, strict, gateway)
	if err := os.WriteFile(cfg, []byte(body), 0o644); err != nil {
		return "", nil, nil, err
	}
	stop, exited, err := startLLMGW(c.Root, "controller", []string{"LLMGW_API_TOKEN=" + token}, llmgw, "controller", "--config", cfg)
	if err != nil {
		return "", nil, nil, err
	}
	fmt.Printf("\nStarted the llmgw controller (API on http://%s) with the demo catalog: %s\n", addr, "jobs/examples/demo/catalog.hcl")
	fmt.Printf("Engines: fake-engine standing in for vLLM in strict mode (FAKE_ENGINE_STRICT=%s): every command line is checked against vLLM's parser.\n", strict)
	if real != nil {
		fmt.Printf("         %s serving %q (catalog %s).\n", llamabuild.Describe(), realModel, catalog)
	} else {
		fmt.Println("         The real llama.cpp server is not built: run `make llama-server` (about 13 minutes on 2 cores) and the demo serves one model with it.")
	}
	return "http://" + addr, stop, exited, nil
}

// startLLMGW runs `llmgw args...` in its own process group with its output
// in root/<name>.log; it returns a function that stops it (SIGTERM, then
// SIGKILL after 10s) and one that reports (with its log) whether it has
// exited.
func startLLMGW(root, name string, env []string, llmgw string, args ...string) (func(), func() error, error) {
	logPath := filepath.Join(root, name+".log")
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, nil, err
	}
	cmd := exec.Command(llmgw, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		_ = logf.Close()
		return nil, nil, err
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	stop := func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		_ = logf.Close()
	}
	exited := func() error {
		select {
		case <-done:
			b, _ := os.ReadFile(logPath)
			return fmt.Errorf("the %s exited:\n%s", name, localnomad.Tail(string(b), 20))
		default:
			return nil
		}
	}
	return stop, exited, nil
}

// startGateway runs `llmgw gateway` on a free loopback port over the local
// Nomad's service registrations; it returns its base URL, a function that
// stops it, and one that reports whether it has exited.
func startGateway(c *localnomad.Cluster, llmgw, addr string) (string, func(), func() error, error) {
	stop, exited, err := startLLMGW(c.Root, "gateway", nil, llmgw, "gateway", "--listen", addr, "--nomad", c.Server.Addr())
	if err != nil {
		return "", nil, nil, err
	}
	fmt.Printf("\nStarted the llmgw gateway (OpenAI-compatible API on http://%s) over Nomad's service registrations.\n", addr)
	return "http://" + addr, stop, exited, nil
}

// tryGateway waits until the gateway lists every model with the replicas
// the controller serves (served: replicas by model), prints its list, sends
// one chat completion through it for the first model and prints who
// answered. It returns that model.
// checkConsole returns the controller's web console URL once it answers
// 200 with its page.
func checkConsole(ctx context.Context, api string) (string, error) {
	url := api + "/ui/"
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", fmt.Errorf("the console at %s: %w", url, err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusOK || !strings.Contains(strings.ToLower(string(body)), "<html") {
		return "", fmt.Errorf("the console at %s answered %s (%d bytes), not its page", url, resp.Status, len(body))
	}
	return url, nil
}

// newToken makes the controller's api_token for this run: 32 random
// bytes, hex.
func newToken() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("api token: %w", err)
	}
	return hex.EncodeToString(b), nil
}

// realModel is the catalog model the real llama.cpp engine serves in the
// demo; realModelBlock its catalog entry (name, model file).
const realModel = "tiny-llama"

// napModel sleeps when idle; realRepo and realFile are where the local hub
// serves the real engine's model.
const (
	napModel = "tiny-nap"
	realRepo = "llmgw/tiny-llama"
	realFile = "tiny.gguf"
)

const realModelBlock = `
# Added by make demo because the real llama.cpp server is built: llama.cpp's
# own llama-server with a tiny deterministic model (internal/testing/tinymodel),
# its weights fetched into each node's model store from the demo's local hub.
model %q {
  source   = %q
  file     = %q
  replicas = 2
  weights {
    revision = "main"
  }

  profile "h200x1-llamacpp" {
    engine = "llamacpp"
    gpu    = "NVIDIA H200"
    gpus   = 1
    watts  = 300
    spread = ["rack", "pdu"]
    args   = ["-np", "2", "-c", "4096"]
  }
}

# The same weights for a model that sleeps when idle: at zero until a
# request comes, then one replica whose engine sleeps after 5 s without a
# request (the profile's own --sleep-idle-seconds; idle_after is the
# autoscaler's, at least down_window) and wakes on the next.
model %q {
  source = %q
  file   = %q
  weights {
    revision = "main"
  }
  autoscale {
    min         = 0
    max         = 1
    target { outstanding_per_replica = 4 }
    down_window = "1m"
    idle_after  = "1m"
    when_idle   = "sleep"
  }

  profile "h200x1-llamacpp" {
    engine = "llamacpp"
    gpu    = "NVIDIA H200"
    gpus   = 1
    watts  = 300
    args   = ["-np", "1", "-c", "2048", "--sleep-idle-seconds", "5"]
  }
}
`

// demoTinyModel is the model the real engine loads in the demo.
var demoTinyModel = func() tinymodel.Options {
	o := tinymodel.Defaults
	o.Name, o.Answer = "tiny-llama", "Hello from llama.cpp!"
	return o
}()

func tryGateway(ctx context.Context, gw string, served map[string]int, exited func() error, real bool) (string, error) {
	type card struct {
		ID       string `json:"id"`
		Replicas int    `json:"replicas"`
	}
	var list struct {
		Data []card `json:"data"`
	}
	client := &http.Client{Timeout: 10 * time.Second}
	err := localnomad.Poll(ctx, func() (bool, string, error) {
		if err := exited(); err != nil {
			return false, "", err
		}
		resp, err := client.Get(gw + "/v1/models")
		if err != nil {
			return false, err.Error(), nil
		}
		defer func() { _ = resp.Body.Close() }()
		list.Data = nil
		if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
			return false, fmt.Sprintf("/v1/models: %s: %v", resp.Status, err), nil
		}
		got := map[string]int{}
		for _, m := range list.Data {
			if m.Replicas > 0 { // a model at zero (tiny-nap) is listed, to be woken
				got[m.ID] = m.Replicas
			}
		}
		return maps.Equal(got, served), fmt.Sprintf("the gateway lists %v, the controller serves %v", got, served), nil
	})
	if err != nil {
		return "", fmt.Errorf("waiting for the gateway to list the replicas: %w", err)
	}
	var models []string
	for _, m := range list.Data {
		if m.Replicas > 0 {
			models = append(models, fmt.Sprintf("%s (%d replicas)", m.ID, m.Replicas))
		}
	}
	fmt.Printf("  GET /v1/models: %s\n", strings.Join(models, ", "))

	model := slices.Sorted(maps.Keys(served))[0]
	if real {
		model = realModel
	}
	body := fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":"hello from make demo"}],"max_tokens":8}`, model)
	resp, err := client.Post(gw+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		return "", fmt.Errorf("chat completion through the gateway: %w", err)
	}
	defer func() { _ = resp.Body.Close() }()
	var out struct {
		Choices []struct {
			Message struct {
				Content string `json:"content"`
			} `json:"message"`
		} `json:"choices"`
		Fingerprint string `json:"system_fingerprint"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return "", fmt.Errorf("chat completion through the gateway: %s: %w", resp.Status, err)
	}
	if resp.StatusCode != http.StatusOK || len(out.Choices) == 0 {
		return "", fmt.Errorf("chat completion through the gateway: %s with %d choices", resp.Status, len(out.Choices))
	}
	fmt.Printf("  POST /v1/chat/completions {\"model\":%q}: through the gateway: %d from replica %s: %q\n",
		model, resp.StatusCode, resp.Header.Get(gateway.ReplicaHeader), out.Choices[0].Message.Content)
	if real {
		fmt.Printf("  answered by %s (system_fingerprint %s), not fake-engine\n", llamabuild.Describe(), out.Fingerprint)
	} else {
		fmt.Println("  answered by fake-engine; `make llama-server` builds the real llama.cpp server, and the demo then answers with it")
	}
	return model, nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// showReplicas waits until every replica of the catalog serves, printing
// progress, then prints where each one runs. It returns how many replicas
// of each model serve.
func showReplicas(ctx context.Context, base, token string, exited func() error) (map[string]int, error) {
	type replica struct {
		ID      string   `json:"id"`
		Model   string   `json:"model"`
		Profile string   `json:"profile"`
		State   string   `json:"state"`
		Domain  string   `json:"domain"`
		Nodes   []string `json:"nodes"`
		Watts   float64  `json:"watts"`
	}
	var rs []replica
	last := ""
	err := localnomad.Poll(ctx, func() (bool, string, error) {
		if err := exited(); err != nil {
			return false, "", err
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/v1/replicas", nil)
		if err != nil {
			return false, "", err
		}
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false, err.Error(), nil
		}
		defer func() { _ = resp.Body.Close() }()
		if resp.StatusCode != http.StatusOK {
			b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
			return false, fmt.Sprintf("GET /v1/replicas: %s: %s", resp.Status, b), nil
		}
		rs = nil
		if err := json.NewDecoder(resp.Body).Decode(&rs); err != nil {
			return false, err.Error(), nil
		}
		counts := map[string]int{}
		for _, r := range rs {
			counts[r.State]++
		}
		line := fmt.Sprintf("  replicas: %d serving, %d starting, %d pending, %d unplaced", counts["serving"], counts["starting"], counts["pending"]+counts["partial"], counts["unplaced"])
		if line != last {
			fmt.Println(line)
			last = line
		}
		return len(rs) > 0 && counts["serving"] == len(rs), line, nil
	})
	if err != nil {
		return nil, fmt.Errorf("waiting for the replicas to serve: %w", err)
	}
	fmt.Println("\nReplicas, placed by llmgw:")
	served := map[string]int{}
	for _, r := range rs {
		fmt.Printf("  %-16s %-14s %-8s %-8s %-14s %-8s %4.0f W\n", r.ID, r.Model, r.Profile, r.State, r.Domain, strings.Join(r.Nodes, ","), r.Watts)
		served[r.Model]++
	}
	return served, nil
}

// apiGet reads path from the controller's API into out.
func apiGet(ctx context.Context, base, token, path string, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+path, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", path, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(out)
}

// showWeights prints where the real model's weights are, as llmgw ctl
// weights does.
func showWeights(ctx context.Context, base, token string) error {
	var line string
	err := localnomad.Poll(ctx, func() (bool, string, error) {
		var models []controllerapi.ModelView
		if err := apiGet(ctx, base, token, "/v1/models", &models); err != nil {
			return false, err.Error(), nil
		}
		for _, m := range models {
			if m.Name == realModel && m.Weights != nil {
				line = fmt.Sprintf("  %s: %s, %.1f MB, whole in the model store of %s", m.Name, m.Weights.Source, float64(m.Weights.Bytes)/1e6, strings.Join(m.Weights.Nodes, ", "))
				return len(m.Weights.Nodes) >= 2, line, nil
			}
		}
		return false, "no weights for " + realModel + " yet", nil
	})
	if err != nil {
		return fmt.Errorf("waiting for the nodes to hold %s's weights: %w", realModel, err)
	}
	fmt.Println("\nWhere the weights are (llmgw ctl weights; each node's driver reports its store as node attributes driver.llmgw.weights.<key>):")
	fmt.Println(line)
	return nil
}

// sleepAndWake wakes the sleeping model from zero through the gateway,
// waits for its engine to sleep, and wakes it again, timing both.
func sleepAndWake(ctx context.Context, base, token, gw string) error {
	client := &http.Client{Timeout: 3 * time.Minute}
	ask := func() (time.Duration, string, error) {
		body := fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":"are you awake?"}],"max_tokens":8}`, napModel)
		start := time.Now()
		resp, err := client.Post(gw+"/v1/chat/completions", "application/json", strings.NewReader(body))
		if err != nil {
			return 0, "", err
		}
		defer func() { _ = resp.Body.Close() }()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		if resp.StatusCode != http.StatusOK {
			return 0, "", fmt.Errorf("%s: %s", resp.Status, b)
		}
		return time.Since(start), resp.Header.Get(gateway.ReplicaHeader), nil
	}
	fmt.Printf("\nA model that sleeps (%s: autoscale min 0, when_idle = \"sleep\"), at zero replicas:\n", napModel)
	d, replica, err := ask()
	if err != nil {
		return fmt.Errorf("waking %s from zero: %w", napModel, err)
	}
	fmt.Printf("  a request through the gateway was held, woke it from zero, and was answered by %s after %s (placement, start, load)\n", replica, d.Round(10*time.Millisecond))
	err = localnomad.Poll(ctx, func() (bool, string, error) {
		var r struct {
			Engine *controllerapi.EngineMetrics `json:"engine"`
		}
		if err := apiGet(ctx, base, token, "/v1/replicas/"+replica, &r); err != nil {
			return false, err.Error(), nil
		}
		return r.Engine != nil && r.Engine.Asleep != nil && *r.Engine.Asleep, replica + "'s engine awake", nil
	})
	if err != nil {
		return fmt.Errorf("waiting for %s to sleep: %w", replica, err)
	}
	fmt.Printf("  idle, its engine fell asleep (llmgw ctl replicas: \"serving, asleep\"; its model freed, its GPU kept)\n")
	d, replica, err = ask()
	if err != nil {
		return fmt.Errorf("waking %s: %w", napModel, err)
	}
	fmt.Printf("  the next request woke it: answered by %s after %s (the engine's reload only)\n", replica, d.Round(10*time.Millisecond))
	return nil
}
