package render

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/hashicorp/nomad/api"

	"github.com/llmgw/llmgw/facility"
	"github.com/llmgw/llmgw/gatewayapi"
	"github.com/llmgw/llmgw/weightsapi"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

func scope(kv ...string) facility.Scope {
	var s facility.Scope
	for _, x := range kv {
		d, err := facility.ParseDomain(x)
		if err != nil {
			panic(err)
		}
		s = append(s, d)
	}
	return s
}

func fullScope(rack, pdu string) facility.Scope {
	return scope("site=ams1", "room=a", "row=r01", "rack="+rack, "pdu="+pdu)
}

func shards(p facility.Profile, nodes ...string) []facility.Shard {
	var out []facility.Shard
	for _, n := range nodes {
		out = append(out, facility.Shard{Node: n, Watts: float64(p.GPUs) * 700, GPU: p.GPU, GPUs: p.GPUs, CPUCores: p.CPUCores, MemoryGB: p.MemoryGB})
	}
	return out
}

// input builds a placed input of model m's first profile on nodes.
func input(m facility.Model, replica int, dom facility.Scope, nodes map[string]NodeInfo, names ...string) Input {
	p := m.Profiles[0]
	return Input{
		Model:   m,
		Profile: p,
		Decision: facility.Decision{
			Replica: facility.ReplicaID(m.Name, replica),
			Model:   m.Name,
			Profile: p.Name,
			Placed:  true,
			Domain:  dom,
			Shards:  shards(p, names...),
		},
		Nodes: nodes,
	}
}

var (
	llama8b = facility.Model{
		Name: "llama-3.1-8b", Source: "meta-llama/Llama-3.1-8B-Instruct", Replicas: 2,
		Profiles: []facility.Profile{{
			Name: "h200x1", Engine: "vllm", GPU: "NVIDIA H200", GPUs: 1, Nodes: 1,
			CPUCores: 8, MemoryGB: 64, Args: []string{"--max-model-len", "16384"},
		}},
	}
	qwenCPU = facility.Model{
		Name: "qwen2.5-0.5b", Source: "/models/qwen2.5-0.5b-instruct-q4_k_m.gguf", Replicas: 1,
		Profiles: []facility.Profile{{
			Name: "gguf", Engine: "llamacpp", GPU: "NVIDIA L4", GPUs: 1, Nodes: 1,
			Args: []string{"--ctx-size", "8192"}, Pool: "edge",
		}},
	}
	deepseek = facility.Model{
		Name: "deepseek-v3", Source: "deepseek-ai/DeepSeek-V3", Replicas: 2,
		Profiles: []facility.Profile{{
			Name: "h200x16", Engine: "sglang", GPU: "NVIDIA H200", GPUs: 8, Nodes: 2,
			CPUCores: 64, MemoryGB: 1024, KeepWithin: facility.LevelRack, Fabric: "ib-ndr",
			TensorParallel: 16, ExpertParallel: 16,
			Args: []string{"--trust-remote-code"}, Ready: "/health",
		}},
	}
	llama405b = facility.Model{
		Name: "llama-3.1-405b", Source: "meta-llama/Llama-3.1-405B-Instruct", Replicas: 1,
		Profiles: []facility.Profile{{
			Name: "h200x32", Engine: "vllm", GPU: "NVIDIA H200", GPUs: 8, Nodes: 4,
			CPUCores: 64, MemoryGB: 1024, KeepWithin: facility.LevelRow, Fabric: "ib-ndr",
			TensorParallel: 8, PipelineParallel: 4,
		}},
	}
	qwen72b = facility.Model{
		Name: "qwen2.5-72b", Source: "Qwen/Qwen2.5-72B-Instruct", Replicas: 3,
		Profiles: []facility.Profile{{
			Name: "h200x4", Engine: "vllm", GPU: "NVIDIA H200", GPUs: 4, Nodes: 1,
			CPUCores: 16, MemoryGB: 256, TensorParallel: 4,
			Args:  []string{"--max-model-len", "32768"},
			Env:   map[string]string{"VLLM_USE_V1": "1", "HF_HUB_OFFLINE": "0"},
			Ready: "/v1/models",
		}},
	}
)

// secretEnv reads two variables from one Nomad Variable and one from
// another.
var secretEnv = []facility.VariableEnv{
	{Name: "API_KEY", Variable: "llmgw/secrets/qwen", Key: "api-key.v2"},
	{Name: "HF_TOKEN", Variable: "nomad/jobs", Key: "hf_token"},
	{Name: "WANDB_KEY", Variable: "llmgw/secrets/qwen", Key: "wandb"},
}

