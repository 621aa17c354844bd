package e2e

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/llmgw/llmgw/controller/store"
	"github.com/llmgw/llmgw/e2e/nomadtest"
	"github.com/llmgw/llmgw/internal/gatewayclient"
	"github.com/llmgw/llmgw/nomadplugin/plugintest"
)

// The job files and policies as operators use them.
const (
	controllerJobFile = "../jobs/llmgw-controller.nomad.hcl"
	gatewayJobFile    = "../jobs/llmgw-gateway.nomad.hcl"
	gatewayACLFile    = "../jobs/llmgw-gateway-acl.hcl"
	controllerJobID   = "llmgw-controller"
	controllerVar     = "nomad/jobs/llmgw-controller"
	controllerService = "llmgw-controller"
)

// maxSunPath is the longest unix socket path Linux takes (sun_path is 108
// bytes with its NUL).
const maxSunPath = 107

// TestControllerAndGatewayAsNomadJobs runs jobs/llmgw-controller.nomad.hcl
// and jobs/llmgw-gateway.nomad.hcl, parsed by the agent as written (only
// their variables set), on a Nomad with ACLs on:
// the policies are attached to the jobs with `nomad acl policy apply -job`
// and the catalog is the Variable nomad/jobs/llmgw-controller, written with
// `nomad var put`, as docs/controller.md says. The job files' two ways of
// getting the binary both run: the controller's on the host (raw_exec,
// llmgw_bin), the gateway's from a release tarball (artifact_url,
// checksum) in a chroot (exec). Both tasks reach Nomad through their task
// API socket with their workload identity. Every state of Nomad's job
// list is watched (a blocking query) from before the controller starts:
// no replica slot may ever have two live jobs.
func TestControllerAndGatewayAsNomadJobs(t *testing.T) {
	nomadBin := nomadtest.Bin(t)
	plugins := nomadtest.PluginDir(t, plugintest.Build(t, devicePkg), plugintest.Build(t, driverPkg), plugintest.Build(t, supervisorPkg))
	engine := plugintest.Build(t, fakeEnginePkg)
	bin := plugintest.Build(t, llmgwPkg)
	// Short node names: the task API socket lives under the client's
	// data_dir (<dir>/data/alloc/<alloc id>/<task>/secrets/api.sock) and a
	// unix socket path may be 107 bytes at most.
	var clients []nomadtest.ClientOptions
	for i, loc := range []struct{ rack, pdu string }{{"k1", "p1"}, {"k2", "p2"}} {
		clients = append(clients, gpuClient(fmt.Sprintf("n%d", i+1), loc.rack, loc.pdu, plugins, engine, ""))
	}
	c := nomadtest.StartACL(t, clients...)
	mgmt := c.API
	for _, a := range c.Clients {
		sock := filepath.Join(a.Dir, "data", "alloc", strings.Repeat("x", 36), "controller", "secrets", "api.sock")
		if len(sock) > maxSunPath {
			t.Fatalf("the task API socket would be %s (%d bytes, over %d): Nomad could not create it; use a shorter TMPDIR", sock, len(sock), maxSunPath)
		}
	}

	// The policies, bound to the jobs, with Nomad's own CLI as documented.
	nomadCLI := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(nomadBin, args...)
		cmd.Env = append(os.Environ(), "NOMAD_ADDR="+c.Server.Addr(), "NOMAD_TOKEN="+c.ManagementToken)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("nomad %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	nomadCLI("acl", "policy", "apply", "-namespace", "default", "-job", controllerJobID, "llmgw-controller", aclPolicyFile)
	nomadCLI("acl", "policy", "apply", "-namespace", "default", "-job", "llmgw-gateway", "llmgw-gateway", gatewayACLFile)

	// The Variable: catalog, facility, and the rest of llmgw.hcl.
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "facility.hcl"), "headroom = 0\n")
	writeFile(t, filepath.Join(dir, "extra.hcl"), fmt.Sprintf(`
api_token       = %q
node_base_watts = 300
driver {
  ready_interval = "500ms"
  ready_timeout  = "2m"
  kill_timeout   = "10s"
  shutdown_delay = "0s"
  check_interval = "2s"
  check_timeout  = "1s"
  engines        = { vllm = %q }
  env            = { FAKE_ENGINE_STRICT = %q }
}
reconcile {
  interval         = "5s"
  partial_deadline = "1m"
}
`, nomadwayToken, engine, strictVLLM))
	putCatalogSrc := func(catalog string, force bool) {
		t.Helper()
		writeFile(t, filepath.Join(dir, "catalog.hcl"), catalog)
		args := []string{"var", "put"}
		if force {
			args = append(args, "-force")
		}
		nomadCLI(append(args, controllerVar, "catalog=@"+filepath.Join(dir, "catalog.hcl"),
			"facility=@"+filepath.Join(dir, "facility.hcl"), "config=@"+filepath.Join(dir, "extra.hcl"))...)
	}
	putCatalog := func(replicas int, force bool) { t.Helper(); putCatalogSrc(betaCatalog(replicas), force) }
	putCatalog(1, false)

	// 3 of n1's 4 GPUs go to a job in another namespace: the controller
	// must read its allocations (the policy's namespace "*" read-job) to
	// count them taken.
	if _, err := mgmt.Namespaces().Register(&api.Namespace{Name: batchNamespace}, nil); err != nil {
		t.Fatal(err)
	}
	const batchGPUs = 3
	batchJob(t, c, "n1", batchGPUs)

	h := recordJobs(t, mgmt)
	runJobFile(t, mgmt, controllerJobFile, fmt.Sprintf("llmgw_bin = %q\n", bin))

	// Two allocations, on the two nodes; one leads, both synced.
	var ctls []ctlAlloc
	nomadtest.Eventually(t, 2*time.Minute, func() (bool, string) {
		ctls = controllerAllocs(t, mgmt)
		var leaders, synced int
		var seen []string
		for _, a := range ctls {
			hz, err := tryHealthz(a.base)
			if err != nil {
				seen = append(seen, fmt.Sprintf("%s: %v", a.short(), err))
				continue
			}
			seen = append(seen, fmt.Sprintf("%s on %s: %+v", a.short(), a.node, hz))
			if hz.Leader {
				leaders++
			}
			if hz.Synced {
				synced++
			}
		}
		return len(ctls) == 2 && leaders == 1 && synced == 2, strings.Join(seen, "; ")
	})
	if ctls[0].node == ctls[1].node {
		t.Errorf("both controller allocations on %s, want them spread over the two nodes", ctls[0].node)
	}
	leader, standby := leading(t, ctls)
	t.Logf("controllers: %s on %s leads, %s on %s stands by", leader.short(), leader.node, standby.short(), standby.node)
	// The lock names the leading allocation (llmgw controller's identity
	// in a Nomad task: host:pid alloc <id>).
	if h := lockHolder(t, mgmt); !strings.HasSuffix(h, " alloc "+leader.id) {
		t.Errorf("leader lock held by %q, want the leading allocation %s", h, leader.id)
	}

	// The leader places the catalog; the standby's view agrees.
	waitServing(t, leader.base, 3*time.Minute, "beta-0")
	rs := waitServing(t, standby.base, time.Minute, "beta-0")

	// What the job-bound policy grants, through the workload identity:
	// the other namespace's GPUs counted taken, every node's power read
	// (node read, GET /v1/client/stats), a label written as dynamic node
	// metadata (node write).
	free := map[string]int{"n1": 4 - batchGPUs, "n2": 4}
	for _, r := range rs {
		for _, n := range r.Nodes {
			free[n]--
		}
	}
	waitNodes(t, leader.base, free)
	if r := apiCall(t, http.MethodPut, leader.base+"/v1/nodes/n2/labels", `{"set":{"fabric":"ib-wi"}}`); r.StatusCode != http.StatusOK {
		t.Errorf("PUT labels: %d %s", r.StatusCode, r.Body)
	}
	n2 := c.NodeID("n2")
	nomadtest.Eventually(t, time.Minute, func() (bool, string) {
		n, _, err := mgmt.Nodes().Info(n2, nil)
		if err != nil {
			return false, err.Error()
		}
		return n.Meta["llmgw.fabric"] == "ib-wi", fmt.Sprintf("n2 meta %v", n.Meta)
	})

	// The gateway job, its binary fetched the other way the job files
	// offer (a release tarball, checksum checked, unpacked into local/),
	// discovering through its socket, routes to it.
	tarball, sum, inside := releaseTarball(t, bin)
	_, port, _ := strings.Cut(freeAddr(t), "127.0.0.1:")
	runJobFile(t, mgmt, gatewayJobFile, fmt.Sprintf("driver = \"exec\"\nllmgw_bin = %q\nartifact_url = %q\nartifact_checksum = %q\nport = %s\n",
		inside, tarball, sum, port))
	gw := gatewayURL(t, mgmt, port)
	nomadtest.Eventually(t, 2*time.Minute, func() (bool, string) {
		got := gwModels(t, gw)
		return got["beta"] == 1, fmt.Sprintf("gateway models %v", got)
	})
	if got := chatReplicas(t, gw, "beta", 3); !slices.Equal(got, []string{"beta-0"}) {
		t.Errorf("chat completions through the gateway job went to %v, want beta-0", got)
	}
	beta0 := jobModifyIndexes(t, mgmt)

	// The leading allocation is stopped (nomad alloc stop): it releases
	// the lock, and another allocation leads (the standby, or the
	// replacement Nomad places), adopting beta-0 with no write.
	stopped := leader
	a, _, err := mgmt.Allocations().Info(stopped.id, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := mgmt.Allocations().Stop(a, nil); err != nil {
		t.Fatalf("stop the leading allocation: %v", err)
	}
	stoppedAt := time.Now()
	next := waitNewLeader(t, mgmt, func(a ctlAlloc) bool { return a.id != stopped.id })
	t.Logf("after stopping %s: %s leads (%s) %s later", stopped.short(), next.short(), which(next, standby),
		time.Since(stoppedAt).Round(time.Second))
	waitServing(t, next.base, 2*time.Minute, "beta-0")

	// The leading controller's process is killed (kill -9): its lock
	// lapses (TTL, then the lock delay) and a controller leads again, not
	// the killed process (the standby, or the killed task restarted by
	// Nomad).
	killed := next
	holder := lockHolder(t, mgmt)
	pid := taskPID(t, killed.id, "controller")
	if want := ":" + strconv.Itoa(pid) + " alloc " + killed.id; !strings.HasSuffix(holder, want) {
		t.Fatalf("leader lock held by %q, want the leading allocation's process (%s)", holder, want)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killedAt := time.Now()
	var after ctlAlloc
	nomadtest.Eventually(t, 3*time.Minute, func() (bool, string) {
		h := lockHolder(t, mgmt)
		if h == "" || h == holder {
			return false, fmt.Sprintf("leader lock held by %q", h)
		}
		for _, a := range controllerAllocs(t, mgmt) {
			if hz, err := tryHealthz(a.base); err == nil && hz.Leader && strings.HasSuffix(h, " alloc "+a.id) {
				after = a
				return true, ""
			}
		}
		return false, fmt.Sprintf("no controller says it leads as the lock's holder %q", h)
	})
	t.Logf("after kill -9 of %s's controller (pid %d): %s leads %s later (lock holder %q)",
		killed.short(), pid, after.short(), time.Since(killedAt).Round(time.Second), lockHolder(t, mgmt))
	waitServing(t, after.base, 2*time.Minute, "beta-0")
	if got := jobModifyIndexes(t, mgmt); fmt.Sprint(got) != fmt.Sprint(beta0) {
		t.Errorf("replica jobs %v after two handovers, want %v (adopted, nothing written)", got, beta0)
	}

	// A catalog change is a Variable update: Nomad renders catalog.hcl
	// again and sends SIGHUP; the leader places beta-1, the gateway
	// routes to both.
	putCatalog(2, true)
	var cur ctlAlloc
	nomadtest.Eventually(t, 3*time.Minute, func() (bool, string) {
		for _, a := range controllerAllocs(t, mgmt) {
			if hz, err := tryHealthz(a.base); err == nil && hz.Leader {
				cur = a
				serving, states := servingCount(getReplicas(t, a.base))
				return serving == 2, states
			}
		}
		return false, "no leader"
	})
	nomadtest.Eventually(t, time.Minute, func() (bool, string) {
		got := gwModels(t, gw)
		return got["beta"] == 2, fmt.Sprintf("gateway models %v", got)
	})
	if got := chatReplicas(t, gw, "beta", 8); !slices.Equal(got, []string{"beta-0", "beta-1"}) {
		t.Errorf("chat completions after the catalog change went to %v, want beta-0 and beta-1", got)
	}
	if logs := allocLog(t, c, cur.id, "controller"); !strings.Contains(logs, "reloaded catalog and facility") {
		t.Errorf("the leading controller's log has no reload:\n%s", logs)
	}

	// A broken catalog in the Variable: the SIGHUP reload refuses it,
	// naming catalog.hcl and its line, and the catalog in force stays.
	putCatalogSrc("model \"beta\" {\n  replicas =\n}\n", true)
	nomadtest.Eventually(t, time.Minute, func() (bool, string) {
		for _, l := range strings.Split(allocLog(t, c, cur.id, "controller"), "\n") {
			if strings.Contains(l, "reload refused") && strings.Contains(l, "catalog.hcl:") {
				t.Logf("the leader refused the broken catalog: %s", l)
				return true, ""
			}
		}
		return false, "no refused reload in the leader's log"
	})
	if rs := waitServing(t, cur.base, time.Minute); len(rs) != 2 {
		t.Errorf("replicas %+v after the refused reload, want beta-0 and beta-1 still", rs)
	}

	// Never two live jobs for one slot; every slot's one job registered
	// once.
	slots := h.bySlot()
	delete(slots, "") // llmgw-controller and llmgw-gateway: jobs of the prefix, not replicas
	if len(slots) != 2 {
		t.Errorf("jobs for %d slots, want beta-0 and beta-1: %v", len(slots), slots)
	}
	for slot, ids := range slots {
		most, together := h.live(slot)
		if len(ids) != 1 || most != 1 {
			t.Errorf("slot %s: jobs %v (at most %d live at once: %v), want exactly one", slot, ids, most, together)
			continue
		}
		if s := h.stub(ids[0]); s.Stop || s.JobModifyIndex != s.CreateIndex {
			t.Errorf("slot %s: job %s stopped %v, created at %d, last registered at %d; want live, registered once",
				slot, ids[0], s.Stop, s.CreateIndex, s.JobModifyIndex)
		}
	}

	// Both reached Nomad through their task API socket: the controller
	// at its host path (raw_exec), the gateway in its chroot (exec).
	if logs := allocLog(t, c, cur.id, "controller"); !strings.Contains(logs, `"nomad":"unix:///`) || !strings.Contains(logs, `/secrets/api.sock"`) {
		t.Errorf("the controller's log does not name the task API socket as its Nomad:\n%s", logs)
	}
	gwAllocs, _, err := mgmt.Jobs().Allocations("llmgw-gateway", false, nil)
	if err != nil || len(gwAllocs) == 0 {
		t.Fatalf("gateway allocations: %v, %v", gwAllocs, err)
	}
	if logs := allocLog(t, c, gwAllocs[0].ID, "gateway"); !strings.Contains(logs, `"discovery":"nomad unix:///secrets/api.sock"`) {
		t.Errorf("the gateway's log does not name the task API socket in its chroot:\n%s", logs)
	}

	// With the policies as written, no controller or gateway allocation
	// was refused anything.
	for _, job := range []string{controllerJobID, "llmgw-gateway"} {
		allocs, _, err := mgmt.Jobs().Allocations(job, true, nil)
		if err != nil {
			t.Fatal(err)
		}
		task := "controller"
		if job == "llmgw-gateway" {
			task = "gateway"
		}
		for _, a := range allocs {
			for _, l := range strings.Split(allocLog(t, c, a.ID, task), "\n") {
				if strings.Contains(l, forbidden) || strings.Contains(strings.ToLower(l), "permission denied") {
					t.Errorf("%s allocation %s: permission error: %s", job, a.ID[:8], l)
				}
			}
		}
	}
}

// runJobFile parses a job file of the repository on the agent with the
// given variables and registers it; the cluster's teardown stops it.
func runJobFile(t *testing.T, client *api.Client, path, vars string) {
	t.Helper()
	src, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	job, err := client.Jobs().ParseHCLOpts(&api.JobsParseRequest{JobHCL: string(src), Variables: vars, Canonicalize: true})
	if err != nil {
		t.Fatalf("parse %s: %v", path, err)
	}
	resp, _, err := client.Jobs().Register(job, nil)
	if err != nil {
		t.Fatalf("register %s: %v", path, err)
	}
	if resp.Warnings != "" {
		t.Logf("register %s: warnings: %s", path, resp.Warnings)
	}
	t.Cleanup(func() { _, _, _ = client.Jobs().Deregister(*job.ID, true, nil) })
}

// nomadwayToken is the api_token the controller job's config (the
// Variable's config item) sets, as an operator's would: the job listens on
// its allocation's address, and writes need a token.
const nomadwayToken = "e2e-nomadway-api-token"

var (
	proxiesMu sync.Mutex
	proxies   = map[string]string{}
)

// tokenProxy returns the URL of a loopback proxy to the controller API at
// base that sends nomadwayToken with every request, so that the read
// helpers shared with other tests (waitServing …) need not carry it. One
// proxy per base, closed when the test ends.
func tokenProxy(t *testing.T, base string) string {
	t.Helper()
	proxiesMu.Lock()
	defer proxiesMu.Unlock()
	if u, ok := proxies[base]; ok {
		return u
	}
	target, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	rp := &httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) {
		r.SetURL(target)
		r.Out.Header.Set("Authorization", "Bearer "+nomadwayToken)
	}}
	srv := httptest.NewServer(rp)
	proxies[base] = srv.URL
	t.Cleanup(func() {
		proxiesMu.Lock()
		delete(proxies, base)
		proxiesMu.Unlock()
		srv.Close()
	})
	return srv.URL
}

