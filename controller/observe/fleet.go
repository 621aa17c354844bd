package observe

import (
	"math"
	"sort"
	"strconv"
	"strings"

	"github.com/hashicorp/nomad/api"

	"github.com/llmgw/llmgw/devicesapi"
	"github.com/llmgw/llmgw/facility"
	"github.com/llmgw/llmgw/weightsapi"
)

// Node meta keys (docs/architecture.md, "Names every part shares").
const (
	MetaSite      = "llmgw.site"
	MetaRoom      = "llmgw.room"
	MetaRow       = "llmgw.row"
	MetaRack      = "llmgw.rack"
	MetaPDU       = "llmgw.pdu"
	MetaFabric    = "llmgw.fabric"
	MetaHCAs      = "llmgw.hcas"
	MetaBaseWatts = "llmgw.base_watts" // optional per-node override of the configured base draw
)

// LocationKeys maps each facility level to its node meta key.
var LocationKeys = map[facility.Level]string{
	facility.LevelSite: MetaSite, facility.LevelRoom: MetaRoom, facility.LevelRow: MetaRow,
	facility.LevelRack: MetaRack, facility.LevelPDU: MetaPDU,
}

// Power is a node's measured GPU draw from device stats.
type Power struct {
	GPUWatts float64 // Σ power_draw of its GPUs
	Devices  int     // how many GPUs reported it
}

// Schedulable reports whether Nomad may place new work on the node.
func Schedulable(n *api.Node) bool {
	return n.Status == api.NodeStatusReady && n.SchedulingEligibility == api.NodeSchedulingEligible && n.DrainStrategy == nil
}

// Fleet builds the facility fleet from Nomad's nodes, every allocation
// (for what they hold), and measured power by node ID. A node that is not
// schedulable stays in the fleet — what runs on it still draws power — with
// nothing free. baseWatts is the draw of a node without GPU work, unless its
// meta llmgw.base_watts says otherwise.
func Fleet(nodes []*api.Node, allocs []*api.AllocationListStub, power map[string]Power, baseWatts float64) facility.Fleet {
	used := usage(allocs)
	out := facility.Fleet{Nodes: make([]facility.Node, 0, len(nodes))}
	for _, n := range nodes {
		fn := facility.Node{
			Name: n.Name,
			Pool: n.NodePool,
			Location: facility.Location{
				Site: n.Meta[MetaSite], Room: n.Meta[MetaRoom], Row: n.Meta[MetaRow],
				Rack: n.Meta[MetaRack], PDU: n.Meta[MetaPDU],
			},
			Fabric:    n.Meta[MetaFabric],
			BaseWatts: baseWatts,
		}
		if v, err := ParseBaseWatts(n.Meta[MetaBaseWatts]); err == nil {
			fn.BaseWatts = v
		}
		for k, v := range n.Attributes {
			key, ok := strings.CutPrefix(k, weightsapi.AttrPrefix)
			if !ok || key == "" {
				continue
			}
			if b, err := strconv.ParseInt(v, 10, 64); err == nil && b >= 0 {
				if fn.Weights == nil {
					fn.Weights = map[string]int64{}
				}
				fn.Weights[key] = b
			}
		}
		if r, err := strconv.ParseFloat(n.Attributes[weightsapi.AttrFetchRate], 64); err == nil && r > 0 && !math.IsInf(r, 0) {
			fn.FetchBytesPerSecond = r
		}
		if p, ok := power[n.ID]; ok && p.Devices > 0 {
			fn.MeasuredWatts = fn.BaseWatts + p.GPUWatts
		}
		u := used[n.ID]
		if u == nil {
			u = &nodeUse{devices: map[string]bool{}}
		}
		ok := Schedulable(n)
		if r := n.NodeResources; r != nil {
			if ok {
				fn.CPUCores = freeCores(n, u)
				mem := r.Memory.MemoryMB - u.memoryMB
				if n.ReservedResources != nil {
					mem -= int64(n.ReservedResources.Memory.MemoryMB)
				}
				fn.MemoryGB = int(max(mem, 0) / 1024)
			}
			for _, d := range r.Devices {
				if d.Vendor != "nvidia" || d.Type != "gpu" {
					continue
				}
				g := facility.GPU{Model: d.Name, Count: len(d.Instances)}
				for _, in := range d.Instances {
					if ok && in.Healthy && !u.devices[in.ID] {
						g.Free++
					}
				}
				if a := d.Attributes["power_limit"]; a != nil {
					g.PowerLimitWatts = attrFloat(a)
				}
				if a := d.Attributes["memory"]; a != nil {
					g.MemoryMiB = int(attrFloat(a))
				}
				fn.GPUs = append(fn.GPUs, g)
			}
			sort.Slice(fn.GPUs, func(i, j int) bool { return fn.GPUs[i].Model < fn.GPUs[j].Model })
		}
		out.Nodes = append(out.Nodes, fn)
	}
	sort.Slice(out.Nodes, func(i, j int) bool { return out.Nodes[i].Name < out.Nodes[j].Name })
	return out
}

type nodeUse struct {
	cpuShares int64
	cores     int
	memoryMB  int64
	devices   map[string]bool
}

// usage sums what the live allocations hold on each node.
func usage(allocs []*api.AllocationListStub) map[string]*nodeUse {
	out := map[string]*nodeUse{}
	for _, a := range allocs {
		if !Live(a) || a.AllocatedResources == nil {
			continue
		}
		u := out[a.NodeID]
		if u == nil {
			u = &nodeUse{devices: map[string]bool{}}
			out[a.NodeID] = u
		}
		for _, t := range a.AllocatedResources.Tasks {
			if t == nil {
				continue
			}
			u.cpuShares += t.Cpu.CpuShares
			u.cores += len(t.Cpu.ReservedCores)
			u.memoryMB += t.Memory.MemoryMB
			for _, d := range t.Devices {
				for _, id := range d.DeviceIDs {
					u.devices[id] = true
				}
			}
		}
	}
	return out
}