// A profile's env_from_variable becomes one template in the task, into its
// secrets directory as environment variables, that reads each item with
// the task's workload identity: the job names the Variables, never their
// values, and the Variable's value wins over the setting of the same name.
func TestVariableEnvTemplate(t *testing.T) {
	t.Parallel()
	var in Input
	for _, tc := range goldenCases() {
		if tc.name == "variable-env" {
			in = tc.in
		}
	}
	job, err := Job(in)
	if err != nil {
		t.Fatal(err)
	}
	task := job.TaskGroups[0].Tasks[0]
	if len(task.Templates) != 1 {
		t.Fatalf("%d templates, want 1", len(task.Templates))
	}
	tm := task.Templates[0]
	want := `{{ with nomadVar "llmgw/secrets/qwen" }}
API_KEY={{ index . "api-key.v2" | toJSON }}
WANDB_KEY={{ index . "wandb" | toJSON }}
{{ end }}
{{ with nomadVar "nomad/jobs" }}
HF_TOKEN={{ index . "hf_token" | toJSON }}
{{ end }}
`
	if diff := cmp.Diff(want, *tm.EmbeddedTmpl); diff != "" {
		t.Errorf("template (-want +got):\n%s", diff)
	}
	if *tm.DestPath != "secrets/llmgw-variables.env" || !*tm.Envvars || *tm.ChangeMode != "restart" {
		t.Errorf("template destination %q env %v change_mode %q, want secrets/llmgw-variables.env, true, restart", *tm.DestPath, *tm.Envvars, *tm.ChangeMode)
	}
	env, _ := task.Config["env"].(map[string]string)
	if _, ok := env["HF_TOKEN"]; ok {
		t.Errorf("task config env has HF_TOKEN %q: it would win over the Variable's value", env["HF_TOKEN"])
	}
	if env["HF_HOME"] != "/srv/hf" || env["VLLM_USE_V1"] != "1" {
		t.Errorf("task config env %v lost the other variables", env)
	}
	b, err := json.Marshal(job)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), "from-settings") {
		t.Error("the job carries the overridden setting's value")
	}
}

func fabricNodes(fabric string, names ...string) map[string]NodeInfo {
	out := map[string]NodeInfo{}
	for _, n := range names {
		out[n] = NodeInfo{Fabric: fabric}
	}
	return out
}

type goldenCase struct {
	name string
	in   Input
}

func goldenCases() []goldenCase {
	consul := input(deepseek, 1, scope("site=ams1", "room=a", "row=r01", "rack=r01-k02"),
		fabricNodes("ib-ndr-1", "n-0005", "n-0006"), "n-0005", "n-0006")
	consul.Settings = Settings{ServiceProvider: ProviderConsul}

	custom := input(qwen72b, 2, fullScope("r02-k01", "p02-k01-b"), nil, "n-0035")
	custom.Gen = 3
	custom.Settings = Settings{
		Namespace:     "inference",
		Region:        "eu",
		Datacenters:   []string{"ams1-a", "ams1-b"},
		Priority:      70,
		ReadyInterval: 2 * time.Second,
		ReadyTimeout:  45 * time.Minute,
		CheckInterval: 15 * time.Second,
		CheckTimeout:  3 * time.Second,
		KillTimeout:   90 * time.Second,
		ShutdownDelay: 30 * time.Second,
		Env:           map[string]string{"HF_HUB_OFFLINE": "1", "HF_HOME": "/srv/hf"},
		Commands:      map[string]string{"vllm": "/opt/vllm/bin/vllm"},
	}

	return []goldenCase{
		{"vllm-single", input(llama8b, 0, fullScope("r01-k01", "p01-k01-a"), nil, "n-0001")},
		{"llamacpp-single", input(qwenCPU, 0, scope("site=ams1", "room=edge", "row=e1", "rack=e1-k1"), nil, "edge-01")},
		{"sglang-2nodes", input(deepseek, 0, scope("site=ams1", "room=a", "row=r01", "rack=r01-k01"),
			fabricNodes("ib-ndr-1", "n-0001", "n-0002"), "n-0001", "n-0002")},
		{"vllm-4nodes", input(llama405b, 0, scope("site=ams1", "room=a", "row=r01"),
			fabricNodes("ib-ndr-1", "n-0001", "n-0005", "n-0009", "n-0013"), "n-0001", "n-0005", "n-0009", "n-0013")},
		{"consul-sglang-2nodes", consul},
		{"env-args-settings", custom},
		{"variable-env", func() Input {
			m := qwen72b
			m.Profiles = []facility.Profile{qwen72b.Profiles[0]}
			m.Profiles[0].EnvFromVariable = secretEnv
			in := input(m, 0, fullScope("r02-k01", "p02-k01-b"), nil, "n-0035")
			in.Settings = Settings{Env: map[string]string{"HF_TOKEN": "from-settings", "HF_HOME": "/srv/hf"}}
			return in
		}()},
		{"sglang-2nodes-no-fabric", func() Input {
			m := deepseek
			m.Profiles = []facility.Profile{deepseek.Profiles[0]}
			m.Profiles[0].Fabric = ""
			return input(m, 0, scope("site=lab", "rack=bench"), fabricNodes("", "gpu-a", "gpu-b"), "gpu-a", "gpu-b")
		}()},
	}
}

