package observe

import (
	"sort"

	"github.com/hashicorp/nomad/api"

	"github.com/llmgw/llmgw/controller/render"
	"github.com/llmgw/llmgw/facility"
)

// ShardDraw is what the GPUs of one running shard drew at one reading: a
// sample of its profile's draw on its GPU model (facility.LearnedKey),
// which measured budgets count (docs/power.md).
type ShardDraw struct {
	Key   facility.LearnedKey
	Alloc string
	Watts float64
}

// ShardDraws samples every running allocation of a managed job whose
// every allocated GPU has a reading in gpus (by node ID, as the power
// poll read them): the sum of its GPUs' draw. A shard with a GPU not read
// (a MIG instance, whose reading is its parent board's; a node that did not
// answer) or with GPUs of two models gives no sample. Sorted by allocation.
func ShardDraws(stubs []*api.JobListStub, allocs []*api.AllocationListStub, gpus map[string][]GPUReading) []ShardDraw {
	meta := make(map[string]map[string]string, len(stubs))
	for _, s := range stubs {
		if s.Meta[render.MetaManaged] == "true" {
			meta[s.ID] = s.Meta
		}
	}
	var out []ShardDraw
	for _, a := range allocs {
		m := meta[a.JobID]
		if m == nil || a.ClientStatus != api.AllocClientStatusRunning || a.DesiredStatus != api.AllocDesiredStatusRun || a.AllocatedResources == nil {
			continue
		}
		read := gpus[a.NodeID]
		byID := make(map[string]GPUReading, len(read))
		for _, g := range read {
			byID[g.ID] = g
		}
		d := ShardDraw{Key: facility.LearnedKey{Model: m[render.MetaModel], Profile: m[render.MetaProfile]}, Alloc: a.ID}
		n, ok := 0, true
		for _, t := range a.AllocatedResources.Tasks {
			if t == nil {
				continue
			}
			for _, dev := range t.Devices {
				for _, id := range dev.DeviceIDs {
					g, found := byID[id]
					switch {
					case !found:
						ok = false
					case d.Key.GPU == "":
						d.Key.GPU = g.Model
					case d.Key.GPU != g.Model:
						ok = false
					}
					d.Watts += g.Watts
					n++
				}
			}
		}
		if ok && n > 0 && d.Key.Model != "" && d.Key.Profile != "" {
			out = append(out, d)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Alloc < out[j].Alloc })
	return out
}
