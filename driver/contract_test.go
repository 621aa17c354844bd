package driver

import (
	"errors"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/hashicorp/nomad/api"

	"github.com/llmgw/llmgw/controller/render"
	"github.com/llmgw/llmgw/engine"
	"github.com/llmgw/llmgw/engine/contract"
	"github.com/llmgw/llmgw/facility"
	"github.com/llmgw/llmgw/internal/nvmlseam"
	"github.com/llmgw/llmgw/nomadplugin/pb/driverpb"
)

// contractShape is one profile shape: an engine, its GPUs, nodes and
// layout, the catalog's args for it, the model's name and source, and the
// executable the driver runs.
type contractShape struct {
	engine     string
	gpus       int
	nodes      int
	layout     engine.Layout // zero fields unset
	args       string        // a key of shapeArgs
	name       string
	source     string // "" is a plain hub id
	executable string // "" is the engine's default
}

func (s contractShape) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s gpus=%d nodes=%d", s.engine, s.gpus, s.nodes)
	for _, f := range []struct {
		name string
		v    int
	}{{"tp", s.layout.Tensor}, {"pp", s.layout.Pipeline}, {"dp", s.layout.Data}, {"ep", s.layout.Expert}} {
		if f.v > 0 {
			fmt.Fprintf(&b, " %s=%d", f.name, f.v)
		}
	}
	fmt.Fprintf(&b, " args=%s name=%s", s.args, s.name)
	if s.source != "" {
		b.WriteString(" source=" + s.source)
	}
	if s.executable != "" {
		b.WriteString(" exe=" + s.executable)
	}
	return b.String()
}

// shapeArgs are the catalog args each engine's shapes try: none; flags
// llmgw never sets ("own"); the flag llmgw sets for the GPU count
// ("parallel", as catalogs gave it before the layout fields); the flag it
// sets for the served name. Every flag is one the engine's contract knows;
// the catalog may refuse the last two kinds.
func shapeArgs(eng string, gpus int) map[string][]string {
	n := strconv.Itoa(gpus)
	switch eng {
	case engine.VLLM:
		return map[string][]string{"none": nil, "own": {"--max-model-len", "4096", "--enable-prefix-caching"},
			"parallel": {"--tensor-parallel-size", n}, "served-name": {"--served-model-name", "alias"}}
	case engine.SGLang:
		return map[string][]string{"none": nil, "own": {"--context-length", "4096", "--chunked-prefill-size", "512"},
			"parallel": {"--tp-size", n}, "served-name": {"--served-model-name", "alias"}}
	case engine.TGI:
		return map[string][]string{"none": nil, "own": {"--max-total-tokens", "4096", "--trust-remote-code"},
			"parallel": {"--num-shard", n}}
	case engine.LlamaCpp:
		return map[string][]string{"none": nil, "own": {"--ctx-size", "4096", "--cont-batching"},
			"parallel": {"--n-gpu-layers", "999", "--split-mode", "layer"}, "served-name": {"--alias", "alias"}}
	}
	return nil
}

// layouts are the layouts a shape of gpus × nodes tries: none given (the
// engine's defaults), and every tensor × pipeline × data split of the
// replica's GPUs, each also with expert parallelism over tensor × data.
// The catalog refuses what an engine cannot run.
func layouts(gpus, nodes int) []engine.Layout {
	total := gpus * nodes
	out := []engine.Layout{{}}
	for tp := 1; tp <= total; tp++ {
		for pp := 1; tp*pp <= total; pp++ {
			if total%(tp*pp) != 0 {
				continue
			}
			l := engine.Layout{Tensor: tp, Pipeline: pp, Data: total / (tp * pp)}
			out = append(out, l)
			if ep := l.Tensor * l.Data; ep > 1 {
				l.Expert = ep
				out = append(out, l)
			}
		}
	}
	return out
}