// ctlAlloc is one allocation of the controller job serving its API.
type ctlAlloc struct {
	id, node, base string
}

func (a ctlAlloc) short() string { return a.id[:8] }

// controllerAllocs lists the llmgw-controller registrations of running
// allocations, sorted by allocation ID.
func controllerAllocs(t *testing.T, client *api.Client) []ctlAlloc {
	t.Helper()
	regs, _, err := client.Services().Get(controllerService, nil)
	if err != nil {
		t.Fatal(err)
	}
	var out []ctlAlloc
	for _, r := range regs {
		a, _, err := client.Allocations().Info(r.AllocID, nil)
		if err != nil || a.ClientStatus != api.AllocClientStatusRunning || a.DesiredStatus != api.AllocDesiredStatusRun {
			continue
		}
		out = append(out, ctlAlloc{id: r.AllocID, node: a.NodeName, base: tokenProxy(t, fmt.Sprintf("http://%s:%d", r.Address, r.Port))})
	}
	slices.SortFunc(out, func(a, b ctlAlloc) int { return strings.Compare(a.id, b.id) })
	return out
}

func tryHealthz(base string) (healthz, error) {
	var hz healthz
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := getJSONCtx(ctx, base+"/healthz", &hz)
	return hz, err
}

// leading splits two allocations into the one that leads and the other.
func leading(t *testing.T, as []ctlAlloc) (leader, other ctlAlloc) {
	t.Helper()
	for i, a := range as {
		if hz, err := tryHealthz(a.base); err == nil && hz.Leader {
			return a, as[1-i]
		}
	}
	t.Fatal("no controller allocation leads")
	return
}

