package render

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/llmgw/llmgw/facility"
	"github.com/llmgw/llmgw/weightsapi"
)

func adapterModel(engine string, args ...string) facility.Model {
	return facility.Model{Name: "base", Source: "/models/base.gguf", Replicas: 1,
		Adapters: []facility.Adapter{
			{Name: "sql", Weights: weightsapi.Source{Path: "/srv/lora/sql.gguf"}, Scale: 1},
			{Name: "chat", Weights: weightsapi.Source{Path: "/srv/lora/chat.gguf"}, Scale: 0.5, Rank: 16},
		},
		Profiles: []facility.Profile{{Name: "p", Engine: engine, GPU: "NVIDIA H200", GPUs: 1, Nodes: 1, Args: args}}}
}

// A model's adapters are on its engine's command line, after the
// profile's args, in the catalog's order.
func TestJobRendersAdapters(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		engine string
		want   []string
	}{
		{"llamacpp", []string{"-c", "4096", "--lora", "/srv/lora/sql.gguf,/srv/lora/chat.gguf", "--lora-init-without-apply", "--cache-ram", "0"}},
		{"vllm", []string{"-c", "4096", "--enable-lora", "--max-loras", "2", "--max-cpu-loras", "2", "--max-lora-rank", "16", "--lora-modules",
			`{"name":"sql","path":"/srv/lora/sql.gguf"}`, `{"name":"chat","path":"/srv/lora/chat.gguf"}`}},
	} {
		job, err := Job(input(adapterModel(tc.engine, "-c", "4096"), 0, nil, nil, "n1"))
		if err != nil {
			t.Fatalf("%s: %v", tc.engine, err)
		}
		if diff := cmp.Diff(tc.want, job.TaskGroups[0].Tasks[0].Config["args"]); diff != "" {
			t.Errorf("%s args (-want +got):\n%s", tc.engine, diff)
		}
	}
	// Without adapters, nothing of them.
	m := adapterModel("llamacpp", "-c", "4096")
	m.Adapters = nil
	job, err := Job(input(m, 0, nil, nil, "n1"))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"-c", "4096"}, job.TaskGroups[0].Tasks[0].Config["args"]); diff != "" {
		t.Errorf("no adapters (-want +got):\n%s", diff)
	}
}

// What the catalog refuses of adapters, render refuses too.
func TestJobRefusesBadAdapters(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		m    facility.Model
		want string
	}{
		{"tgi", adapterModel("tgi"), `engine "tgi" serves no LoRA adapters`},
		{"args set --lora", adapterModel("llamacpp", "--lora", "/x.gguf"), "--lora is llmgw's to set"},
		{"too few slots", func() facility.Model { m := adapterModel("llamacpp"); m.MaxAdapters = 1; return m }(), "loads all 2 adapters at start"},
	} {
		_, err := Job(input(tc.m, 0, nil, nil, "n1"))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
}