func TestJobGolden(t *testing.T) {
	t.Parallel()
	for _, tc := range goldenCases() {
		t.Run(tc.name, func(t *testing.T) {
			job, err := Job(tc.in)
			if err != nil {
				t.Fatalf("Job: %v", err)
			}
			got, err := json.MarshalIndent(job, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, '\n')
			path := filepath.Join("testdata", tc.name+".golden")
			if *update {
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test -update to create it)", err)
			}
			if diff := cmp.Diff(string(want), string(got)); diff != "" {
				t.Errorf("job differs from %s (-want +got; go test -update to accept):\n%s", path, diff)
			}
		})
	}
}

// The golden files are what Nomad's own JSON decoding reads back: a job
// that round-trips through api.Job's JSON form is unchanged.
func TestJobJSONRoundTrip(t *testing.T) {
	t.Parallel()
	for _, tc := range goldenCases() {
		job, err := Job(tc.in)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		b, err := json.Marshal(job)
		if err != nil {
			t.Fatal(err)
		}
		var back api.Job
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.UseNumber()
		if err := dec.Decode(&back); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		b2, err := json.Marshal(&back)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(b, b2) {
			t.Errorf("%s: JSON round trip changed the job", tc.name)
		}
	}
}

// Facts the golden files show, checked by name so that an -update cannot
// quietly drop them.
func TestJobInvariants(t *testing.T) {
	t.Parallel()
	for _, tc := range goldenCases() {
		t.Run(tc.name, func(t *testing.T) {
			in := tc.in
			job, err := Job(in)
			if err != nil {
				t.Fatal(err)
			}
			d, p := in.Decision, in.Profile
			if got, want := *job.ID, JobID(d.Replica, facility.ProfileFingerprint(in.Model, p), in.Gen); got != want {
				t.Errorf("ID = %q, want %q", got, want)
			}
			if got, want := len(job.TaskGroups), len(d.Shards); got != want {
				t.Fatalf("%d task groups, want %d", got, want)
			}
			// Every level of the scope is a hard constraint.
			for _, dom := range d.Domain {
				if !hasConstraint(job.Constraints, "${meta.llmgw."+dom.Level.String()+"}", "=", dom.Value) {
					t.Errorf("no constraint pinning %s", dom)
				}
			}
			multi := len(d.Shards) > 1
			if got := hasConstraint(job.Constraints, "", api.ConstraintDistinctHosts, "true"); got != multi {
				t.Errorf("distinct_hosts = %v, want %v", got, multi)
			}
			var services int
			for i, tg := range job.TaskGroups {
				if got, want := *tg.Name, GroupName(i); got != want {
					t.Errorf("group %d named %q, want %q", i, got, want)
				}
				if *tg.Count != 1 {
					t.Errorf("%s: count %d", *tg.Name, *tg.Count)
				}
				if !hasConstraint(tg.Constraints, "${node.unique.name}", "=", d.Shards[i].Node) {
					t.Errorf("%s: not pinned to %s", *tg.Name, d.Shards[i].Node)
				}
				task := tg.Tasks[0]
				if task.Driver != "llmgw" {
					t.Errorf("driver %q", task.Driver)
				}
				lay, err := p.ResolvedLayout()
				if err != nil {
					t.Fatal(err)
				}
				if got, want := task.Config["tensor_parallel"], lay.Tensor; got != want {
					t.Errorf("tensor_parallel = %v, want %v", got, want)
				}
				if multi && (task.Config["nodes"] != len(d.Shards) || task.Config["node_rank"] != i) {
					t.Errorf("nodes = %v, node_rank = %v, want %d, %d", task.Config["nodes"], task.Config["node_rank"], len(d.Shards), i)
				}
				if got, want := task.Config["model"], in.Model.Source; got != want {
					t.Errorf("model = %v, want %v", got, want)
				}
				args := task.Config["args"].([]string)
				if !slices.Equal(args, p.Args) && (len(args) > 0 || len(p.Args) > 0) {
					t.Errorf("args %q are not the profile's %q", args, p.Args)
				}
				if got, want := *task.Resources.Devices[0].Count, uint64(p.GPUs); got != want {
					t.Errorf("device count %d, want %d", got, want)
				}
				if got, want := task.Env[EnvNodeRank], GroupName(i)[len("shard-"):]; got != want {
					t.Errorf("rank %q, want %q", got, want)
				}
				if i > 0 && len(tg.Services) > 0 {
					t.Errorf("%s registers services: only the leader does", *tg.Name)
				}
				services += len(tg.Services)
				if multi && i > 0 && len(task.Templates) != 1 {
					t.Errorf("%s: no leader template", *tg.Name)
				}
			}
			if services == 0 {
				t.Error("no service")
			}
			api0 := job.TaskGroups[0].Services[0]
			if got, want := api0.Name, ServiceName(in.Model.Name); got != want {
				t.Errorf("service %q, want %q", got, want)
			}
			wantTags := []string{"llmgw", "model=" + in.Model.Name, "profile=" + p.Name, "replica=" + d.Replica, "weight=" + strconv.Itoa(max(p.Weight, 1)), "engine=" + p.Engine}
			if diff := cmp.Diff(wantTags, api0.Tags); diff != "" {
				t.Errorf("tags (-want +got):\n%s", diff)
			}
			if hc := job.Update.HealthyDeadline; *hc < in.Settings.withDefaults().ReadyTimeout {
				t.Errorf("healthy_deadline %s below the ready timeout", *hc)
			}
			if *job.Update.ProgressDeadline <= *job.Update.HealthyDeadline {
				t.Error("progress_deadline not above healthy_deadline")
			}
		})
	}
}

