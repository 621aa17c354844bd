package engine_test

import (
	"os"
	"strings"
	"testing"

	"github.com/llmgw/llmgw/engine"
)

func TestResolve(t *testing.T) {
	t.Parallel()
	type L = engine.Layout
	cases := []struct {
		engine      string
		given       L
		gpus, nodes int
		args        []string
		want        L
		err         string
	}{
		// vLLM: tensor inside a node, pipeline over nodes by default.
		{engine: "vllm", gpus: 4, nodes: 1, want: L{Tensor: 4, Pipeline: 1}},
		{engine: "vllm", gpus: 8, nodes: 2, want: L{Tensor: 8, Pipeline: 2}},
		{engine: "vllm", given: L{Tensor: 16}, gpus: 8, nodes: 2, want: L{Tensor: 16, Pipeline: 1}},
		{engine: "vllm", given: L{Tensor: 4}, gpus: 8, nodes: 2, want: L{Tensor: 4, Pipeline: 4}},
		{engine: "vllm", given: L{Pipeline: 4}, gpus: 8, nodes: 4, want: L{Tensor: 8, Pipeline: 4}},
		{engine: "vllm", given: L{Data: 2}, gpus: 8, nodes: 1, want: L{Tensor: 4, Pipeline: 1, Data: 2}},
		{engine: "vllm", given: L{Data: 4, Expert: 16}, gpus: 8, nodes: 2, want: L{Tensor: 4, Pipeline: 1, Data: 4, Expert: 16}},
		{engine: "vllm", given: L{Tensor: 3}, gpus: 4, nodes: 1,
			err: "tensor_parallel: tensor_parallel × pipeline_parallel × data_parallel = 3 × 1 × 1 = 3 GPUs, but nodes × gpus = 1 × 4 = 4 GPUs (vLLM spans"},
		{engine: "vllm", given: L{Tensor: 8, Pipeline: 4}, gpus: 8, nodes: 2,
			err: "tensor_parallel, pipeline_parallel: tensor_parallel × pipeline_parallel × data_parallel = 8 × 4 × 1 = 32 GPUs, but nodes × gpus = 2 × 8 = 16 GPUs"},
		{engine: "vllm", given: L{Tensor: 2, Data: 2, Expert: 2}, gpus: 4, nodes: 1,
			err: "expert_parallel: vLLM's expert-parallel size is tensor_parallel × data_parallel = 2 × 2 = 4"},
		{engine: "vllm", given: L{Tensor: 8, Data: 3}, gpus: 12, nodes: 2,
			err: "data_parallel: on 2 nodes llmgw spreads vLLM's data-parallel ranks whole over the nodes"},
		{engine: "vllm", given: L{Tensor: -1}, gpus: 1, nodes: 1, err: "tensor_parallel: must be at least 1, got -1"},

		// SGLang: --tp-size is the whole replica by default.
		{engine: "sglang", gpus: 8, nodes: 2, want: L{Tensor: 16}},
		{engine: "sglang", given: L{Pipeline: 2}, gpus: 8, nodes: 2, want: L{Tensor: 8, Pipeline: 2}},
		{engine: "sglang", given: L{Data: 2}, gpus: 8, nodes: 1, want: L{Tensor: 4, Data: 2}},
		{engine: "sglang", given: L{Data: 16, Expert: 16}, gpus: 8, nodes: 2, args: []string{"--enable-dp-attention"},
			want: L{Tensor: 16, Data: 16, Expert: 16}},
		{engine: "sglang", given: L{Tensor: 8}, gpus: 8, nodes: 2,
			err: "tensor_parallel: tensor_parallel × pipeline_parallel × data_parallel = 8 × 1 × 1 = 8 GPUs, but nodes × gpus = 2 × 8 = 16 GPUs (SGLang's --tp-size"},
		{engine: "sglang", given: L{Expert: 3}, gpus: 8, nodes: 1, err: "expert_parallel: SGLang's expert parallelism lives inside the tensor world"},
		{engine: "sglang", given: L{Data: 2}, gpus: 8, nodes: 2, err: "data_parallel: llmgw runs SGLang's plain data parallelism on one node only"},
		{engine: "sglang", given: L{Tensor: 8, Data: 3}, gpus: 8, nodes: 1, args: []string{"--enable-dp-attention"},
			err: "data_parallel: with --enable-dp-attention SGLang carves"},

		// TGI: one shard per GPU, one node.
		{engine: "tgi", gpus: 4, nodes: 1, want: L{Tensor: 4}},
		{engine: "tgi", given: L{Tensor: 2}, gpus: 4, nodes: 1,
			err: "tensor_parallel: tensor_parallel = 2 spans 2 GPUs, but nodes × gpus = 1 × 4 = 4 GPUs (TGI starts one shard per GPU"},
		{engine: "tgi", gpus: 4, nodes: 2, err: `nodes: engine "tgi" runs on one node (text-generation-launcher v3.3.7), got 2`},
		{engine: "tgi", given: L{Pipeline: 1}, gpus: 4, nodes: 1, want: L{Tensor: 4, Pipeline: 1}},
		{engine: "tgi", given: L{Data: 2}, gpus: 4, nodes: 1, err: `data_parallel: engine "tgi" has no data parallelism`},

		// llama.cpp: no layout of its own; one process over all its GPUs.
		{engine: "llamacpp", gpus: 2, nodes: 1, want: L{Tensor: 2}},
		{engine: "llamacpp", given: L{Tensor: 2}, gpus: 2, nodes: 1,
			err: `tensor_parallel: engine "llamacpp" has no tensor parallelism (llama-server 0.4.0): one llama-server splits the model's layers over all the GPUs it holds (leave it out), got 2`},
		{engine: "llamacpp", gpus: 1, nodes: 3, err: `nodes: engine "llamacpp" runs on one node (llama-server 0.4.0), got 3`},

		// command: tensor = a node's GPUs, pipeline = nodes.
		{engine: "command", gpus: 4, nodes: 2, want: L{Tensor: 4, Pipeline: 2}},
		{engine: "command", given: L{Tensor: 8}, gpus: 4, nodes: 2, want: L{Tensor: 8, Pipeline: 1}},
	}
	for _, c := range cases {
		d, _ := engine.Lookup(c.engine)
		got, err := d.Resolve(c.given, engine.Shape{GPUs: c.gpus, Nodes: c.nodes, Args: c.args})
		name := c.engine + " " + strings.TrimSpace(strings.Join(c.args, " "))
		switch {
		case c.err != "" && (err == nil || !strings.HasPrefix(err.Error(), c.err)):
			t.Errorf("%s %+v on %d×%d: got %+v, %v; want error %q", name, c.given, c.nodes, c.gpus, got, err, c.err)
		case c.err == "" && (err != nil || got != c.want):
			t.Errorf("%s %+v on %d×%d: got %+v, %v; want %+v", name, c.given, c.nodes, c.gpus, got, err, c.want)
		}
	}
}