// waitNewLeader waits until an allocation that ok accepts says it leads.
func waitNewLeader(t *testing.T, client *api.Client, ok func(ctlAlloc) bool) ctlAlloc {
	t.Helper()
	var out ctlAlloc
	nomadtest.Eventually(t, 3*time.Minute, func() (bool, string) {
		var seen []string
		for _, a := range controllerAllocs(t, client) {
			hz, err := tryHealthz(a.base)
			seen = append(seen, fmt.Sprintf("%s: %+v %v", a.short(), hz, err))
			if err == nil && hz.Leader && ok(a) {
				out = a
				return true, ""
			}
		}
		return false, strings.Join(seen, "; ")
	})
	return out
}

func which(a, standby ctlAlloc) string {
	if a.id == standby.id {
		return "the standby"
	}
	return "a replacement allocation"
}

// lockHolder is the holder the leader lock names, "" when it is free.
func lockHolder(t *testing.T, client *api.Client) string {
	t.Helper()
	v, _, err := client.Variables().Peek(store.LeaderPath, nil)
	if err != nil {
		t.Fatal(err)
	}
	if v == nil || v.Lock == nil || v.Lock.ID == "" {
		return ""
	}
	return v.Items["holder"]
}

// taskPID finds the process of an allocation's raw_exec task: its working
// directory is the task's dir, <data_dir>/alloc/<id>/<task>.
func taskPID(t *testing.T, allocID, task string) int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	suffix := filepath.Join("alloc", allocID, task)
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cwd, err := os.Readlink(filepath.Join("/proc", e.Name(), "cwd"))
		if err != nil || !strings.HasSuffix(cwd, suffix) {
			continue
		}
		cmdline, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if strings.Contains(string(cmdline), "controller\x00--config") {
			return pid
		}
	}
	t.Fatalf("no process of allocation %s's task %s", allocID, task)
	return 0
}