// contractShapes is every shape the test renders: each engine with a
// contract × 1, 2 or 8 GPUs × 1 or 2 nodes × each layout × each of its
// args; then, with the default layout, a model name and a source starting
// with '-', and SGLang through a launcher that is not a Python interpreter.
func contractShapes() []contractShape {
	var out []contractShape
	for _, eng := range contract.Engines() {
		for _, gpus := range []int{1, 2, 8} {
			for _, nodes := range []int{1, 2} {
				keys := make([]string, 0, 4)
				for k := range shapeArgs(eng, gpus) {
					keys = append(keys, k)
				}
				slices.Sort(keys)
				for _, args := range keys {
					base := contractShape{engine: eng, gpus: gpus, nodes: nodes, args: args, name: "m"}
					for _, l := range layouts(gpus, nodes) {
						s := base
						s.layout = l
						out = append(out, s)
						if eng == engine.SGLang {
							s.executable = "sglang-launch"
							out = append(out, s)
						}
					}
					dash, src := base, base
					dash.name, src.source = "-m", "-weird"
					out = append(out, dash, src)
				}
			}
		}
	}
	return out
}

// catalogFor writes s as a catalog file.
func catalogFor(s contractShape) string {
	var b strings.Builder
	source := s.source
	if source == "" {
		source = "org/model-1.5"
	}
	fmt.Fprintf(&b, "model %q {\n  source = %q\n", s.name, source)
	if s.engine == engine.LlamaCpp {
		b.WriteString("  file   = \"model-q4.gguf\"\n")
	}
	fmt.Fprintf(&b, "  profile \"p\" {\n    engine = %q\n    gpu    = \"NVIDIA H200\"\n    gpus   = %d\n    nodes  = %d\n", s.engine, s.gpus, s.nodes)
	if s.nodes > 1 {
		b.WriteString("    keep_within = \"rack\"\n")
	}
	for _, f := range []struct {
		name string
		v    int
	}{{engine.FieldTensor, s.layout.Tensor}, {engine.FieldPipeline, s.layout.Pipeline}, {engine.FieldData, s.layout.Data}, {engine.FieldExpert, s.layout.Expert}} {
		if f.v > 0 {
			fmt.Fprintf(&b, "    %s = %d\n", f.name, f.v)
		}
	}
	if a := shapeArgs(s.engine, s.gpus)[s.args]; len(a) > 0 {
		q := make([]string, len(a))
		for i, v := range a {
			q[i] = strconv.Quote(v)
		}
		fmt.Fprintf(&b, "    args = [%s]\n", strings.Join(q, ", "))
	}
	b.WriteString("  }\n}\n")
	return b.String()
}

// nomadVars are what Nomad interpolates into a shard's task config and
// environment: the dist port's address (shard 0 of a multi-node replica).
var nomadVars = map[string]string{
	"NOMAD_IP_" + render.PortDist:   "10.0.0.1",
	"NOMAD_PORT_" + render.PortDist: "23456",
	"NOMAD_ADDR_" + render.PortDist: "10.0.0.1:23456",
}

var interp = regexp.MustCompile(`\$\{([^}]*)\}`)

// interpolate replaces ${NAME} in s from vars, as Nomad does in task config
// strings; a name vars lacks is an error (Nomad would leave it in).
func interpolate(s string, vars map[string]string) (string, error) {
	var missing []string
	out := interp.ReplaceAllStringFunc(s, func(m string) string {
		v, ok := vars[m[2:len(m)-1]]
		if !ok {
			missing = append(missing, m)
			return m
		}
		return v
	})
	if len(missing) > 0 {
		return "", fmt.Errorf("%q: nothing sets %s", s, strings.Join(missing, ", "))
	}
	return out, nil
}

