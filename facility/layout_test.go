package facility

import (
	"slices"
	"strings"
	"testing"

	"github.com/llmgw/llmgw/engine"
)

func TestParseCatalogLayout(t *testing.T) {
	t.Parallel()
	src := `model "ds" {
  source = "deepseek-ai/DeepSeek-V3"
  profile "p" {
    engine            = "vllm"
    gpu               = "H"
    gpus              = 8
    nodes             = 2
    keep_within       = "rack"
    tensor_parallel   = 4
    data_parallel     = 4
    expert_parallel   = 16
  }
}
model "q" {
  source = "Qwen/Qwen2.5-0.5B-Instruct-GGUF"
  file   = "qwen2.5-0.5b-instruct-q4_k_m.gguf"
  profile "p" {
    engine = "llamacpp"
    gpu    = "H"
  }
}
`
	cat, err := ParseCatalog("c.hcl", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	p := cat.Models[0].Profiles[0]
	if got, want := p.Layout(), (engine.Layout{Tensor: 4, Data: 4, Expert: 16}); got != want {
		t.Errorf("layout %+v, want %+v", got, want)
	}
	l, err := p.ResolvedLayout()
	if err != nil || l != (engine.Layout{Tensor: 4, Pipeline: 1, Data: 4, Expert: 16}) {
		t.Errorf("resolved layout %+v, %v", l, err)
	}
	if got := cat.Models[1].File; got != "qwen2.5-0.5b-instruct-q4_k_m.gguf" {
		t.Errorf("file %q", got)
	}
}

// A layout that does not add up, an engine that cannot do what the profile
// asks, and args that set llmgw's flags are errors at the profile's line,
// naming the field and the numbers.
func TestParseCatalogLayoutErrors(t *testing.T) {
	t.Parallel()
	profile := func(body string) string {
		return "model \"m\" {\n  source = \"org/m\"\n  profile \"p\" {\n    gpu = \"H\"\n" + body + "  }\n}\n"
	}
	tests := []struct {
		name, src, want string
	}{
		{"unknown engine", profile("    engine = \"triton\"\n"),
			`f.hcl:3: profile m/p: engine: unknown engine "triton" (want one of command, llamacpp, sglang, tgi, vllm)`},
		{"vllm layout short of the GPUs", profile("    engine = \"vllm\"\n    gpus = 8\n    nodes = 2\n    keep_within = \"rack\"\n    tensor_parallel = 8\n    pipeline_parallel = 1\n"),
			"f.hcl:3: profile m/p: tensor_parallel, pipeline_parallel: tensor_parallel × pipeline_parallel × data_parallel = 8 × 1 × 1 = 8 GPUs, but nodes × gpus = 2 × 8 = 16 GPUs"},
		{"sglang tensor of one node", profile("    engine = \"sglang\"\n    gpus = 8\n    nodes = 2\n    keep_within = \"rack\"\n    tensor_parallel = 8\n"),
			"f.hcl:3: profile m/p: tensor_parallel: tensor_parallel × pipeline_parallel × data_parallel = 8 × 1 × 1 = 8 GPUs, but nodes × gpus = 2 × 8 = 16 GPUs"},
		{"tgi on two nodes", profile("    engine = \"tgi\"\n    nodes = 2\n    keep_within = \"rack\"\n"),
			`f.hcl:3: profile m/p: nodes: engine "tgi" runs on one node (text-generation-launcher v3.3.7), got 2`},
		{"llamacpp on two nodes", profile("    engine = \"llamacpp\"\n    nodes = 2\n    keep_within = \"rack\"\n"),
			`f.hcl:3: profile m/p: nodes: engine "llamacpp" runs on one node (llama-server 0.4.0), got 2`},
		{"llamacpp tensor parallel", profile("    engine = \"llamacpp\"\n    tensor_parallel = 1\n"),
			`f.hcl:3: profile m/p: tensor_parallel: engine "llamacpp" has no tensor parallelism`},
		{"llamacpp without a file", profile("    engine = \"llamacpp\"\n"),
			`f.hcl:3: profile m/p: engine "llamacpp" loads one local file: model "m" needs file`},
		{"tgi pipeline", profile("    engine = \"tgi\"\n    pipeline_parallel = 2\n"),
			`f.hcl:3: profile m/p: pipeline_parallel: engine "tgi" has no pipeline parallelism`},
		{"args set the tensor size", profile("    engine = \"vllm\"\n    gpus = 2\n    args = [\"--max-model-len\", \"4096\", \"--tensor-parallel-size\", \"2\"]\n"),
			"f.hcl:3: profile m/p: args[2]: --tensor-parallel-size is set by llmgw from tensor_parallel: set that instead"},
		{"args set the served name", profile("    engine = \"sglang\"\n    args = [\"--served-model-name\", \"x\"]\n"),
			"f.hcl:3: profile m/p: args[0]: --served-model-name is set by llmgw to the model's name"},
		{"tgi args repeat a flag", profile("    engine = \"tgi\"\n    args = [\"--max-total-tokens\", \"8\", \"--max-total-tokens\", \"9\"]\n"),
			`f.hcl:3: profile m/p: args[2]: --max-total-tokens repeats args[0] (--max-total-tokens): engine "tgi" (text-generation-launcher v3.3.7) rejects a flag given twice`},
		{"vllm args with a flag v0.28.0 does not know", profile("    engine = \"vllm\"\n    args = [\"--max-model-len\", \"4096\", \"--no-such-flag\"]\n"),
			"f.hcl:3: profile m/p: args[2]: --no-such-flag: engine \"vllm\" (vllm v0.28.0) would refuse it: vllm serve: error: unrecognized arguments: --no-such-flag"},
		{"vllm args missing a value", profile("    engine = \"vllm\"\n    args = [\"--max-model-len\"]\n"),
			"f.hcl:3: profile m/p: args[0]: --max-model-len: engine \"vllm\" (vllm v0.28.0) would refuse it: "},
		{"sglang reads no underscores", profile("    engine = \"sglang\"\n    args = [\"--mem_fraction_static\", \"0.8\"]\n"),
			"f.hcl:3: profile m/p: args[0]: --mem_fraction_static: engine \"sglang\" (python3 v0.5.18) would refuse it: "},
		{"tgi args with a flag v3.3.7 does not know", profile("    engine = \"tgi\"\n    args = [\"--max-total-tokenz\", \"8\"]\n"),
			"f.hcl:3: profile m/p: args[0]: --max-total-tokenz: engine \"tgi\" (text-generation-launcher v3.3.7) would refuse it: error: unexpected argument '--max-total-tokenz' found"},
		{"llamacpp args with a flag 0.4.0 does not know", "model \"m\" {\n  source = \"/models/m.gguf\"\n  profile \"p\" {\n    gpu = \"H\"\n    engine = \"llamacpp\"\n    args = [\"--flash-attn-auto\"]\n  }\n}\n",
			"f.hcl:3: profile m/p: args[0]: --flash-attn-auto: engine \"llamacpp\" (llama-server 0.4.0) would refuse it: "},
		{"engine_version not a version", profile("    engine = \"vllm\"\n    engine_version = \"latest\"\n"),
			`f.hcl:6: engine_version: "latest" is not a version: want the engine's release, numbers and dots such as "0.11.0" or "v3.3.7"`},
		{"engine_version with a space", profile("    engine = \"vllm\"\n    engine_version = \"0.11 .0\"\n"),
			`f.hcl:6: engine_version: "0.11 .0" is not a version`},
		{"engine_version on the command engine", profile("    engine = \"command\"\n    engine_version = \"1.0\"\n"),
			`f.hcl:6: engine_version: engine "command" has no contract to check args against (llmgw passes them as given); remove engine_version`},
		{"check_args on the command engine", profile("    engine = \"command\"\n\n    check_args = false\n"),
			`f.hcl:7: check_args: engine "command" has no contract to check args against (llmgw passes them as given); remove check_args`},
		{"check_args not a bool", profile("    engine = \"vllm\"\n    check_args = \"no\"\n"),
			"f.hcl:6: check_args: Unsuitable value type: a bool is required"},
		{"pinned engine_version still checks", profile("    engine = \"vllm\"\n    engine_version = \"0.28.0\"\n    args = [\"--no-such-flag\"]\n"),
			"f.hcl:3: profile m/p: args[0]: --no-such-flag: engine \"vllm\" (vllm v0.28.0) would refuse it: "},
		{"unknown engine_version still keeps llmgw's flags", profile("    engine = \"vllm\"\n    engine_version = \"0.99.0\"\n    args = [\"--port\", \"1\"]\n"),
			"f.hcl:3: profile m/p: args[0]: --port is set by llmgw to the task's port"},
		{"check_args = false still keeps llmgw's flags", profile("    engine = \"tgi\"\n    check_args = false\n    args = [\"--num-shard\", \"2\"]\n"),
			"f.hcl:3: profile m/p: args[0]: --num-shard is set by llmgw from tensor_parallel: set that instead"},
		{"check_args = false still refuses a tgi repeat", profile("    engine = \"tgi\"\n    check_args = false\n    args = [\"--max-total-tokens\", \"8\", \"--max-total-tokens\", \"9\"]\n"),
			`f.hcl:3: profile m/p: args[2]: --max-total-tokens repeats args[0] (--max-total-tokens): engine "tgi"`},
		{"zero tensor parallel", profile("    engine = \"vllm\"\n    tensor_parallel = 0\n"),
			"f.hcl:6: tensor_parallel must be between 1 and 65536, got 0"},
		{"file escapes the source", "model \"m\" {\n  source = \"org/m\"\n  file = \"../x.gguf\"\n  profile \"p\" {\n    gpu = \"H\"\n    engine = \"llamacpp\"\n  }\n}\n",
			`f.hcl:4: profile m/p: engine "llamacpp" loads one local file: file: "../x.gguf" must be a clean relative path within source`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseCatalog("f.hcl", []byte(tt.src))
			if err == nil {
				t.Fatalf("got no error, want %q", tt.want)
			}
			checkErrorLines(t, "f.hcl", err)
			if !containsLine(err.Error(), tt.want) {
				t.Errorf("got error:\n%v\nwant a line starting %q", err, tt.want)
			}
		})
	}
	// A llama.cpp source that is the file's absolute path needs no file.
	if _, err := ParseCatalog("f.hcl", []byte("model \"m\" {\n  source = \"/models/m.gguf\"\n  profile \"p\" {\n    gpu = \"H\"\n    engine = \"llamacpp\"\n  }\n}\n")); err != nil {
		t.Errorf("absolute GGUF source: %v", err)
	}
}