func hasConstraint(cs []*api.Constraint, l, op, r string) bool {
	for _, c := range cs {
		if c.LTarget == l && c.Operand == op && c.RTarget == r {
			return true
		}
	}
	return false
}

// The catalog's model name reaches the engine as served_model_name where
// the engine has a served-name flag (the driver renders it), and as
// LLMGW_SERVED_MODEL_NAME for every engine; args stay the profile's.
func TestServedName(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		engine string
		want   any
	}{
		{"vllm", "m"}, {"sglang", "m"}, {"llamacpp", "m"}, {"tgi", nil}, {"command", nil},
	} {
		m := facility.Model{Name: "m", Source: "/models/m.gguf", Profiles: []facility.Profile{{
			Name: "p", Engine: tc.engine, GPU: "NVIDIA H200", GPUs: 1, Nodes: 1, Args: []string{"--x", "1"},
		}}}
		job, err := Job(input(m, 0, nil, nil, "n1"))
		if err != nil {
			t.Fatalf("%s: %v", tc.engine, err)
		}
		task := job.TaskGroups[0].Tasks[0]
		if diff := cmp.Diff([]string{"--x", "1"}, task.Config["args"]); diff != "" {
			t.Errorf("%s args (-want +got):\n%s", tc.engine, diff)
		}
		if got := task.Config["served_model_name"]; got != tc.want {
			t.Errorf("%s: served_model_name = %v, want %v", tc.engine, got, tc.want)
		}
		if got := task.Env[EnvServedName]; got != "m" {
			t.Errorf("%s: %s = %q, want m", tc.engine, EnvServedName, got)
		}
	}
}

// A model the gateways route by prefix gets llama.cpp's slot threshold
// (engine.Descriptor.PrefixCache) unless its args set it, in any spelling;
// a model routed otherwise, or on another engine, gets its args alone.
func TestPrefixRoutedArgs(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, engine, routing string
		args, want            []string
	}{
		{"llama.cpp prefix", "llamacpp", gatewayapi.RoutingPrefix, []string{"-np", "2"}, []string{"-np", "2", "--slot-prompt-similarity", "0.85"}},
		{"llama.cpp prefix, set", "llamacpp", gatewayapi.RoutingPrefix, []string{"--slot-prompt-similarity", "0.9"}, []string{"--slot-prompt-similarity", "0.9"}},
		{"llama.cpp prefix, alias", "llamacpp", gatewayapi.RoutingPrefix, []string{"-sps", "0.5"}, []string{"-sps", "0.5"}},
		{"llama.cpp prefix, underscores", "llamacpp", gatewayapi.RoutingPrefix, []string{"--slot_prompt_similarity", "0.5"}, []string{"--slot_prompt_similarity", "0.5"}},
		{"llama.cpp least-outstanding", "llamacpp", gatewayapi.RoutingLeastOutstanding, []string{"-np", "2"}, []string{"-np", "2"}},
		{"llama.cpp default routing", "llamacpp", "", []string{"-np", "2"}, []string{"-np", "2"}},
		{"vllm prefix", "vllm", gatewayapi.RoutingPrefix, []string{"--x", "1"}, []string{"--x", "1"}},
	} {
		m := facility.Model{Name: "m", Source: "/models/m.gguf", Routing: tc.routing, Profiles: []facility.Profile{{
			Name: "p", Engine: tc.engine, GPU: "NVIDIA H200", GPUs: 1, Nodes: 1, Args: tc.args,
		}}}
		job, err := Job(input(m, 0, nil, nil, "n1"))
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if diff := cmp.Diff(tc.want, job.TaskGroups[0].Tasks[0].Config["args"]); diff != "" {
			t.Errorf("%s: args (-want +got):\n%s", tc.name, diff)
		}
	}
}

