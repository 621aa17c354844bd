package facility

import (
	"cmp"
	"fmt"
	"path"
	"slices"
	"strings"

	"github.com/llmgw/llmgw/engine"
)

// Layout returns the profile's layout as given (zero fields unset).
func (p Profile) Layout() engine.Layout {
	return engine.Layout{Tensor: p.TensorParallel, Pipeline: p.PipelineParallel, Data: p.DataParallel, Expert: p.ExpertParallel}
}

// ResolvedLayout is the profile's layout with the engine's defaults
// filled in, checked against nodes × gpus (what Validate checks).
func (p Profile) ResolvedLayout() (engine.Layout, error) {
	d, ok := engine.Lookup(p.Engine)
	if !ok {
		return engine.Layout{}, fmt.Errorf("engine: %w", engine.Unknown(p.Engine))
	}
	return d.Resolve(p.Layout(), engine.Shape{GPUs: p.GPUs, Nodes: max(p.Nodes, 1), Args: p.Args})
}

// AdapterPlan is how the replicas of p get m's LoRA adapters: loaded at
// runtime by the controller (the engine starts with the plan's args and
// environment) or given at start (engine.PlanAdapters). A layout that does
// not resolve is taken as the profile's data_parallel says; its own error
// is reported elsewhere.
func (m Model) AdapterPlan(p Profile) (engine.AdapterPlan, error) {
	if len(m.Adapters) == 0 {
		return engine.AdapterPlan{}, nil
	}
	data := p.DataParallel
	if l, err := p.ResolvedLayout(); err == nil {
		data = l.Data
	}
	plan, err := engine.PlanAdapters(p.Engine, m.AdapterSpec(), data, p.Args)
	if err != nil || !plan.Runtime {
		return plan, err
	}
	if m.AdapterLoading == AdapterLoadingStart {
		return engine.AdapterPlan{Static: `the catalog asks for them at start (adapter_loading = "start")`}, nil
	}
	// An adapter the nodes' stores fetch is on the node only once the
	// driver has fetched it before the engine starts, from the task's
	// adapter blocks: such a model's replicas get their adapters at start.
	for _, a := range m.Adapters {
		if a.Fetched() {
			return engine.AdapterPlan{Static: fmt.Sprintf("adapter %q is fetched by the nodes' stores, which the driver does from the task's adapter blocks before the engine starts", a.Name)}, nil
		}
	}
	return plan, nil
}

// checkEngine checks what the profile asks of its engine: a known
// engine, a layout that spans exactly nodes × gpus as the engine counts
// GPUs, no nodes > 1 for an engine that runs on one node, args that leave
// llmgw's flags alone, and a model file for an engine that loads one.
// Errors name the field.
func (p Profile) checkEngine(m Model) error {
	d, ok := engine.Lookup(p.Engine)
	if !ok {
		return fmt.Errorf("engine: %w", engine.Unknown(p.Engine))
	}
	if p.GPUs < 1 || p.Nodes < 1 {
		return nil // reported on their own
	}
	layout, err := p.ResolvedLayout()
	if err != nil {
		return err
	}
	if err := d.CheckArgs(p.Args, d.ServedNameFlag != ""); err != nil {
		return err
	}
	if d.Model.File {
		if err := checkModelFile(m); err != nil {
			return fmt.Errorf("engine %q loads one local file: %w", p.Engine, err)
		}
	}
	// The command line the leader would run, walked by the engine's own
	// parser at engine_version (default: the pinned version): a flag that
	// version does not know, or one missing its value, is refused here
	// rather than at start. check_args = false, or a version llmgw has no
	// contract for, skips this (Warnings says so).
	if p.SkipArgsCheck {
		return nil
	}
	in := engine.Input{
		Engine: p.Engine, Executable: d.Name, Model: cmp.Or(m.Source, m.Name),
		Host: "127.0.0.1", Port: 8000, Layout: layout, GPUs: p.GPUs,
		Nodes: max(p.Nodes, 1), Args: p.Args,
	}
	// With the adapter flags the recipe renders (their own errors are
	// validateAdapters'), as render's args put them after the profile's:
	// the slots alone where the controller loads the adapters at runtime.
	if plan, err := m.AdapterPlan(p); err == nil && plan.Runtime {
		in.Args = append(slices.Clone(p.Args), plan.Args...)
	} else if adapterArgs, err := engine.AdapterArgs(p.Engine, m.AdapterSpec()); err == nil && len(adapterArgs) > 0 {
		in.Args = append(slices.Clone(p.Args), adapterArgs...)
	}
	if d.Model.File {
		in.Model = path.Join("/model-cache", m.Source, m.File)
	}
	if d.ServedNameFlag != "" {
		in.ServedName = m.Name
	}
	if in.Nodes > 1 {
		in.Leader = "127.0.0.1:8001"
	}
	return engine.CheckContractAt(in, p.EngineVersion)
}

// checkModelFile checks source and file for an engine that loads a local
// file: source is the file's absolute path, or file names a file within
// source (a hub repository in the model cache, or a local directory).
func checkModelFile(m Model) error {
	if m.File == "" {
		if !path.IsAbs(m.Source) {
			return fmt.Errorf("model %q needs file (the file within source %q, such as \"model-q4_k_m.gguf\"), or a source that is the file's absolute path", m.Name, m.Source)
		}
		return nil
	}
	if path.IsAbs(m.File) || path.Clean(m.File) != m.File || m.File == "." || strings.HasPrefix(m.File, "../") || m.File == ".." {
		return fmt.Errorf("file: %q must be a clean relative path within source", m.File)
	}
	return nil
}
