package engine

import (
	"fmt"
	"strconv"
	"strings"
)

// Layout is how one replica's GPUs are split between the kinds of
// parallelism: the catalog's (and the task config's) tensor_parallel,
// pipeline_parallel, data_parallel and expert_parallel. A zero field is
// unset: Resolve fills it with the engine's default.
type Layout struct {
	Tensor, Pipeline, Data, Expert int
}

// Shape is what a layout has to fill: a replica of Nodes shards of GPUs
// GPUs each.
type Shape struct {
	GPUs, Nodes int
	// GPUsField names where the GPU count comes from in errors ("gpus" in
	// a catalog profile; the driver says "allocated GPUs").
	GPUsField string
	// Args are the profile's (task's) engine arguments, for an engine
	// whose arguments change how it counts its GPUs (SGLang's
	// --enable-dp-attention).
	Args []string
}

func (s Shape) total() int { return s.GPUs * max(s.Nodes, 1) }

func (s Shape) gpusField() string {
	if s.GPUsField == "" {
		return "gpus"
	}
	return s.GPUsField
}

// layoutRules are an engine's parallelism rules.
type layoutRules struct {
	// defaults fills l's unset fields for s (a field left 0 stays unset
	// and counts as 1).
	defaults func(l Layout, s Shape) Layout
	// world is how many GPUs the layout spans, replica-wide; nil is
	// tensor × pipeline × data.
	world func(l Layout, args []string) int
	// check reports what else is wrong with a filled layout that spans
	// the right number of GPUs (expert parallelism's relation to the
	// rest, how data parallelism may be spread over nodes).
	check func(l Layout, s Shape) error
	// why explains, in an error, how the engine counts the world.
	why string
	// noTensor explains, in an error, what an engine without tensor
	// parallelism does with its GPUs instead (": …").
	noTensor string
}

// field names of the layout, as catalogs and task configs spell them.
const (
	FieldTensor   = "tensor_parallel"
	FieldPipeline = "pipeline_parallel"
	FieldData     = "data_parallel"
	FieldExpert   = "expert_parallel"
	FieldNodes    = "nodes"
)

func one(n int) int { return max(n, 1) }

// product is TP × PP × DP, the GPUs of an engine whose data-parallel
// ranks each hold a whole tensor × pipeline group.
func product(l Layout) int { return one(l.Tensor) * one(l.Pipeline) * one(l.Data) }

// Supports reports whether the engine has the layout field
// ("pipeline_parallel", …, "nodes").
func (d *Descriptor) Supports(field string) bool {
	if d.layoutEnv && field != FieldNodes {
		return true
	}
	switch field {
	case FieldTensor:
		return d.Parallel.Tensor != ""
	case FieldPipeline:
		return d.Parallel.Pipeline != ""
	case FieldData:
		return d.Parallel.Data != ""
	case FieldExpert:
		return d.Parallel.Expert != ""
	case FieldNodes:
		return d.MultiNode != nil
	}
	return false
}

// Defaults fills l's unset fields with the engine's defaults for a replica
// of shape s, without checking that the result adds up (Resolve does).
func (d *Descriptor) Defaults(l Layout, s Shape) Layout {
	s.GPUs, s.Nodes = one(s.GPUs), one(s.Nodes)
	if d.layout.defaults != nil {
		l = d.layout.defaults(l, s)
	}
	l.Tensor = one(l.Tensor)
	return l
}

// World is how many GPUs a replica laid out as l spans, all nodes
// together, given its engine arguments.
func (d *Descriptor) World(l Layout, args []string) int {
	if d.layout.world != nil {
		return d.layout.world(l, args)
	}
	return product(l)
}