// What the catalog refuses, render refuses too, for input that did not
// come through it.
func TestJobRefusesWhatTheCatalogWould(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		edit func(*facility.Model)
		want string
	}{
		{"layout short of the GPUs", func(m *facility.Model) { m.Profiles[0].TensorParallel = 8 },
			"tensor_parallel: tensor_parallel × pipeline_parallel × data_parallel = 8 × 1 × 1 = 8 GPUs, but nodes × gpus = 2 × 8 = 16 GPUs"},
		{"args set the tensor size", func(m *facility.Model) { m.Profiles[0].Args = []string{"--tp-size", "16"} },
			"args[0]: --tp-size is set by llmgw from tensor_parallel"},
		{"tgi on two nodes", func(m *facility.Model) { m.Profiles[0].Engine = "tgi" }, `engine "tgi" runs on one node`},
	} {
		m := deepseek
		m.Profiles = []facility.Profile{deepseek.Profiles[0]}
		tc.edit(&m)
		_, err := Job(input(m, 0, scope("site=ams1", "rack=r01-k01"), fabricNodes("ib-ndr-1", "a", "b"), "a", "b"))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want an error containing %q", tc.name, err, tc.want)
		}
	}
}

func TestJobErrors(t *testing.T) {
	t.Parallel()
	base := func() Input {
		return input(deepseek, 0, scope("site=ams1", "rack=r01-k01"),
			fabricNodes("ib-ndr-1", "n1", "n2"), "n1", "n2")
	}
	for _, tc := range []struct {
		name   string
		change func(*Input)
		is     error
		msg    string
	}{
		{"not placed", func(in *Input) { in.Decision.Placed = false }, ErrInvalidInput, "placed nothing"},
		{"no shards", func(in *Input) { in.Decision.Shards = nil }, ErrInvalidInput, "placed nothing"},
		{"no replica id", func(in *Input) { in.Decision.Replica = "" }, ErrInvalidInput, "replica id"},
		{"replica id with space", func(in *Input) { in.Decision.Replica = "a b" }, ErrInvalidInput, "replica id"},
		{"other model", func(in *Input) { in.Decision.Model = "x" }, ErrInvalidInput, `model "x"`},
		{"other profile", func(in *Input) { in.Decision.Profile = "x" }, ErrInvalidInput, `profile "x"`},
		{"no source", func(in *Input) { in.Model.Source = "" }, ErrInvalidInput, "no source"},
		{"no gpus", func(in *Input) { in.Profile.GPUs = 0 }, ErrInvalidInput, "at least one GPU"},
		{"negative memory", func(in *Input) { in.Profile.MemoryGB = -1 }, ErrInvalidInput, "negative"},
		{"shard count", func(in *Input) { in.Decision.Shards = in.Decision.Shards[:1] }, ErrInvalidInput, "1 shards"},
		{"same node twice", func(in *Input) { in.Decision.Shards[1].Node = "n1" }, ErrInvalidInput, "another shard"},
		{"comma in node", func(in *Input) {
			in.Decision.Shards[1].Node = "n,2"
			in.Nodes["n,2"] = NodeInfo{Fabric: "ib-ndr-1"}
		}, ErrInvalidInput, "comma"},
		{"comma in domain", func(in *Input) { in.Decision.Domain[1].Value = "a,b" }, ErrInvalidInput, "comma"},
		{"unknown engine", func(in *Input) { in.Profile.Engine = "trtllm" }, ErrUnsupported, `"trtllm"`},
		{"multi-node tgi", func(in *Input) { in.Profile.Engine = "tgi" }, ErrUnsupported, "one node"},
		{"multi-node llamacpp", func(in *Input) { in.Profile.Engine = "llamacpp" }, ErrUnsupported, "one node"},
		{"no node info", func(in *Input) { in.Nodes = nil }, ErrInvalidInput, "no node info"},
		{"two fabrics", func(in *Input) { in.Nodes["n2"] = NodeInfo{Fabric: "ib-ndr-2"} }, ErrInvalidInput, "stays on one"},
		{"fabric prefix", func(in *Input) { in.Profile.Fabric = "roce" }, ErrInvalidInput, `wants "roce"`},
		{"negative generation", func(in *Input) { in.Gen = -1 }, ErrInvalidInput, "generation"},
		{"bad provider", func(in *Input) { in.Settings.ServiceProvider = "etcd" }, ErrInvalidInput, `"etcd"`},
		{"ready interval", func(in *Input) { in.Settings.ReadyInterval = time.Millisecond }, ErrInvalidInput, "100ms"},
		{"check interval", func(in *Input) { in.Settings.CheckInterval = time.Millisecond }, ErrInvalidInput, "1s"},
		{"negative kill timeout", func(in *Input) { in.Settings.KillTimeout = -time.Second }, ErrInvalidInput, "negative"},
		{"negative priority", func(in *Input) { in.Settings.Priority = -1 }, ErrInvalidInput, "priority"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := base()
			tc.change(&in)
			job, err := Job(in)
			if err == nil {
				t.Fatalf("Job = %v, want an error", *job.ID)
			}
			if !errors.Is(err, tc.is) {
				t.Errorf("error %q is not %v", err, tc.is)
			}
			if !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("error %q does not contain %q", err, tc.msg)
			}
		})
	}
}

