package driver

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/llmgw/llmgw/engine"
	"github.com/llmgw/llmgw/nomadplugin/hclspec"
	"github.com/llmgw/llmgw/nomadplugin/pb/driverpb"
)

func encode(t testing.TB, spec *hclspec.Spec, body string) []byte {
	t.Helper()
	b, err := hclspec.EncodeHCL(spec, "x.hcl", []byte(body), nil)
	if err != nil {
		t.Fatalf("encode: %v", err)
	}
	return b
}

func TestDecodeTaskConfig(t *testing.T) {
	got, err := DecodeTaskConfig(encode(t, TaskConfigSpec(), `
engine  = "vllm"
model   = "Qwen/Qwen2.5-0.5B-Instruct"
command = "/opt/vllm/bin/vllm"
args    = ["--max-model-len", "4096"]
port    = "http"
ready {
  path     = "/health"
  interval = "1s"
  timeout  = "30m"
}
tensor_parallel = 0
env = { VLLM_LOGGING_LEVEL = "DEBUG" }
`))
	if err != nil {
		t.Fatal(err)
	}
	want := TaskConfig{
		Engine: "vllm", Model: "Qwen/Qwen2.5-0.5B-Instruct", Command: "/opt/vllm/bin/vllm",
		Args: []string{"--max-model-len", "4096"}, Port: "http",
		Ready: &ReadyConfig{Path: "/health", Interval: time.Second, Timeout: 30 * time.Minute},
		Env:   map[string]string{"VLLM_LOGGING_LEVEL": "DEBUG"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	_, err = DecodeTaskConfig(encode(t, TaskConfigSpec(), `
engine = "vllm"
model  = "m"
port   = "http"
ready { interval = "fast" }`))
	if !errors.Is(err, ErrBadTaskConfig) || !strings.Contains(err.Error(), "ready.interval") || !strings.Contains(err.Error(), `"fast"`) {
		t.Errorf("bad duration: got %v, want an error naming ready.interval", err)
	}
}

func TestDecodeConfigDefaults(t *testing.T) {
	c, err := DecodeConfig(encode(t, ConfigSpec(), ``))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(DefaultConfig(), c); diff != "" {
		t.Errorf("defaults (-want +got):\n%s", diff)
	}
	for e, want := range map[string]string{"vllm": "vllm", "sglang": "python3", "tgi": "text-generation-launcher", "llamacpp": "llama-server"} {
		if got := c.Engines.Executable(e); got != want {
			t.Errorf("default executable of %s: %q, want %q", e, got, want)
		}
	}
	c, err = DecodeConfig(encode(t, ConfigSpec(), `engines { sglang = "/opt/sglang/bin/python" }
model_cache = "/var/lib/llmgw/models"`))
	if err != nil {
		t.Fatal(err)
	}
	if c.Engines.Executable("sglang") != "/opt/sglang/bin/python" || c.Engines.Executable("vllm") != "vllm" || c.ModelCache != "/var/lib/llmgw/models" {
		t.Errorf("got %+v", c)
	}
}

func TestAllocatedGPUs(t *testing.T) {
	cases := []struct {
		name      string
		deviceEnv map[string]string
		want      []string
		from      string
	}{
		{"nomad-device-nvml", map[string]string{"CUDA_VISIBLE_DEVICES": "1,0", "NVIDIA_VISIBLE_DEVICES": "GPU-b,GPU-a", "LLMGW_GPU_UUIDS": "GPU-b,GPU-a"},
			[]string{"GPU-b", "GPU-a"}, "LLMGW_GPU_UUIDS"},
		{"nvidia plugin only", map[string]string{"NVIDIA_VISIBLE_DEVICES": "GPU-x, GPU-y"}, []string{"GPU-x", "GPU-y"}, "NVIDIA_VISIBLE_DEVICES"},
		{"older nomad-device-nvml", map[string]string{"CUDA_VISIBLE_DEVICES": "GPU-a"}, []string{"GPU-a"}, "CUDA_VISIBLE_DEVICES"},
		{"all names nothing", map[string]string{"NVIDIA_VISIBLE_DEVICES": "all"}, nil, ""},
		{"none", nil, nil, ""},
	}
	for _, c := range cases {
		got, from := allocatedGPUs(c.deviceEnv)
		if diff := cmp.Diff(c.want, got); diff != "" || from != c.from {
			t.Errorf("%s: from %q, want %q (-want +got):\n%s", c.name, from, c.from, diff)
		}
	}
}

func TestResolveLayout(t *testing.T) {
	two := []string{"a", "b"}
	eight := []string{"0", "1", "2", "3", "4", "5", "6", "7"}
	for _, c := range []struct {
		tc   TaskConfig
		gpus []string
		want engine.Layout
		err  string
	}{
		{TaskConfig{Engine: "vllm"}, two, engine.Layout{Tensor: 2, Pipeline: 1}, ""},
		{TaskConfig{Engine: "vllm"}, nil, engine.Layout{Tensor: 1, Pipeline: 1}, ""},
		{TaskConfig{Engine: "vllm", TensorParallel: 1}, two, engine.Layout{Tensor: 1, Pipeline: 1}, ""},
		{TaskConfig{Engine: "vllm", TensorParallel: 2}, two, engine.Layout{Tensor: 2, Pipeline: 1}, ""},
		{TaskConfig{Engine: "vllm", TensorParallel: 1}, nil, engine.Layout{Tensor: 1, Pipeline: 1}, ""},
		{TaskConfig{Engine: "vllm", TensorParallel: 3}, two, engine.Layout{}, "tensor_parallel: 3 is more than the 2 GPUs"},
		{TaskConfig{Engine: "vllm", TensorParallel: 2}, nil, engine.Layout{}, "tensor_parallel: 2 needs 2 GPUs but the task was allocated none"},
		// A shard of a multi-node replica holds its share of the layout.
		{TaskConfig{Engine: "vllm", TensorParallel: 8, PipelineParallel: 2, Nodes: 2}, eight, engine.Layout{Tensor: 8, Pipeline: 2}, ""},
		{TaskConfig{Engine: "vllm", Nodes: 2}, eight, engine.Layout{Tensor: 8, Pipeline: 2}, ""},
		{TaskConfig{Engine: "sglang", TensorParallel: 16, Nodes: 2}, eight, engine.Layout{Tensor: 16, Pipeline: 1}, ""},
		{TaskConfig{Engine: "sglang", Nodes: 2}, eight, engine.Layout{Tensor: 16}, ""},
		{TaskConfig{Engine: "sglang", TensorParallel: 16, Nodes: 2}, two, engine.Layout{},
			"the layout (tensor 16, pipeline 1, data 1) over 2 node(s): 8 GPUs a node is more than the 2 GPUs allocated"},
		{TaskConfig{Engine: "vllm", TensorParallel: 4, DataParallel: 2}, two, engine.Layout{},
			"the layout (tensor 4, pipeline 1, data 2) over 1 node(s): 8 GPUs a node is more than the 2 GPUs"},
		{TaskConfig{Engine: "llamacpp"}, two, engine.Layout{Tensor: 2}, ""},
	} {
		d, _ := engine.Lookup(c.tc.Engine)
		got, err := resolveLayout(d, c.tc, c.gpus)
		if got != c.want || (err == nil) != (c.err == "") || (err != nil && !strings.Contains(err.Error(), c.err)) {
			t.Errorf("resolveLayout(%+v, %v) = %+v, %v; want %+v, %q", c.tc, c.gpus, got, err, c.want, c.err)
		}
	}
}

func TestResolvePort(t *testing.T) {
	res := &driverpb.Resources{
		Ports: []*driverpb.PortMapping{{Label: "http", Value: 23000, HostIp: "10.0.0.5"}, {Label: "metrics", Value: 23001}},
		AllocatedResources: &driverpb.AllocatedTaskResources{Networks: []*driverpb.NetworkResource{{
			Ip: "10.0.0.6", DynamicPorts: []*driverpb.NetworkPort{{Label: "legacy", Value: 24000}},
		}}},
	}
	for label, want := range map[string]string{"http": "10.0.0.5:23000", "metrics": "127.0.0.1:23001", "legacy": "10.0.0.6:24000"} {
		h, p, err := resolvePort(res, label)
		if err != nil || h+":"+strconv.Itoa(p) != want {
			t.Errorf("%s: %s:%d %v, want %s", label, h, p, err, want)
		}
	}
	_, _, err := resolvePort(res, "api")
	if err == nil || err.Error() != `port: no port labelled "api" in the group's network (have: http, legacy, metrics)` {
		t.Errorf("unknown label: %v", err)
	}
	_, _, err = resolvePort(&driverpb.Resources{}, "http")
	if err == nil || !strings.Contains(err.Error(), "the group has no network ports") {
		t.Errorf("no ports: %v", err)
	}
}

func TestParseSignal(t *testing.T) {
	for in, want := range map[string]string{"SIGTERM": "terminated", "term": "terminated", "SIGHUP": "hangup", "9": "killed"} {
		s, err := parseSignal(in)
		if err != nil || s.String() != want {
			t.Errorf("parseSignal(%q) = %v, %v; want %s", in, s, err, want)
		}
	}
	if _, err := parseSignal("SIGNOPE"); err == nil || !strings.Contains(err.Error(), "signal: unknown signal") {
		t.Errorf("bad signal: %v", err)
	}
}

// FuzzDecodeTaskConfig feeds arbitrary bytes (and mutations of real
// configs) to the task config decoder: it must return a config or an
// error, never panic, and what it accepts must be valid.
func FuzzDecodeTaskConfig(f *testing.F) {
	for _, body := range []string{
		`engine = "vllm"
model = "m"
port = "http"`,
		`engine = "command"
command = "/bin/true"
port = "http"
args = ["a", "b"]
ready {
  path = "/ready"
  interval = "2s"
  timeout = "1h"
}
tensor_parallel = 2
env = { A = "b" }`,
	} {
		f.Add(encode(f, TaskConfigSpec(), body))
	}
	f.Add([]byte{0x80})
	f.Add([]byte("not msgpack"))
	f.Fuzz(func(t *testing.T, data []byte) {
		tc, err := DecodeTaskConfig(data)
		if err != nil {
			if !errors.Is(err, ErrBadTaskConfig) {
				t.Fatalf("error without ErrBadTaskConfig: %v", err)
			}
			return
		}
		if err := tc.validate(); err != nil {
			t.Fatalf("accepted an invalid config: %v", err)
		}
	})
}
