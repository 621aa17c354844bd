package facility

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
)

// DefaultPool is the Nomad node pool of a node, or of a profile, that names none.
const DefaultPool = "default"

// AllPools, as a profile's pool, matches nodes of every pool (as in Nomad).
const AllPools = "all"

// GPU is one GPU model on a node.
type GPU struct {
	Model           string  // device name, such as "NVIDIA H200"
	Count           int     // GPUs of this model on the node
	Free            int     // of them, healthy and not allocated
	PowerLimitWatts float64 // board power limit of one GPU
	MemoryMiB       int     // memory of one GPU
}

// Node is a Nomad client as placement sees it.
//
// CPUCores and MemoryGB are what the node can still give to new work, as
// GPU.Free is: allocations already running, llmgw's replicas included, are
// out of them already (in `llmgw plan`, nothing runs, so they are the
// node's totals).
type Node struct {
	Name          string
	Pool          string // Nomad node pool; "" is DefaultPool
	Location      Location
	CPUCores      int
	MemoryGB      int
	BaseWatts     float64 // draw of the node without GPU work
	MeasuredWatts float64 // measured draw of the whole node now; 0: not measured
	Fabric        string  // RDMA fabric of its HCAs; "" none
	GPUs          []GPU
	// Weights are the models' weights the node's store holds whole, by
	// weightsapi key, with their bytes (the driver's attributes
	// driver.llmgw.weights.<key>).
	Weights map[string]int64 `json:",omitempty"`
	// FetchBytesPerSecond is the rate at which the node fetches weights
	// (configured or measured); 0: not known.
	FetchBytesPerSecond float64 `json:",omitempty"`
	Pos                 Pos     // where it was defined, for errors
}

// Fleet is every node placement may use.
type Fleet struct {
	Nodes []Node
	// Learned is the learned draw per shard of profiles on GPU models,
	// which measured budgets count (docs/power.md, "Measured admission").
	Learned []Learned `json:",omitempty"`
}

// Limits on values, so that arithmetic stays exact and bounded.
const (
	maxCount = 1 << 16 // GPUs per node, nodes per replica, replicas per model
	maxCPU   = 1 << 20
	maxMemGB = 1 << 30
	maxWatts = 1e12
)

func checkWatts(what string, w float64, positive bool) error {
	switch {
	case math.IsNaN(w) || math.IsInf(w, 0):
		return fmt.Errorf("%s must be a finite number", what)
	case w < 0:
		return fmt.Errorf("%s must not be negative, got %v", what, w)
	case positive && w == 0:
		return fmt.Errorf("%s must be positive", what)
	case w > maxWatts:
		return fmt.Errorf("%s %v is out of range", what, w)
	}
	return nil
}

func checkInt(what string, v, lo, hi int) error {
	if v < lo || v > hi {
		if v < 0 && lo >= 0 {
			return fmt.Errorf("%s must not be negative, got %d", what, v)
		}
		return fmt.Errorf("%s must be between %d and %d, got %d", what, lo, hi, v)
	}
	return nil
}

// checkName reports whether s can name a node, model or profile: not empty, no
// spaces, control characters, '=' or ','.
func checkName(what, s string) error {
	if err := checkValue(s); err != nil {
		return fmt.Errorf("%s name: %w", what, err)
	}
	return nil
}

// Validate reports every problem with the fleet, each an *Error at the node:
// duplicate names, bad values, and locations that do not nest (a rack in two
// rows, a row in two rooms, a room in two sites); and bad or duplicate
// learned draws; weights keys and sizes and fetch rates out of range.
func (f Fleet) Validate() error {
	var errs []error
	seen := make(map[string]Pos, len(f.Nodes))
	// parent[l][value] = the value at level l-1 first seen with it, and where.
	type parentAt struct {
		value string
		pos   Pos
	}
	var parent [LevelRack + 1]map[string]parentAt
	for l := range parent {
		parent[l] = map[string]parentAt{}
	}
	for _, n := range f.Nodes {
		bad := func(format string, args ...any) {
			errs = append(errs, errAt(n.Pos, fmt.Sprintf("node %q: ", n.Name)+fmt.Sprintf(format, args...)))
		}
		if err := checkName("node", n.Name); err != nil {
			errs = append(errs, errAt(n.Pos, err.Error()))
		}
		if p, dup := seen[n.Name]; dup {
			bad("duplicate node name (first defined at %s)", p)
		} else {
			seen[n.Name] = n.Pos
		}
		if n.Pool != "" {
			if err := checkValue(n.Pool); err != nil {
				bad("pool: %v", err)
			}
		}
		if n.Fabric != "" {
			if err := checkValue(n.Fabric); err != nil {
				bad("fabric: %v", err)
			}
		}
		for _, l := range Levels() {
			v := n.Location.Get(l)
			if v == "" {
				continue
			}
			if err := checkValue(v); err != nil {
				bad("%s: %v", l, err)
				continue
			}
			if l == LevelSite || l == LevelPDU {
				continue
			}
			up := n.Location.Get(l - 1)
			if up == "" {
				continue // not known here: nothing to compare
			}
			if prev, ok := parent[l][v]; ok {
				if prev.value != up {
					bad("%s=%s is in %s=%q here but in %s=%q at %s", l, v, l-1, up, l-1, prev.value, prev.pos)
				}
			} else {
				parent[l][v] = parentAt{up, n.Pos}
			}
		}
		if err := checkInt("cpu_cores", n.CPUCores, 0, maxCPU); err != nil {
			bad("%v", err)
		}
		if err := checkInt("memory_gb", n.MemoryGB, 0, maxMemGB); err != nil {
			bad("%v", err)
		}
		if err := checkWatts("base_watts", n.BaseWatts, false); err != nil {
			bad("%v", err)
		}
		if err := checkWatts("measured_watts", n.MeasuredWatts, false); err != nil {
			bad("%v", err)
		}
		for _, k := range slices.Sorted(maps.Keys(n.Weights)) {
			if err := checkHeldWeights(k, n.Weights[k]); err != nil {
				bad("%v", err)
			}
		}
		if n.FetchBytesPerSecond != 0 {
			if err := checkFetchRate(n.FetchBytesPerSecond); err != nil {
				bad("%v", err)
			}
		}
		models := map[string]bool{}
		for _, g := range n.GPUs {
			if g.Model == "" {
				bad("gpu with no model name")
			}
			if models[g.Model] {
				bad("gpu %q listed twice", g.Model)
			}
			models[g.Model] = true
			if err := checkInt("gpu count", g.Count, 1, maxCount); err != nil {
				bad("gpu %q: %v", g.Model, err)
			}
			if err := checkInt("gpu free", g.Free, 0, g.Count); err != nil {
				bad("gpu %q: free must be between 0 and count (%d), got %d", g.Model, g.Count, g.Free)
			}
			if err := checkWatts("power_limit", g.PowerLimitWatts, true); err != nil {
				bad("gpu %q: %v", g.Model, err)
			}
			if g.MemoryMiB < 0 {
				bad("gpu %q: memory must not be negative, got %d", g.Model, g.MemoryMiB)
			}
		}
	}
	errs = append(errs, validateLearned(f.Learned)...)
	return errors.Join(errs...)
}