// taskConfig is what the driver decodes from a rendered task's config,
// after Nomad's interpolation. Every key render writes must be one it
// knows, so that a new key cannot go unchecked.
func taskConfig(cfg map[string]any, vars map[string]string) (TaskConfig, error) {
	var tc TaskConfig
	str := func(k string, v any) (string, error) {
		s, ok := v.(string)
		if !ok {
			return "", fmt.Errorf("config %s: %T, want a string", k, v)
		}
		return interpolate(s, vars)
	}
	num := func(k string, v any) (int, error) {
		n, ok := v.(int)
		if !ok {
			return 0, fmt.Errorf("config %s: %T, want an int", k, v)
		}
		return n, nil
	}
	for k, v := range cfg {
		var err error
		switch k {
		case "engine":
			tc.Engine, err = str(k, v)
		case "model":
			tc.Model, err = str(k, v)
		case "model_file":
			tc.ModelFile, err = str(k, v)
		case "command":
			tc.Command, err = str(k, v)
		case "port":
			tc.Port, err = str(k, v)
		case "served_model_name":
			tc.ServedModelName, err = str(k, v)
		case "leader_addr":
			tc.LeaderAddr, err = str(k, v)
		case "tensor_parallel":
			tc.TensorParallel, err = num(k, v)
		case "pipeline_parallel":
			tc.PipelineParallel, err = num(k, v)
		case "data_parallel":
			tc.DataParallel, err = num(k, v)
		case "expert_parallel":
			tc.ExpertParallel, err = num(k, v)
		case "nodes":
			tc.Nodes, err = num(k, v)
		case "node_rank":
			tc.NodeRank, err = num(k, v)
		case "args":
			list, ok := v.([]string)
			if !ok {
				return tc, fmt.Errorf("config args: %T, want []string", v)
			}
			for _, a := range list {
				ia, err := interpolate(a, vars)
				if err != nil {
					return tc, fmt.Errorf("config args: %w", err)
				}
				tc.Args = append(tc.Args, ia)
			}
		case "env":
			m, ok := v.(map[string]string)
			if !ok {
				return tc, fmt.Errorf("config env: %T, want map[string]string", v)
			}
			tc.Env = m
		case "max_adapters":
			tc.MaxAdapters, err = num(k, v)
		case "adapter":
			blocks, ok := v.([]map[string]any)
			if !ok {
				return tc, fmt.Errorf("config adapter: %T, want []map[string]any", v)
			}
			for i, b := range blocks {
				var a AdapterConfig
				for bk, bv := range b {
					switch bk {
					case "name":
						a.Name, err = str("adapter name", bv)
					case "path":
						a.Path, err = str("adapter path", bv)
					case "rank":
						a.Rank, err = num("adapter rank", bv)
					case "source":
						a.Source, err = str("adapter source", bv)
					case "weights":
						a.Weights, err = weightsConfig(bv)
					default:
						err = fmt.Errorf("config adapter[%d].%s: a key this test does not map", i, bk)
					}
					if err != nil {
						return tc, err
					}
				}
				tc.Adapters = append(tc.Adapters, a)
			}
		case "ready":
			// Readiness does not reach the command line.
		default:
			return tc, fmt.Errorf("config %s: a key this test does not map to the driver's task config", k)
		}
		if err != nil {
			return tc, err
		}
	}
	return tc, nil
}

// weightsConfig maps a rendered weights block (render's weightsBlock:
// one block of files and revision, or urls and sha256).
func weightsConfig(v any) (*WeightsConfig, error) {
	blocks, ok := v.([]map[string]any)
	if !ok || len(blocks) != 1 {
		return nil, fmt.Errorf("config weights: %T, want one []map[string]any block", v)
	}
	var w WeightsConfig
	for k, v := range blocks[0] {
		var ok bool
		switch k {
		case "revision":
			w.Revision, ok = v.(string)
		case "files":
			w.Files, ok = v.([]string)
		case "urls":
			w.URLs, ok = v.([]string)
		case "sha256":
			w.SHA256, ok = v.(map[string]string)
		}
		if !ok {
			return nil, fmt.Errorf("config weights.%s: %T, a key or type this test does not map", k, v)
		}
	}
	return &w, nil
}