// gatewayURL waits for the gateway job's llmgw-gateway registration on
// port, found as the controller finds gateways.
func gatewayURL(t *testing.T, client *api.Client, port string) string {
	t.Helper()
	var url string
	nomadtest.Eventually(t, 2*time.Minute, func() (bool, string) {
		gws, err := gatewayclient.NomadGateways(t.Context(), client, "")
		if err != nil {
			return false, err.Error()
		}
		for _, u := range gws {
			if strings.HasSuffix(u, ":"+port) {
				url = u
				_, err := gatewayclient.DemandClient{}.Read(t.Context(), u)
				return err == nil, fmt.Sprint(err)
			}
		}
		return false, fmt.Sprintf("llmgw-gateway registrations %v", gws)
	})
	return url
}

// allocLog is an allocation task's stderr (the llmgw binary logs there).
func allocLog(t *testing.T, c *nomadtest.Cluster, allocID, task string) string {
	t.Helper()
	a, _, err := c.API.Allocations().Info(allocID, nil)
	if err != nil {
		t.Fatal(err)
	}
	s, err := c.Logs(a, task, "stderr")
	if err != nil {
		t.Logf("logs of %s/%s: %v", allocID[:8], task, err)
	}
	return s
}

// getJSONCtx is getJSON that returns its error: a controller may be
// starting or gone.
func getJSONCtx(ctx context.Context, url string, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s: %s", url, resp.Status, body)
	}
	return json.Unmarshal(body, out)
}

// releaseTarball packs bin as llmgw in a gzipped tarball under a
// directory of its own (as a release tarball holds it), serves it on
// loopback until the test ends, and returns its URL, its checksum in
// go-getter's form and the binary's path in the task once unpacked into
// local/.
func releaseTarball(t *testing.T, bin string) (url, checksum, inside string) {
	t.Helper()
	const name = "llmgw_e2e_linux_amd64"
	src, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for _, h := range []*tar.Header{
		{Name: name + "/", Typeflag: tar.TypeDir, Mode: 0o755},
		{Name: name + "/llmgw", Typeflag: tar.TypeReg, Mode: 0o755, Size: int64(len(src))},
	} {
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := tw.Write(src); err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, name+".tar.gz"), buf.String())
	srv := httptest.NewServer(http.FileServer(http.Dir(dir)))
	t.Cleanup(srv.Close)
	return srv.URL + "/" + name + ".tar.gz", fmt.Sprintf("sha256:%x", sha256.Sum256(buf.Bytes())), "local/" + name + "/llmgw"
}