// engine_version picks the contract that checks args: one llmgw has
// checks them; one it has not, or check_args = false, lets a flag the
// pinned contract does not know through, with a warning at the profile
// naming the version and the versions llmgw has.
func TestEngineVersionAndCheckArgs(t *testing.T) {
	t.Parallel()
	profile := func(body string) string {
		return "model \"m\" {\n  source = \"org/m\"\n  profile \"p\" {\n    gpu = \"H\"\n    engine = \"vllm\"\n    args = [\"--a-flag-of-a-later-release\", \"1\"]\n" + body + "  }\n}\n"
	}
	if _, err := ParseCatalog("f.hcl", []byte(profile(""))); err == nil {
		t.Fatal("the pinned contract let a flag it does not know through")
	}
	for _, tc := range []struct{ name, body, want string }{
		{"later release", "    engine_version = \"0.99.1\"\n",
			`f.hcl:3: profile m/p: engine_version "0.99.1": llmgw has no contract for vllm 0.99.1 (it has vllm@v0.28.0), so args were not checked against a contract, only for flags llmgw sets`},
		{"check_args off", "    check_args = false\n",
			`f.hcl:3: profile m/p: check_args = false: args are not checked against engine "vllm"'s contract, only for flags llmgw sets`},
		{"both", "    engine_version = \"v0.30.0rc1\"\n    check_args = false\n",
			`f.hcl:3: profile m/p: check_args = false: args are not checked against engine "vllm"'s contract, only for flags llmgw sets`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cat, err := ParseCatalog("f.hcl", []byte(profile(tc.body)))
			if err != nil {
				t.Fatal(err)
			}
			if got := cat.Warnings(); !slices.Equal(got, []string{tc.want}) {
				t.Errorf("warnings %q, want %q", got, tc.want)
			}
		})
	}
	// No warning where the contract checked the args: unset, the pinned
	// version, check_args = true.
	for _, body := range []string{"", "    engine_version = \"0.28.0\"\n", "    check_args = true\n"} {
		src := strings.Replace(profile(body), "--a-flag-of-a-later-release", "--max-model-len", 1)
		cat, err := ParseCatalog("f.hcl", []byte(src))
		if err != nil {
			t.Fatalf("%q: %v", body, err)
		}
		if w := cat.Warnings(); len(w) != 0 {
			t.Errorf("%q: warnings %q, want none", body, w)
		}
		if p := cat.Models[0].Profiles[0]; p.SkipArgsCheck || (body != "" && !strings.Contains(body, "check_args") && p.EngineVersion != "0.28.0") {
			t.Errorf("%q: read as %+v", body, p)
		}
	}
	for _, v := range []string{"0.11.0", "v3.3.7", "0.10.1.1", "0.12.0rc1", "0.9.2+cu128", "1.0-beta.2", "b6500"} {
		if err := CheckEngineVersion(v); err != nil {
			t.Errorf("CheckEngineVersion(%q) = %v", v, err)
		}
	}
	for _, v := range []string{"", "latest", "0", "v", "0.11.", ".1.2", "0.11.0 ", "main@abc", "b", "6500", "bb1"} {
		if err := CheckEngineVersion(v); err == nil {
			t.Errorf("CheckEngineVersion(%q) passed", v)
		}
	}
}

func TestFingerprintLayout(t *testing.T) {
	t.Parallel()
	m := Model{Name: "m", Source: "org/m"}
	p := Profile{Name: "p", Engine: "vllm", GPU: "H", GPUs: 8, Nodes: 1}
	base := ProfileFingerprint(m, p)
	var seen []string
	for _, q := range []func(*Profile, *Model){
		func(p *Profile, _ *Model) { p.TensorParallel = 8 },
		func(p *Profile, _ *Model) { p.PipelineParallel = 2 },
		func(p *Profile, _ *Model) { p.DataParallel = 2 },
		func(p *Profile, _ *Model) { p.ExpertParallel = 8 },
		func(_ *Profile, m *Model) { m.File = "x.gguf" },
	} {
		pp, mm := p, m
		q(&pp, &mm)
		got := ProfileFingerprint(mm, pp)
		if got == base || slices.Contains(seen, got) {
			t.Errorf("%+v %+v: fingerprint %s, want a new one", pp, mm, got)
		}
		seen = append(seen, got)
	}
}