// CheckFields reports layout fields l sets that the engine does not
// have, and negative ones. A field the engine lacks may be 1 (no
// parallelism of that kind); nodes > 1 needs a multi-node engine.
func (d *Descriptor) CheckFields(l Layout, nodes int) error {
	for _, f := range []struct {
		name string
		v    int
	}{{FieldTensor, l.Tensor}, {FieldPipeline, l.Pipeline}, {FieldData, l.Data}, {FieldExpert, l.Expert}} {
		if f.v < 0 {
			return fmt.Errorf("%s: must be at least 1, got %d", f.name, f.v)
		}
		// A kind of parallelism the engine lacks may be 1 (none of it),
		// except tensor parallelism: an engine without it decides on its
		// own how to use the GPUs it holds.
		if (f.v > 1 || f.name == FieldTensor && f.v > 0) && !d.Supports(f.name) {
			return fmt.Errorf("%s: engine %q has no %s parallelism%s%s (leave it out), got %d",
				f.name, d.Name, strings.TrimSuffix(f.name, "_parallel"), d.pinnedAt(), d.layout.noTensor, f.v)
		}
	}
	if nodes > 1 && d.MultiNode == nil {
		return fmt.Errorf("%s: engine %q runs on one node%s, got %d", FieldNodes, d.Name, d.pinnedAt(), nodes)
	}
	return nil
}

func (d *Descriptor) pinnedAt() string {
	if d.Pinned.Version == "" {
		return ""
	}
	return " (" + d.DefaultExecutable + " " + d.Pinned.Version + ")"
}

// Resolve fills l's unset fields with the engine's defaults for a replica
// of shape s and checks that the layout spans exactly its GPUs, nodes ×
// gpus. Errors name the fields and the numbers.
func (d *Descriptor) Resolve(l Layout, s Shape) (Layout, error) {
	nodes := one(s.Nodes)
	if err := d.CheckFields(l, nodes); err != nil {
		return Layout{}, err
	}
	given := l
	l = d.Defaults(l, s)
	if w, total := d.World(l, s.Args), s.total(); w != total {
		return Layout{}, fmt.Errorf("%s: %s, but %s × %s = %d × %d = %d GPUs%s",
			d.layoutFields(given), d.describe(l, s.Args), FieldNodes, s.gpusField(), nodes, s.GPUs, total, d.whyWorld())
	}
	if d.layout.check != nil {
		if err := d.layout.check(l, s); err != nil {
			return Layout{}, err
		}
	}
	return l, nil
}

// PerNode is how many GPUs each of nodes shards uses under l.
func (d *Descriptor) PerNode(l Layout, nodes int, args []string) int {
	return d.World(l, args) / one(nodes)
}

// layoutFields names the fields the error is about: those given that
// count GPUs, else tensor_parallel (the default that did not fit).
func (d *Descriptor) layoutFields(given Layout) string {
	var f []string
	for _, x := range []struct {
		name string
		v    int
	}{{FieldTensor, given.Tensor}, {FieldPipeline, given.Pipeline}, {FieldData, given.Data}} {
		if x.v > 0 {
			f = append(f, x.name)
		}
	}
	if len(f) == 0 {
		return FieldTensor
	}
	return strings.Join(f, ", ")
}

// describe writes the layout's world as the engine counts it: "tensor_parallel
// × pipeline_parallel = 8 × 2 = 16 GPUs".
func (d *Descriptor) describe(l Layout, args []string) string {
	var names, vals []string
	add := func(name string, v int) {
		names = append(names, name)
		vals = append(vals, strconv.Itoa(v))
	}
	add(FieldTensor, l.Tensor)
	if d.Supports(FieldPipeline) {
		add(FieldPipeline, one(l.Pipeline))
	}
	w := d.World(l, args)
	if d.Supports(FieldData) && w == product(l) {
		add(FieldData, one(l.Data))
	}
	if len(names) == 1 {
		return fmt.Sprintf("%s = %s spans %d GPUs", names[0], vals[0], w)
	}
	return fmt.Sprintf("%s = %s = %d GPUs", strings.Join(names, " × "), strings.Join(vals, " × "), w)
}

func (d *Descriptor) whyWorld() string {
	if d.layout.why == "" {
		return ""
	}
	return " (" + d.layout.why + ")"
}
