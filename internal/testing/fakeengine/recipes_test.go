package fakeengine

import (
	"testing"

	"github.com/llmgw/llmgw/engine"
)

// fake-engine stands in for every engine: it takes what each descriptor's
// recipe emits, single-node and as a rank of a multi-node replica, and
// finds the model, address, tensor size and served name in it.
func TestParsesEveryRecipe(t *testing.T) {
	for _, d := range engine.Descriptors() {
		inputs := []engine.Input{{
			Engine: d.Name, Executable: "/bin/fake-engine", Model: "org/m", Host: "127.0.0.2", Port: 4321,
			Layout: engine.Layout{Tensor: 2}, GPUs: 2, ServedName: "served",
			Args: []string{"--load-seconds", "1"},
		}}
		if d.MultiNode != nil {
			for _, l := range []engine.Layout{{Tensor: 2, Pipeline: 2}, {Tensor: 2, Data: 2, Expert: 4}} {
				in := inputs[0]
				in.Layout, in.Nodes, in.Rank, in.Leader = l, 2, 1, "10.0.0.1:24001"
				inputs = append(inputs, in)
			}
		}
		for _, in := range inputs {
			if d.CheckFields(engine.Layout{Pipeline: in.Layout.Pipeline, Data: in.Layout.Data, Expert: in.Layout.Expert}, 1) != nil {
				continue // a layout this engine does not have
			}
			cmd, err := engine.Build(in)
			if err != nil {
				t.Fatalf("%s: %v", d.Name, err)
			}
			c, err := Parse(cmd.Args, func(k string) string { return cmd.Env[k] })
			if err != nil {
				t.Fatalf("%s: fake-engine refuses %s: %v", d.Name, cmd, err)
			}
			if c.Host != in.Host || c.Port != in.Port || c.LoadTime == 0 {
				t.Errorf("%s: %s: host %q port %d load %s", d.Name, cmd, c.Host, c.Port, c.LoadTime)
			}
			if d.Model.Positional || d.Model.Flag != "" {
				if c.Model != in.Model {
					t.Errorf("%s: %s: model %q, want %q", d.Name, cmd, c.Model, in.Model)
				}
			}
			if d.Parallel.Tensor != "" && c.TensorParallel != in.Layout.Tensor {
				t.Errorf("%s: %s: tensor parallel %d, want %d", d.Name, cmd, c.TensorParallel, in.Layout.Tensor)
			}
			if d.ServedNameFlag != "" && c.ModelID() != in.ServedName {
				t.Errorf("%s: %s: answers to %q, want %q", d.Name, cmd, c.ModelID(), in.ServedName)
			}
		}
	}
}