// Live reports whether an allocation holds resources: the scheduler wants
// it running and the client has not finished it.
func Live(a *api.AllocationListStub) bool {
	if a.DesiredStatus != api.AllocDesiredStatusRun {
		return false
	}
	switch a.ClientStatus {
	case api.AllocClientStatusComplete, api.AllocClientStatusFailed, api.AllocClientStatusLost:
		return false
	}
	return true
}

func freeCores(n *api.Node, u *nodeUse) int {
	r := n.NodeResources
	total := int(r.Cpu.TotalCpuCores)
	if total == 0 {
		return 0
	}
	if u == nil {
		u = &nodeUse{}
	}
	shares := r.Cpu.CpuShares
	if n.ReservedResources != nil {
		shares -= int64(n.ReservedResources.Cpu.CpuShares)
	}
	perCore := float64(r.Cpu.CpuShares) / float64(total)
	usedByShares := 0
	if perCore > 0 {
		usedByShares = int(math.Ceil(float64(u.cpuShares) / perCore))
	}
	free := total - u.cores - usedByShares
	if perCore > 0 {
		free = min(free, int(float64(shares)/perCore)-u.cores-usedByShares)
	}
	return max(free, 0)
}

func attrFloat(a *api.Attribute) float64 {
	switch {
	case a.IntVal != nil:
		return float64(*a.IntVal)
	case a.FloatVal != nil:
		return *a.FloatVal
	case a.StringVal != nil:
		v, _ := strconv.ParseFloat(*a.StringVal, 64)
		return v
	}
	return 0
}

// NodePower sums the power_draw stat of a node's NVIDIA GPUs from Nomad's
// client stats (as nomad-device-nvml reports it: W, limit as denominator).
// MIG instances carry their parent's draw and name it in the "parent" stat;
// each parent board is counted once.
func NodePower(stats *api.HostStats) Power {
	var p Power
	if stats == nil {
		return p
	}
	boards := map[string]bool{} // MIG parents already counted
	for _, g := range stats.DeviceStats {
		if g == nil || g.Vendor != "nvidia" || g.Type != "gpu" {
			continue
		}
		for _, s := range g.InstanceStats {
			if s == nil || s.Stats == nil {
				continue
			}
			w, ok := statWatts(s.Stats.Attributes[devicesapi.StatPowerDraw])
			if !ok {
				continue
			}
			if parent := s.Stats.Attributes[devicesapi.StatParent]; parent != nil && parent.StringVal != nil {
				if boards[*parent.StringVal] {
					continue
				}
				boards[*parent.StringVal] = true
			}
			p.GPUWatts += w
			p.Devices++
		}
	}
	return p
}

// GPUReading is one whole GPU as its node's device stats show it (as
// nomad-device-nvml reports them): its draw, its power limits and who set
// the enforced one. A MIG instance reads as its parent board, once.
type GPUReading struct {
	ID    string // the device instance ID Nomad allocates: a GPU's UUID
	Model string // the device group's name: the GPU's product name
	Watts float64
	// The power limits, W; 0 where the plugin does not report them.
	EnforcedW, DefaultW, MinW, MaxW float64
	// CapState is the plugin's power_cap stat: "default", "capped 450 W
	// by controller", "fallback 400 W: controller lost", "error: …".
	CapState string
	// From says where Watts was read: "client_stats" or "prometheus"
	// (the controller's power source, which sets it; the limits and cap
	// state are always client stats'). Empty from GPUReadings.
	From string
}

// GPUReadings lists the node's NVIDIA GPUs from its client stats, sorted
// by ID; a GPU that reports no power_draw is left out.
func GPUReadings(stats *api.HostStats) []GPUReading {
	if stats == nil {
		return nil
	}
	var out []GPUReading
	boards := map[string]bool{}
	for _, g := range stats.DeviceStats {
		if g == nil || g.Vendor != "nvidia" || g.Type != "gpu" {
			continue
		}
		for id, s := range g.InstanceStats {
			if s == nil || s.Stats == nil {
				continue
			}
			a := s.Stats.Attributes
			w, ok := statWatts(a[devicesapi.StatPowerDraw])
			if !ok {
				continue
			}
			if parent := a[devicesapi.StatParent]; parent != nil && parent.StringVal != nil {
				if boards[*parent.StringVal] {
					continue
				}
				boards[*parent.StringVal] = true
				id = *parent.StringVal
			}
			r := GPUReading{ID: id, Model: g.Name, Watts: w}
			r.EnforcedW, _ = statWatts(a[devicesapi.StatEnforcedLimit])
			r.DefaultW, _ = statWatts(a[devicesapi.StatDefaultLimit])
			r.MinW, _ = statWatts(a[devicesapi.StatMinLimit])
			r.MaxW, _ = statWatts(a[devicesapi.StatMaxLimit])
			if c := a[devicesapi.StatPowerCap]; c != nil && c.StringVal != nil {
				r.CapState = *c.StringVal
			}
			out = append(out, r)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// statWatts reads a device stat in W (or mW, kW).
func statWatts(v *api.StatValue) (float64, bool) {
	if v == nil || v.FloatNumeratorVal == nil {
		return 0, false
	}
	w := *v.FloatNumeratorVal
	switch v.Unit {
	case "mW":
		w /= 1000
	case "kW":
		w *= 1000
	}
	return w, true
}