func TestJobDeterministic(t *testing.T) {
	t.Parallel()
	for _, tc := range goldenCases() {
		a, err := Job(tc.in)
		if err != nil {
			t.Fatal(err)
		}
		b, err := Job(tc.in)
		if err != nil {
			t.Fatal(err)
		}
		ja, _ := json.Marshal(a)
		jb, _ := json.Marshal(b)
		if !bytes.Equal(ja, jb) {
			t.Errorf("%s: two renders differ", tc.name)
		}
	}
}

// Job does not change its input (the controller keeps the catalog and the
// decision).
func TestJobLeavesInputAlone(t *testing.T) {
	t.Parallel()
	in := goldenCases()[5].in
	before, _ := json.Marshal(in)
	job, err := Job(in)
	if err != nil {
		t.Fatal(err)
	}
	// Changing the job must not reach back into the input either.
	job.TaskGroups[0].Tasks[0].Config["env"].(map[string]string)["X"] = "y"
	job.TaskGroups[0].Tasks[0].Config["args"].([]string)[0] = "changed"
	job.Datacenters[0] = "changed"
	after, _ := json.Marshal(in)
	if !bytes.Equal(before, after) {
		t.Errorf("input changed:\n%s\n%s", before, after)
	}
}

func TestFormatDuration(t *testing.T) {
	t.Parallel()
	for d, want := range map[time.Duration]string{
		time.Second:                    "1s",
		30 * time.Minute:               "30m",
		90 * time.Minute:               "1h30m",
		2 * time.Hour:                  "2h",
		500 * time.Millisecond:         "500ms",
		time.Hour + time.Second:        "1h0m1s",
		45*time.Minute + 5*time.Second: "45m5s",
	} {
		got := formatDuration(d)
		if got != want {
			t.Errorf("formatDuration(%v) = %q, want %q", d, got, want)
		}
		back, err := time.ParseDuration(got)
		if err != nil || back != d {
			t.Errorf("ParseDuration(%q) = %v, %v; want %v", got, back, err, d)
		}
	}
}

