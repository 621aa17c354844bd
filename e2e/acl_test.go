package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/llmgw/llmgw/controller"
	"github.com/llmgw/llmgw/controller/config"
	"github.com/llmgw/llmgw/controller/store"
	"github.com/llmgw/llmgw/e2e/nomadtest"
	"github.com/llmgw/llmgw/nomadplugin/plugintest"
)

// aclPolicyFile is the controller's policy, as an operator applies it.
const aclPolicyFile = "../jobs/llmgw-acl.hcl"

// forbidden is how nomad/api's errors name Nomad's refusal.
const forbidden = "response code: 403"

// batchNamespace holds a job that is not the controller's and takes GPUs.
const batchNamespace = "ml-batch"

// TestControllerWithACLs runs the controller on a Nomad with ACLs on, its
// token holding only jobs/llmgw-acl.hcl (as written, and with the file's
// commented block for a namespaces list), against two GPU clients (racks
// k1 and k2, 4 mock H200s each), with 3 of gpu-1's GPUs taken by a job in
// another namespace (ml-batch).
func TestControllerWithACLs(t *testing.T) {
	nomadtest.Bin(t)
	plugins := nomadtest.PluginDir(t, plugintest.Build(t, devicePkg), plugintest.Build(t, driverPkg), plugintest.Build(t, supervisorPkg))
	engine := plugintest.Build(t, fakeEnginePkg)
	var clients []nomadtest.ClientOptions
	for i, loc := range []struct{ rack, pdu string }{{"k1", "p1"}, {"k2", "p2"}} {
		clients = append(clients, gpuClient(fmt.Sprintf("gpu-%d", i+1), loc.rack, loc.pdu, plugins, engine, ""))
	}
	c := nomadtest.StartACL(t, clients...)
	mgmt := c.API // the management token, for the test's own reads

	// Without a token Nomad refuses even the node list: ACLs are on.
	anon, err := api.NewClient(&api.Config{Address: c.Server.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := anon.Nodes().List(nil); err == nil || !strings.Contains(err.Error(), forbidden) {
		t.Fatalf("node list without a token: %v, want 403 (ACLs not on?)", err)
	}

	if _, err := mgmt.Namespaces().Register(&api.Namespace{Name: batchNamespace}, nil); err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile(aclPolicyFile)
	if err != nil {
		t.Fatal(err)
	}
	file := string(src)
	listed := listedNamespacesPolicy(t, file, batchNamespace)
	// The file without its namespace "*" block: read-job in default only.
	noStar := strings.Replace(listed, fmt.Sprintf("namespace %q {\n  capabilities = [\"read-job\"]\n}\n", batchNamespace), "", 1)
	if noStar == listed {
		t.Fatal("could not drop the ml-batch block from the listed-namespaces policy")
	}
	policy := func(name, rules string) {
		t.Helper()
		if _, err := mgmt.ACLPolicies().Upsert(&api.ACLPolicy{Name: name, Rules: rules}, nil); err != nil {
			t.Fatalf("policy %s: %v\n%s", name, err, rules)
		}
	}
	token := func(name, rules string) string {
		t.Helper()
		policy(name, rules)
		tok, _, err := mgmt.ACLTokens().Create(&api.ACLToken{Name: name, Type: "client", Policies: []string{name}}, nil)
		if err != nil {
			t.Fatalf("token %s: %v", name, err)
		}
		return tok.SecretID
	}
	fileToken := token("llmgw", file)
	// Its policy starts without read on ml-batch and gets the file's
	// block for it later.
	listedToken := token("llmgw-listed", noStar)
	noStarToken := token("llmgw-no-star", noStar)
	otherToken := token("not-llmgw", `agent { policy = "read" }`)

	// 3 of gpu-1's 4 GPUs go to a job in ml-batch.
	const batchGPUs = 3
	batchJob(t, c, "gpu-1", batchGPUs)

	// files writes the controller's files; its token and namespaces are
	// set on the loaded configuration (controllerFiles writes the nomad
	// block).
	files := func(t *testing.T, catalog, tok string, namespaces ...string) config.Config {
		cfg := controllerFiles(t, c.Server.Addr(), engine, catalog, `headroom = 0`)
		cfg.Nomad.Token = tok
		if len(namespaces) > 0 {
			cfg.Nomad.Namespaces = namespaces
		}
		return cfg
	}
	// freeWith is each node's free GPUs with the beta replicas rs (1 GPU
	// each) and, when counted, the ml-batch job's.
	freeWith := func(rs []replicaJSON, batchCounted bool) map[string]int {
		free := map[string]int{"gpu-1": 4, "gpu-2": 4}
		if batchCounted {
			free["gpu-1"] -= batchGPUs
		}
		for _, r := range rs {
			for _, n := range r.Nodes {
				free[n]--
			}
		}
		return free
	}

	// A token without the policy: every watch and the leader lock fail
	// with 403 in the log, the API says it is not synced, nothing placed.
	t.Run("token without the policy", func(t *testing.T) {
		h := runLoggedController(t, files(t, betaCatalog(2), otherToken), "ctl-denied")
		for _, what := range []string{`watch=nodes`, `watch=allocations`, `watch=jobs`, `msg="acquire leader lock"`} {
			h.waitLog(t, fmt.Sprintf("%s with a 403", what), func(line string) bool {
				return strings.Contains(line, what) && strings.Contains(line, forbidden)
			})
		}
		hz := h.healthz(t)
		if hz.Synced || hz.Leader {
			t.Errorf("healthz %+v with a token that may read nothing, want synced and leader false", hz)
		}
		h.stop()
		if jobs := llmgwJobs(t, mgmt); len(jobs) != 0 {
			t.Errorf("Nomad has %d llmgw jobs, want none", len(jobs))
		}
	})
	if t.Failed() {
		return
	}

	// The policy as written, namespaces left at "*": the catalog places and
	// serves (health checks read), node stats are read (measured draw), the
	// ml-batch GPUs count as taken, a hold, the decisions and the leader
	// lock are written.
	var jobIndexes map[string]uint64
	t.Run("policy as written", func(t *testing.T) {
		h := runLoggedController(t, files(t, betaCatalog(2), fileToken), "ctl-1")
		rs := waitServing(t, h.base, 3*time.Minute)
		if len(rs) != 2 {
			t.Fatalf("replicas %+v, want beta-0 and beta-1", rs)
		}
		waitNodes(t, h.base, freeWith(rs, true))

		hold := apiCall(t, http.MethodPut, h.base+"/v1/facility/holds/rack=k2", `{"reason":"acl e2e","drain":false}`)
		if hold.StatusCode != http.StatusOK {
			t.Fatalf("PUT hold: %d %s", hold.StatusCode, hold.Body)
		}
		v, _, err := mgmt.Variables().Peek(store.HoldsPath, nil)
		if err != nil || v == nil || !strings.Contains(v.Items["holds"], `"rack=k2"`) {
			t.Fatalf("variable %s = %+v, %v: want the rack=k2 hold", store.HoldsPath, v, err)
		}
		lock, _, err := mgmt.Variables().Peek(store.LeaderPath, nil)
		if err != nil || lock == nil || lock.Lock == nil || lock.Items["holder"] != "ctl-1" {
			t.Fatalf("variable %s = %+v, %v: want locked by ctl-1", store.LeaderPath, lock, err)
		}
		if hz := h.healthz(t); !hz.Leader || !hz.Synced {
			t.Errorf("healthz %+v, want leader and synced", hz)
		}
		for _, r := range rs {
			d, _, err := mgmt.Variables().Peek(store.DecisionPath(r.ID), nil)
			if err != nil || d == nil {
				t.Errorf("decision of %s: %+v, %v: want it stored", r.ID, d, err)
			}
		}
		jobIndexes = jobModifyIndexes(t, mgmt)
		h.stop()
		h.noPermissionErrors(t)
	})
	if t.Failed() {
		return
	}

	// nomad.namespaces lists default and ml-batch, with one more replica
	// in the catalog. The token may not read ml-batch yet: that list fails
	// with 403 and the controller, leading, is not synced: no pass, no
	// view, no job written. Once the policy gets the file's block for
	// ml-batch, the controller (without a restart) reads it, counts its
	// GPUs, adopts the two replicas (no write) and leaves the third
	// unplaced: gpu-1's last GPUs are ml-batch's, rack k2 is held.
	t.Run("namespaces listed, read on one granted late", func(t *testing.T) {
		h := runLoggedController(t, files(t, betaCatalog(3), listedToken, "default", batchNamespace), "ctl-2")
		h.waitLog(t, "the ml-batch allocations refused with 403", func(line string) bool {
			return strings.Contains(line, `watch="allocations in namespace ml-batch"`) && strings.Contains(line, forbidden)
		})
		nomadtest.Eventually(t, time.Minute, func() (bool, string) {
			hz := h.healthz(t)
			return hz.Leader, fmt.Sprintf("healthz %+v", hz)
		})
		if hz := h.healthz(t); hz.Synced {
			t.Errorf("healthz %+v: synced without the ml-batch allocations", hz)
		}
		if r := apiCall(t, http.MethodGet, h.base+"/v1/replicas", ""); r.StatusCode != http.StatusServiceUnavailable ||
			!strings.Contains(r.Body, "has not read Nomad yet (still to read: allocations") {
			t.Errorf("GET /v1/replicas before every list was read: %d %s, want 503 saying the allocations are not read yet", r.StatusCode, r.Body)
		}
		for _, l := range h.lines() {
			if strings.Contains(l, forbidden) && !strings.Contains(l, "namespace ml-batch") {
				t.Errorf("403 other than ml-batch's allocations: %s", l)
			}
		}

		policy("llmgw-listed", listed)
		var rs []replicaJSON
		nomadtest.Eventually(t, 2*time.Minute, func() (bool, string) {
			rs = getReplicas(t, h.base)
			return len(rs) == 3 && replicaByID(rs, "beta-2").State == "unplaced", fmt.Sprintf("replicas %+v", rs)
		})
		waitServing(t, h.base, 2*time.Minute, "beta-0", "beta-1")
		waitNodes(t, h.base, freeWith(rs, true))
		var detail struct {
			Explain struct {
				Reasons []string `json:"reasons"`
			} `json:"explain"`
		}
		getJSON(t, h.base+"/v1/replicas/beta-2", &detail)
		t.Logf("beta-2 unplaced: %q", detail.Explain.Reasons)
		if got := jobModifyIndexes(t, mgmt); fmt.Sprint(got) != fmt.Sprint(jobIndexes) {
			t.Errorf("jobs %v, want %v (the two adopted, nothing written)", got, jobIndexes)
		}
		h.stop()
	})
	if t.Failed() {
		return
	}

	// nomad.namespaces without ml-batch: its GPUs look free. With rack k2
	// held, the third replica goes to gpu-1, which Nomad refuses, and the
	// replica's explain shows Nomad's reason (evaluations read with the
	// token). A label is written (dynamic node metadata), the hold
	// released, and the third replica's decision deleted when it leaves
	// the catalog.
	t.Run("namespace left out", func(t *testing.T) {
		cfg := files(t, betaCatalog(3), fileToken, "default")
		h := runLoggedController(t, cfg, "ctl-3")
		waitServing(t, h.base, 2*time.Minute, "beta-0", "beta-1")
		var detail struct {
			State string   `json:"state"`
			Nodes []string `json:"nodes"`
			Nomad []struct {
				Group              string         `json:"group"`
				NodesExhausted     int            `json:"nodes_exhausted"`
				DimensionExhausted map[string]int `json:"dimension_exhausted"`
			} `json:"nomad"`
		}
		nomadtest.Eventually(t, 2*time.Minute, func() (bool, string) {
			getJSON(t, h.base+"/v1/replicas/beta-2", &detail)
			return len(detail.Nomad) > 0, fmt.Sprintf("beta-2 %+v", detail)
		})
		t.Logf("beta-2, placed where the controller saw free GPUs: %+v", detail)
		if len(detail.Nodes) != 1 || detail.Nodes[0] != "gpu-1" || detail.State == "serving" {
			t.Errorf("beta-2 %+v, want it on gpu-1 and not serving", detail)
		}
		if n := detail.Nomad[0]; n.NodesExhausted == 0 && len(n.DimensionExhausted) == 0 {
			t.Errorf("Nomad's reason %+v names no exhausted node or dimension", n)
		}
		waitNodes(t, h.base, freeWith(getReplicas(t, h.base), false))

		if r := apiCall(t, http.MethodPut, h.base+"/v1/nodes/gpu-2/labels", `{"set":{"fabric":"ib-acl"}}`); r.StatusCode != http.StatusOK {
			t.Errorf("PUT labels: %d %s", r.StatusCode, r.Body)
		}
		id := c.NodeID("gpu-2")
		nomadtest.Eventually(t, time.Minute, func() (bool, string) {
			n, _, err := mgmt.Nodes().Info(id, nil)
			if err != nil {
				return false, err.Error()
			}
			return n.Meta["llmgw.fabric"] == "ib-acl", fmt.Sprintf("gpu-2 meta %v", n.Meta)
		})
		if r := apiCall(t, http.MethodPut, h.base+"/v1/nodes/gpu-2/labels", `{"unset":["fabric"]}`); r.StatusCode != http.StatusOK {
			t.Errorf("PUT labels (unset): %d %s", r.StatusCode, r.Body)
		}

		if r := apiCall(t, http.MethodDelete, h.base+"/v1/facility/holds/rack=k2", ""); r.StatusCode != http.StatusOK {
			t.Errorf("DELETE hold: %d %s", r.StatusCode, r.Body)
		}
		v, _, err := mgmt.Variables().Peek(store.HoldsPath, nil)
		if err != nil || v != nil && strings.Contains(v.Items["holds"], "rack=k2") {
			t.Errorf("variable %s = %+v, %v: want the hold gone", store.HoldsPath, v, err)
		}

		gone := store.DecisionPath("beta-2")
		if d, _, err := mgmt.Variables().Peek(gone, nil); err != nil || d == nil {
			t.Fatalf("decision of beta-2: %+v, %v: want it stored", d, err)
		}
		writeFile(t, cfg.Catalog, betaCatalog(2))
		if r := apiCall(t, http.MethodPost, h.base+"/v1/reload", ""); r.StatusCode != http.StatusOK {
			t.Fatalf("reload: %d %s", r.StatusCode, r.Body)
		}
		nomadtest.Eventually(t, time.Minute, func() (bool, string) {
			d, _, err := mgmt.Variables().Peek(gone, nil)
			return err == nil && d == nil, fmt.Sprintf("decision %+v, %v", d, err)
		})
		h.stop()
		h.noPermissionErrors(t)
	})
	if t.Failed() {
		return
	}

	// Why the file grants read-job on "*": with namespaces "*" and a token
	// that may read default only, Nomad answers the "*" list with
	// default's allocations and no error. ml-batch's GPUs look free, and
	// nothing in the controller's log says so.
	t.Run("every namespace without read on every namespace", func(t *testing.T) {
		h := runLoggedController(t, files(t, betaCatalog(2), noStarToken), "ctl-4")
		rs := waitServing(t, h.base, 2*time.Minute)
		waitNodes(t, h.base, freeWith(rs, false))
		h.stop()
		h.noPermissionErrors(t)
	})
}

// listedNamespacesPolicy is the policy file with its namespace "*" block
// replaced by the commented block for a namespaces list, uncommented.
func listedNamespacesPolicy(t *testing.T, file, ns string) string {
	t.Helper()
	star := regexp.MustCompile(`(?m)^namespace "\*" \{\n(?:.*\n)*?\}\n`)
	if len(star.FindAllString(file, -1)) != 1 {
		t.Fatalf("%s: want one namespace \"*\" block", aclPolicyFile)
	}
	block := regexp.MustCompile(`(?m)^# namespace "` + regexp.QuoteMeta(ns) + `" \{\n(?:#.*\n)*?# \}\n`).FindString(file)
	if block == "" {
		t.Fatalf("%s: no commented namespace %q block", aclPolicyFile, ns)
	}
	var b strings.Builder
	for _, l := range strings.SplitAfter(block, "\n") {
		b.WriteString(strings.TrimPrefix(strings.TrimPrefix(l, "#"), " "))
	}
	return star.ReplaceAllLiteralString(file, b.String())
}

// batchJob runs a job in batchNamespace that holds gpus GPUs of node until
// the test ends (the cluster's own teardown stops default's jobs only).
func batchJob(t *testing.T, c *nomadtest.Cluster, node string, gpus int) {
	t.Helper()
	ns := batchNamespace
	job := &api.Job{
		ID: ptr("batch-train"), Name: ptr("batch-train"), Namespace: &ns, Type: ptr("service"),
		Datacenters: []string{"*"},
		Constraints: []*api.Constraint{{LTarget: "${node.unique.name}", Operand: "=", RTarget: node}},
		TaskGroups: []*api.TaskGroup{{
			Name: ptr("train"),
			Tasks: []*api.Task{{
				Name: "train", Driver: "raw_exec",
				Config: map[string]any{"command": "/bin/sleep", "args": []string{"3600"}},
				Resources: &api.Resources{
					CPU: ptr(100), MemoryMB: ptr(64),
					Devices: []*api.RequestedDevice{{Name: "nvidia/gpu", Count: ptr(uint64(gpus))}},
				},
			}},
		}},
	}
	q := &api.QueryOptions{Namespace: ns}
	if _, _, err := c.API.Jobs().Register(job, &api.WriteOptions{Namespace: ns}); err != nil {
		t.Fatalf("register the ml-batch job: %v", err)
	}
	t.Cleanup(func() {
		_, _, _ = c.API.Jobs().Deregister(*job.ID, true, &api.WriteOptions{Namespace: ns})
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute) //nolint:usetesting // a cleanup: the test's context has ended
		defer cancel()
		for ctx.Err() == nil {
			allocs, _, err := c.API.Jobs().Allocations(*job.ID, true, q)
			live := 0
			for _, a := range allocs {
				if a.ClientStatus == api.AllocClientStatusRunning || a.ClientStatus == api.AllocClientStatusPending {
					live++
				}
			}
			if err == nil && live == 0 {
				return
			}
			time.Sleep(250 * time.Millisecond)
		}
		t.Logf("the ml-batch job's allocations did not stop within a minute")
	})
	nomadtest.Eventually(t, time.Minute, func() (bool, string) {
		allocs, _, err := c.API.Jobs().Allocations(*job.ID, false, q)
		if err != nil {
			return false, err.Error()
		}
		for _, a := range allocs {
			if a.ClientStatus == api.AllocClientStatusRunning && a.NodeName == node {
				return true, ""
			}
			if a.ClientStatus == api.AllocClientStatusFailed {
				t.Fatalf("the ml-batch job failed: %+v", a.TaskStates)
			}
		}
		return false, fmt.Sprintf("%d allocations, none running on %s", len(allocs), node)
	})
}

// waitNodes polls the controller's /v1/nodes until the named nodes have the
// given free GPUs and every node has a measured draw (read from Nomad's
// client stats).
func waitNodes(t *testing.T, base string, free map[string]int) {
	t.Helper()
	nomadtest.Eventually(t, time.Minute, func() (bool, string) {
		var nodes []struct {
			Name     string  `json:"name"`
			Free     int     `json:"gpus_free"`
			Measured float64 `json:"measured_watts"`
		}
		getJSON(t, base+"/v1/nodes", &nodes)
		ok := len(nodes) == 2
		for _, n := range nodes {
			if want, set := free[n.Name]; set && n.Free != want || n.Measured <= 0 {
				ok = false
			}
		}
		return ok, fmt.Sprintf("nodes %+v, want free %v and a measured draw", nodes, free)
	})
}

func jobModifyIndexes(t *testing.T, client *api.Client) map[string]uint64 {
	t.Helper()
	out := map[string]uint64{}
	for _, j := range llmgwJobs(t, client) {
		out[j.ID] = j.JobModifyIndex
	}
	return out
}

func writeFile(t *testing.T, path, body string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

type apiResponse struct {
	StatusCode int
	Body       string
}

func apiCall(t *testing.T, method, url, body string) apiResponse {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return apiResponse{resp.StatusCode, string(b)}
}

// loggedController is an in-process controller whose log lines (debug ones
// too: node stats errors are logged at debug) are kept for the test to
// read; info and above also go to the test log.
type loggedController struct {
	base string
	stop func()

	mu  sync.Mutex
	buf bytes.Buffer
}

func runLoggedController(t *testing.T, cfg config.Config, name string) *loggedController {
	t.Helper()
	h := &loggedController{}
	log := slog.New(slog.NewTextHandler(logTee{h, testWriter{t, name}}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	c, err := controller.New(controller.Options{Config: cfg, Logger: log, Identity: name, PowerInterval: 2 * time.Second, LockTTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		_ = c.Run(ctx)
	}()
	srv := httptest.NewServer(c.Handler())
	var once sync.Once
	h.base = srv.URL
	h.stop = func() {
		once.Do(func() {
			cancel()
			wg.Wait()
			srv.Close()
		})
	}
	t.Cleanup(h.stop)
	return h
}

type logTee struct {
	h *loggedController
	w testWriter
}

func (l logTee) Write(p []byte) (int, error) {
	l.h.mu.Lock()
	l.h.buf.Write(p)
	l.h.mu.Unlock()
	if !bytes.Contains(p, []byte("level=DEBUG")) {
		return l.w.Write(p)
	}
	return len(p), nil
}

func (h *loggedController) lines() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return strings.Split(strings.TrimRight(h.buf.String(), "\n"), "\n")
}

func (h *loggedController) waitLog(t *testing.T, what string, match func(string) bool) {
	t.Helper()
	nomadtest.Eventually(t, time.Minute, func() (bool, string) {
		for _, l := range h.lines() {
			if match(l) {
				return true, ""
			}
		}
		return false, "no log line: " + what
	})
}

// noPermissionErrors fails the test for any log line (debug ones too) with
// a 403 or Nomad's "Permission denied".
func (h *loggedController) noPermissionErrors(t *testing.T) {
	t.Helper()
	for _, l := range h.lines() {
		if strings.Contains(l, forbidden) || strings.Contains(strings.ToLower(l), "permission denied") {
			t.Errorf("permission error in the controller's log: %s", l)
		}
	}
}

type healthz struct {
	Leader bool `json:"leader"`
	Synced bool `json:"synced"`
}

func (h *loggedController) healthz(t *testing.T) healthz {
	t.Helper()
	var out healthz
	getJSON(t, h.base+"/healthz", &out)
	return out
}

// betaCatalog is a catalog of one model, beta, with n one-GPU replicas of
// 250 W spread over racks, whose fake-engine loads for a second.
func betaCatalog(n int) string {
	return fmt.Sprintf(`
model "beta" {
  source   = "org/beta"
  replicas = %d
  profile "x1" {
    engine = "vllm"
    gpu    = "NVIDIA H200"
    gpus   = 1
    watts  = 250
    spread = ["rack"]
    env    = { FAKE_ENGINE_FLAGS = "--load-seconds 1" }
  }
}
`, n)
}
