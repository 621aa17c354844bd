package facility

import (
	"slices"
	"strings"
	"testing"

	"github.com/llmgw/llmgw/weightsapi"
)

func TestProfileFingerprint(t *testing.T) {
	t.Parallel()
	m := Model{Name: "llama", Source: "meta/llama", Replicas: 2}
	p := Profile{
		Name: "h200x4", Engine: "vllm", GPU: "NVIDIA H200", GPUs: 4, Nodes: 1, Watts: 2600,
		CPUCores: 16, MemoryGB: 256, KeepWithin: LevelRack, Spread: []Level{LevelRack}, Fabric: "ib",
		Args: []string{"--a", "b"}, Env: map[string]string{"X": "1", "Y": "2"}, Weight: 1,
	}
	base := ProfileFingerprint(m, p)
	// Pinned: the controller compares it with what running jobs carry, so it
	// must not change between releases by accident.
	if want := "19785f2b5517d673"; base != want {
		t.Errorf("fingerprint: got %s, want %s", base, want)
	}
	same := []struct {
		name string
		m    Model
		p    func(Profile) Profile
	}{
		{"replicas", Model{Name: "llama", Source: "meta/llama", Replicas: 9}, func(p Profile) Profile { return p }},
		{"watts", m, func(p Profile) Profile { p.Watts = 3000; return p }},
		{"weight", m, func(p Profile) Profile { p.Weight = 5; return p }},
		{"min_watts", m, func(p Profile) Profile { p.MinWatts = 250; return p }},
		{"spread", m, func(p Profile) Profile { p.Spread = nil; return p }},
		{"keep_within", m, func(p Profile) Profile { p.KeepWithin = LevelRow; return p }},
		{"pool default spelled out", m, func(p Profile) Profile { p.Pool = DefaultPool; return p }},
		{"position", m, func(p Profile) Profile { p.Pos = Pos{"x.hcl", 3}; return p }},
		{"env built in another order", m, func(p Profile) Profile { p.Env = map[string]string{"Y": "2", "X": "1"}; return p }},
	}
	for _, tt := range same {
		if got := ProfileFingerprint(tt.m, tt.p(p)); got != base {
			t.Errorf("%s: got %s, want %s (placement-only fields do not count)", tt.name, got, base)
		}
	}
	differ := []struct {
		name string
		m    Model
		p    func(Profile) Profile
	}{
		{"model", Model{Name: "llama2", Source: "meta/llama"}, func(p Profile) Profile { return p }},
		{"source", Model{Name: "llama", Source: "meta/llama-2"}, func(p Profile) Profile { return p }},
		{"profile name", m, func(p Profile) Profile { p.Name = "x"; return p }},
		{"engine", m, func(p Profile) Profile { p.Engine = "sglang"; return p }},
		{"gpu", m, func(p Profile) Profile { p.GPU = "NVIDIA B200"; return p }},
		{"gpus", m, func(p Profile) Profile { p.GPUs = 8; return p }},
		{"nodes", m, func(p Profile) Profile { p.Nodes = 2; return p }},
		{"cpu", m, func(p Profile) Profile { p.CPUCores = 8; return p }},
		{"memory", m, func(p Profile) Profile { p.MemoryGB = 8; return p }},
		{"fabric", m, func(p Profile) Profile { p.Fabric = "roce"; return p }},
		{"pool", m, func(p Profile) Profile { p.Pool = "batch"; return p }},
		{"ready", m, func(p Profile) Profile { p.Ready = "/ready"; return p }},
		{"args", m, func(p Profile) Profile { p.Args = []string{"--a"}; return p }},
		{"args split differently", m, func(p Profile) Profile { p.Args = []string{"--a b"}; return p }},
		{"env value", m, func(p Profile) Profile { p.Env = map[string]string{"X": "1", "Y": "3"}; return p }},
	}
	var seen []string
	for _, tt := range differ {
		got := ProfileFingerprint(tt.m, tt.p(p))
		if got == base || slices.Contains(seen, got) {
			t.Errorf("%s: got %s, want a new fingerprint", tt.name, got)
		}
		seen = append(seen, got)
	}
}

// A model's weights are part of what its jobs are rendered from: changing
// the repository, revision, files, URLs or path changes the fingerprint;
// their size and warm_spares steer placement only; no weights keeps the
// fingerprint it had before weights existed.
func TestFingerprintWeights(t *testing.T) {
	t.Parallel()
	p := Profile{Name: "p", Engine: "vllm", GPU: "H", GPUs: 1, Nodes: 1}
	hub := func(repo, rev string, files ...string) *weightsapi.Source {
		return &weightsapi.Source{Hub: &weightsapi.Hub{Repo: repo, Revision: rev, Files: files}}
	}
	m := Model{Name: "m", Source: "org/m"}
	none := ProfileFingerprint(m, p)
	if want := "96fbfefc90fe3b67"; none != want {
		t.Errorf("no weights: got %s, want %s (pinned: as before weights existed)", none, want)
	}
	with := func(w *weightsapi.Source, bytes int64, spares int) string {
		mm := m
		mm.Weights, mm.WeightsBytes, mm.WarmSpares = w, bytes, spares
		return ProfileFingerprint(mm, p)
	}
	base := with(hub("org/m", "", "a.gguf"), 0, 0)
	if base == none {
		t.Error("weights do not change the fingerprint")
	}
	if got := with(hub("org/m", "", "a.gguf"), 5e9, 3); got != base {
		t.Errorf("bytes and warm_spares: got %s, want %s", got, base)
	}
	if got := with(hub("org/m", "main", "a.gguf"), 0, 0); got != base {
		t.Errorf("revision main spelled out: got %s, want %s", got, base)
	}
	seen := []string{none, base}
	for name, w := range map[string]*weightsapi.Source{
		"repository": hub("org/n", "", "a.gguf"),
		"revision":   hub("org/m", "v2", "a.gguf"),
		"files":      hub("org/m", "", "a.gguf", "b.json"),
		"urls":       {URLs: []weightsapi.URL{{URL: "https://h.example/a.gguf"}}},
		"url sha256": {URLs: []weightsapi.URL{{URL: "https://h.example/a.gguf", SHA256: strings.Repeat("0", 64)}}},
		"path":       {Path: "/models/m"},
		"other path": {Path: "/models/n"},
	} {
		got := with(w, 0, 0)
		if slices.Contains(seen, got) {
			t.Errorf("%s: got %s, want a new fingerprint", name, got)
		}
		seen = append(seen, got)
	}
}