// Every placement of the example catalog on the example fleet renders.
func TestJobExampleCatalog(t *testing.T) {
	t.Parallel()
	read := func(name string) []byte {
		b, err := os.ReadFile(filepath.Join("..", "..", "jobs", "examples", name))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	fleet, err := facility.ParseFleet("fleet.hcl", read("fleet.hcl"))
	if err != nil {
		t.Fatal(err)
	}
	fac, err := facility.ParseFacility("facility.hcl", read("facility.hcl"))
	if err != nil {
		t.Fatal(err)
	}
	cat, err := facility.ParseCatalog("catalog.hcl", read("catalog.hcl"))
	if err != nil {
		t.Fatal(err)
	}
	plan, err := facility.PlanCatalog(fleet, fac, cat)
	if err != nil {
		t.Fatal(err)
	}
	nodes := map[string]NodeInfo{}
	for _, n := range fleet.Nodes {
		nodes[n.Name] = NodeInfo{Fabric: n.Fabric}
	}
	models := map[string]facility.Model{}
	for _, m := range cat.Models {
		models[m.Name] = m
	}
	ids := map[string]bool{}
	for _, d := range plan.Placements {
		m := models[d.Model]
		var p facility.Profile
		for _, q := range m.Profiles {
			if q.Name == d.Profile {
				p = q
			}
		}
		job, err := Job(Input{Model: m, Profile: p, Decision: d, Nodes: nodes})
		if err != nil {
			t.Errorf("%s: %v", d.Replica, err)
			continue
		}
		if ids[*job.ID] {
			t.Errorf("job ID %s twice", *job.ID)
		}
		ids[*job.ID] = true
	}
	if len(ids) == 0 {
		t.Fatal("nothing placed")
	}
}

// lost_after renders every group's disconnect block (Nomad keeps a
// disconnected node's allocations that long, replaces none itself, keeps
// the originals if the node returns in time); without it there is none.
func TestDisconnectFollowsLostAfter(t *testing.T) {
	t.Parallel()
	in := input(llama8b, 0, fullScope("r01-k01", "p01"), nil, "n1")
	job, err := Job(in)
	if err != nil {
		t.Fatal(err)
	}
	if d := job.TaskGroups[0].Disconnect; d != nil {
		t.Fatalf("lost_after 0 rendered a disconnect block: %+v", d)
	}
	in.Settings.LostAfter = 2 * time.Minute
	job, err = Job(in)
	if err != nil {
		t.Fatal(err)
	}
	d := job.TaskGroups[0].Disconnect
	if d == nil || d.LostAfter == nil || *d.LostAfter != 2*time.Minute || d.Replace == nil || *d.Replace ||
		d.Reconcile == nil || *d.Reconcile != api.ReconcileOptionKeepOriginal {
		t.Fatalf("disconnect block %+v, want lost_after 2m, replace false, reconcile keep_original", d)
	}
	in.Settings.LostAfter = -time.Second
	if _, err := Job(in); !errors.Is(err, ErrInvalidInput) || !strings.Contains(err.Error(), "lost_after -1s: negative") {
		t.Fatalf("negative lost_after: %v", err)
	}
}

// A model whose weights the node's store fetches gets the driver's weights
// block: the hub revision and files (the repository is the task's model),
// or the URLs with their sha256; a path source, or none, gets none.
func TestWeightsBlock(t *testing.T) {
	t.Parallel()
	sum := strings.Repeat("ab", 32)
	for _, tc := range []struct {
		name string
		w    *weightsapi.Source
		want any
	}{
		{"none", nil, nil},
		{"path", &weightsapi.Source{Path: "/models/m.gguf"}, nil},
		{"hub", &weightsapi.Source{Hub: &weightsapi.Hub{Repo: "org/m-GGUF", Revision: "v2", Files: []string{"m.gguf"}}},
			[]map[string]any{{"revision": "v2", "files": []string{"m.gguf"}}}},
		{"hub main", &weightsapi.Source{Hub: &weightsapi.Hub{Repo: "org/m-GGUF", Files: []string{"*.gguf"}}},
			[]map[string]any{{"files": []string{"*.gguf"}}}},
		{"urls", &weightsapi.Source{URLs: []weightsapi.URL{{URL: "https://h/x/m.gguf", SHA256: sum}, {URL: "https://h/x/t.json"}}},
			[]map[string]any{{"urls": []string{"https://h/x/m.gguf", "https://h/x/t.json"}, "sha256": map[string]string{"m.gguf": sum}}}},
	} {
		m := facility.Model{Name: "m", Source: "org/m-GGUF", File: "m.gguf", Weights: tc.w, Profiles: []facility.Profile{{
			Name: "p", Engine: "llamacpp", GPU: "NVIDIA H200", GPUs: 1, Nodes: 1,
		}}}
		job, err := Job(input(m, 0, nil, nil, "n1"))
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		tasks := job.TaskGroups[0].Tasks
		got, ok := tasks[0].Config["weights"]
		if tc.want == nil {
			if ok || len(tasks) != 1 {
				t.Errorf("%s: weights %v, %d tasks; want none, one task", tc.name, got, len(tasks))
			}
			continue
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tc.name, diff)
		}
		// The prestart fetch: the same weights, nothing else to run.
		if len(tasks) != 2 || tasks[1].Name != FetchTaskName || tasks[1].Lifecycle == nil || tasks[1].Lifecycle.Hook != "prestart" || tasks[1].Lifecycle.Sidecar {
			t.Fatalf("%s: tasks %+v, want the engine and a prestart fetch", tc.name, tasks)
		}
		want := map[string]any{"engine": "fetch", "model": "org/m-GGUF", "model_file": "m.gguf", "weights": tc.want}
		if diff := cmp.Diff(want, tasks[1].Config); diff != "" {
			t.Errorf("%s: fetch task (-want +got):\n%s", tc.name, diff)
		}
	}
}