func TestPerNode(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		engine string
		l      engine.Layout
		nodes  int
		args   []string
		want   int
	}{
		{"vllm", engine.Layout{Tensor: 8, Pipeline: 2}, 2, nil, 8},
		{"vllm", engine.Layout{Tensor: 4, Data: 4}, 2, nil, 8},
		{"sglang", engine.Layout{Tensor: 16}, 2, nil, 8},
		{"sglang", engine.Layout{Tensor: 16, Data: 16}, 2, []string{"--enable-dp-attention"}, 8},
		{"tgi", engine.Layout{Tensor: 4}, 1, nil, 4},
	} {
		d, _ := engine.Lookup(c.engine)
		if got := d.PerNode(c.l, c.nodes, c.args); got != c.want {
			t.Errorf("%s %+v on %d nodes: %d GPUs a node, want %d", c.engine, c.l, c.nodes, got, c.want)
		}
	}
}

// Every descriptor is whole: what the driver, render and docs read.
func TestDescriptorsComplete(t *testing.T) {
	t.Parallel()
	for _, d := range engine.Descriptors() {
		if d.ReadyPath == "" || d.Progress == nil {
			t.Errorf("%s: no readiness path or progress parser", d.Name)
		}
		if d.Name == engine.Command {
			continue
		}
		if d.Pinned.Version == "" || len(d.Pinned.Commit) != 40 || d.DefaultExecutable == "" {
			t.Errorf("%s: no pinned version, commit or default executable: %+v", d.Name, d.Pinned)
		}
		if d.HostFlag == "" || d.PortFlag == "" || d.Parallel.Tensor == "" && d.Name != engine.LlamaCpp {
			t.Errorf("%s: no host, port or tensor flag", d.Name)
		}
		m := d.Metrics
		// llama.cpp has no KV-cache gauge at 0.4.0 (docs/engines/llamacpp.md).
		if m.Path == "" || m.RequestsWaiting.Name == "" || m.RequestsRunning.Name == "" ||
			m.KVCacheUsage.Name == "" && d.Name != engine.LlamaCpp || m.GeneratedTokens.Name == "" {
			t.Errorf("%s: metrics incomplete: %+v", d.Name, m)
		}
		for _, f := range d.Owned(true) {
			if !strings.HasPrefix(f, "-") {
				t.Errorf("%s: owned flag %q", d.Name, f)
			}
		}
	}
}

// docs/driver.md describes every descriptor: its name, pinned version and
// commit, and its metric names, so that a changed descriptor cannot leave
// the docs behind.
func TestDriverDocsFollowTheDescriptors(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../docs/driver.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	for _, d := range engine.Descriptors() {
		want := []string{"`" + d.Name + "`"}
		if d.Pinned.Version != "" {
			want = append(want, d.Pinned.Version, d.Pinned.Commit[:12])
		}
		m := d.Metrics
		for _, x := range []engine.Metric{m.RequestsWaiting, m.RequestsRunning, m.KVCacheUsage, m.TimeToFirstToken, m.GeneratedTokens} {
			if x.Name != "" {
				want = append(want, "`"+x.Name+"`")
			}
			if x.Per != "" {
				want = append(want, "`"+x.Per+"`")
			}
		}
		for _, w := range want {
			if !strings.Contains(doc, w) {
				t.Errorf("docs/driver.md does not mention %s of engine %s", w, d.Name)
			}
		}
	}
}