// contractHost is what the driver runs on in the test: an executable for
// each engine (python3 and a launcher for SGLang), a model cache holding
// the llama.cpp shapes' file, and the driver's NVML on a mock DGX H200.
type contractHost struct {
	exeDir string
	conf   Config
	topo   func() (nvmlseam.Topology, error)
	uuids  []string
}

func newContractHost(t *testing.T) contractHost {
	t.Helper()
	h := contractHost{exeDir: t.TempDir()}
	for _, name := range []string{"vllm", "python3", "sglang-launch", "text-generation-launcher", "llama-server"} {
		if err := os.WriteFile(filepath.Join(h.exeDir, name), []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cache := t.TempDir()
	repo := filepath.Join(cache, "hub", "models--org--model-1.5")
	for p, body := range map[string]string{
		filepath.Join(repo, "refs", "main"):                         "c0ffee",
		filepath.Join(repo, "snapshots", "c0ffee", "model-q4.gguf"): "GGUF",
	} {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	me, err := user.Current()
	if err != nil {
		t.Fatal(err)
	}
	h.conf = DefaultConfig()
	h.conf.ModelCache = cache
	h.conf.DefaultUser, h.conf.AllowRoot = me.Username, os.Geteuid() == 0
	h.conf.Engines = Engines{}
	for _, eng := range engine.Engines() {
		if exe := engine.DefaultExecutable(eng); exe != "" {
			h.conf.Engines[eng] = filepath.Join(h.exeDir, exe)
		}
	}
	topo, uuids := nvmlHost(t)
	tp, err := topo()
	if err != nil {
		t.Fatal(err)
	}
	h.topo, h.uuids = func() (nvmlseam.Topology, error) { return tp, nil }, uuids
	return h
}

// argv is the argument list the engine's own parser sees for one rendered
// task: the driver's makePlan of its config on its GPUs (engine.Build: the
// recipe's flags, then the config's args), less the Python interpreter's own
// "-m MODULE" in front of SGLang's.
func (h contractHost) argv(t *testing.T, s contractShape, task *api.Task) ([]string, error) {
	vars := map[string]string{}
	for k, v := range nomadVars {
		vars[k] = v
	}
	env := map[string]string{"PATH": h.exeDir}
	for k, v := range task.Env {
		iv, err := interpolate(v, nomadVars)
		if err != nil {
			return nil, fmt.Errorf("task env %s: %w", k, err)
		}
		vars[k], env[k] = iv, iv
	}
	tc, err := taskConfig(task.Config, vars)
	if err != nil {
		return nil, err
	}
	conf := h.conf
	if s.executable != "" {
		conf.Engines = Engines{}
		for k, v := range h.conf.Engines {
			conf.Engines[k] = v
		}
		conf.Engines[s.engine] = filepath.Join(h.exeDir, s.executable)
	}
	n := 0
	for _, d := range task.Resources.Devices {
		n += int(*d.Count)
	}
	dev := reserved(t, h.topo, h.uuids[:n]...)
	for k, v := range dev {
		env[k] = v
	}
	pt := &driverpb.TaskConfig{
		Name: render.TaskName, AllocDir: t.TempDir(), Env: env, DeviceEnv: dev,
		Resources: &driverpb.Resources{Ports: []*driverpb.PortMapping{{Label: render.PortHTTP, Value: 27000, HostIp: "10.0.0.1"}}},
	}
	pl, err := makePlan(conf, pt, tc, h.topo)
	if err != nil {
		return nil, fmt.Errorf("the driver refuses the rendered task: %w", err)
	}
	argv := pl.cmd.Args
	if filepath.Base(pl.cmd.Path) == "python3" {
		if len(argv) < 2 || argv[0] != "-m" || argv[1] != "sglang.launch_server" {
			return nil, fmt.Errorf("%s: argv %q does not start with -m sglang.launch_server", pl.cmd.Path, argv)
		}
		argv = argv[2:]
	}
	return argv, nil
}

// TestRenderedArgvPassesEngineContract renders every profile shape the
// catalog allows through the real path (facility.ParseCatalog, render.Job,
// then the driver's makePlan of each shard's task config, whose
// engine.Build appends the config's args to the recipe's flags) and checks
// the argument list each engine would see against that engine's contract
// at its pinned version (engine/contract): every flag known, every value
// count right, and a flag repeated only where the engine allows it.
func TestRenderedArgvPassesEngineContract(t *testing.T) {
	contracts := map[string]*contract.Contract{}
	for _, eng := range contract.Engines() {
		c, err := contract.Load(eng)
		if err != nil {
			t.Fatal(err)
		}
		if !engine.Known(eng) {
			t.Errorf("contract %s is for an engine llmgw has no descriptor for", c.File)
		}
		contracts[eng] = c
	}
	for _, eng := range engine.Engines() {
		if _, ok := contracts[eng]; !ok && eng != engine.Command {
			t.Errorf("engine %q has no contract in engine/contract", eng)
		}
	}
	h := newContractHost(t)
	checked := map[string]int{} // engine/args → argv checked
	refused := map[string]int{} // why a shape is not allowed → shapes
	for _, s := range contractShapes() {
		cat, err := facility.ParseCatalog("catalog.hcl", []byte(catalogFor(s)))
		if err != nil {
			refused["catalog: "+refusal(err)]++
			continue
		}
		m := cat.Models[0]
		p := m.Profiles[0]
		in := render.Input{
			Model: m, Profile: p,
			Decision: facility.Decision{Replica: facility.ReplicaID(m.Name, 0), Model: m.Name, Profile: p.Name, Placed: true},
			Nodes:    map[string]render.NodeInfo{},
		}
		for i := range max(p.Nodes, 1) {
			n := fmt.Sprintf("n-%d", i)
			in.Decision.Shards = append(in.Decision.Shards, facility.Shard{Node: n, GPU: p.GPU, GPUs: p.GPUs})
			in.Nodes[n] = render.NodeInfo{}
		}
		job, err := render.Job(in)
		if errors.Is(err, render.ErrUnsupported) {
			refused["render: "+refusal(err)]++
			continue
		}
		if err != nil {
			t.Errorf("%s: render: %v", s, err)
			continue
		}
		c := contracts[s.engine]
		for _, tg := range job.TaskGroups {
			argv, err := h.argv(t, s, tg.Tasks[0])
			if err != nil {
				t.Errorf("%s, %s: %v", s, *tg.Name, err)
				continue
			}
			checked[s.engine+"/"+s.args]++
			if err := c.Check(argv); err != nil {
				t.Errorf("%s, %s: %s (%s) rejects %q:\n%s", s, *tg.Name, c.Spec(), c.Kind, argv, err)
			}
		}
	}
	reasons := make([]string, 0, len(refused))
	for r := range refused {
		reasons = append(reasons, r)
	}
	slices.Sort(reasons)
	for _, r := range reasons {
		t.Logf("%d shapes not allowed by the %s", refused[r], r)
	}
	total := 0
	for _, n := range checked {
		total += n
	}
	t.Logf("%d argument lists checked (by engine/args: %v)", total, checked)
	// Every engine rendered and was checked without args and with args
	// of its own, so the test cannot pass by rendering nothing.
	for _, eng := range contract.Engines() {
		for _, k := range []string{"none", "own"} {
			if checked[eng+"/"+k] == 0 {
				t.Errorf("%s with args %s: no shape rendered", eng, k)
			}
		}
	}
}

// refusal is err's first problem without what names one shape (quoted
// values, numbers), so that refusals for one reason count together.
func refusal(err error) string {
	first, _, _ := strings.Cut(err.Error(), "\n")
	s := regexp.MustCompile(`"[^"]*"`).ReplaceAllString(first, `"…"`)
	return regexp.MustCompile(`\d+`).ReplaceAllString(s, "N")
}