// A profile that reads HF_TOKEN from Nomad Variables gives the prestart
// fetch that item alone, by the same template; its other items stay the
// engine's.
func TestFetchTaskGetsOnlyTheHubToken(t *testing.T) {
	t.Parallel()
	m := facility.Model{Name: "m", Source: "org/m-GGUF", File: "m.gguf",
		Weights: &weightsapi.Source{Hub: &weightsapi.Hub{Repo: "org/m-GGUF", Files: []string{"m.gguf"}}},
		Profiles: []facility.Profile{{Name: "p", Engine: "llamacpp", GPU: "NVIDIA H200", GPUs: 1, Nodes: 1,
			EnvFromVariable: []facility.VariableEnv{
				{Name: "HF_TOKEN", Variable: "nomad/jobs/hub", Key: "token"},
				{Name: "OTHER_SECRET", Variable: "nomad/jobs/other", Key: "x"},
			}}}}
	job, err := Job(input(m, 0, nil, nil, "n1"))
	if err != nil {
		t.Fatal(err)
	}
	tasks := job.TaskGroups[0].Tasks
	if len(tasks) != 2 || len(tasks[1].Templates) != 1 {
		t.Fatalf("tasks %+v", tasks)
	}
	tmpl := *tasks[1].Templates[0].EmbeddedTmpl
	if !strings.Contains(tmpl, "HF_TOKEN") || !strings.Contains(tmpl, "nomad/jobs/hub") || strings.Contains(tmpl, "OTHER_SECRET") {
		t.Errorf("fetch template %q: want HF_TOKEN alone", tmpl)
	}
	if *tasks[1].Templates[0].DestPath != VariableEnvFile || !*tasks[1].Templates[0].Envvars {
		t.Errorf("fetch template %+v", tasks[1].Templates[0])
	}
}

// A warm spare's fetch job: batch, pinned to its node in any pool, the
// driver's engine fetch with the model's weights, the same ID for the
// same weights and node.
func TestFetchJob(t *testing.T) {
	t.Parallel()
	w := &weightsapi.Source{Hub: &weightsapi.Hub{Repo: "org/m-GGUF", Revision: "v2", Files: []string{"m.gguf"}}}
	m := facility.Model{Name: "m", Source: "org/m-GGUF", File: "m.gguf", Weights: w,
		Profiles: []facility.Profile{{Name: "p", Engine: "llamacpp", GPU: "NVIDIA H200", GPUs: 1, Nodes: 1}}}
	job, err := FetchJob(m, "n7", Settings{})
	if err != nil {
		t.Fatal(err)
	}
	if *job.ID != FetchJobID(w.Key(), "n7") || !strings.HasPrefix(*job.ID, FetchJobIDPrefix+"n7-") || *job.Type != "batch" || *job.NodePool != "all" {
		t.Errorf("job %s type %s pool %s", *job.ID, *job.Type, *job.NodePool)
	}
	if FetchJobID(w.Key(), "n8") == *job.ID {
		t.Error("two nodes, one ID")
	}
	if job.Meta[MetaFetch] != "true" || job.Meta[MetaManaged] != "" || job.Meta[MetaFetchKey] != w.Key() || job.Meta[MetaFetchNode] != "n7" {
		t.Errorf("meta %v", job.Meta)
	}
	if c := job.Constraints; len(c) != 1 || c[0].RTarget != "n7" {
		t.Errorf("constraints %+v", c)
	}
	task := job.TaskGroups[0].Tasks[0]
	want := map[string]any{"engine": "fetch", "model": "org/m-GGUF", "model_file": "m.gguf",
		"weights": []map[string]any{{"revision": "v2", "files": []string{"m.gguf"}}}}
	if diff := cmp.Diff(want, task.Config); diff != "" {
		t.Errorf("config (-want +got):\n%s", diff)
	}
	if _, err := FetchJob(facility.Model{Name: "x", Source: "/m.gguf"}, "n7", Settings{}); err == nil {
		t.Error("a fetch job for a model without weights")
	}
}

// A shard whose node the planner saw holding the weights gets no prestart
// fetch (the engine task's own look in the store finds them); one to fetch
// does.
func TestNoPrestartFetchWhereTheWeightsAre(t *testing.T) {
	t.Parallel()
	w := &weightsapi.Source{Hub: &weightsapi.Hub{Repo: "org/m-GGUF", Files: []string{"m.gguf"}}}
	m := facility.Model{Name: "m", Source: "org/m-GGUF", File: "m.gguf", Weights: w, Profiles: []facility.Profile{{
		Name: "p", Engine: "llamacpp", GPU: "NVIDIA H200", GPUs: 1, Nodes: 1,
	}}}
	for _, present := range []bool{true, false} {
		in := input(m, 0, nil, nil, "n1")
		in.Decision.Shards[0].Fetch = &facility.Fetch{Key: w.Key(), Present: present}
		job, err := Job(in)
		if err != nil {
			t.Fatal(err)
		}
		tasks := job.TaskGroups[0].Tasks
		if want := map[bool]int{true: 1, false: 2}[present]; len(tasks) != want {
			t.Errorf("weights present %v: %d tasks, want %d", present, len(tasks), want)
		}
		if _, ok := tasks[0].Config["weights"]; !ok {
			t.Errorf("weights present %v: the engine task has no weights block", present)
		}
	}
}
