package controller

import (
	"sort"

	"github.com/hashicorp/nomad/api"

	"github.com/llmgw/llmgw/controller/observe"
	"github.com/llmgw/llmgw/controller/reconcile"
	"github.com/llmgw/llmgw/controllerapi"
	"github.com/llmgw/llmgw/facility"
)

// viewBuilder builds the read API's view of one pass. It is pure: it reads
// only its fields, which the caller gathers from the parts (updateView),
// and changes nothing; so it takes no lock.
type viewBuilder struct {
	in   reconcile.Input
	res  reconcile.Result
	info scaleInfo
	// last is each model's last change of count (scaleState.lastChanges).
	last map[string]*controllerapi.ScaleEvent
	// fileHolds are the facility file's holds: the rest of in.Facility's
	// are run-time holds.
	fileHolds []facility.Hold
	// nodes are the snapshot's nodes, by ID, for their status.
	nodes  map[string]*api.Node
	leader bool
}

// builtView is a pass's view and the gauges that go with it
// (metrics.setView).
type builtView struct {
	view controllerapi.View
	// replicas counts the slots by model and state.
	replicas map[[2]string]int
	// budgets are the budgeted domains' cap, committed and measured draw.
	budgets []budgetGauge
	// rejections counts the pass's rejections by kind.
	rejections  map[string]int
	adoptedJobs int
}

type budgetGauge struct {
	domain                             string
	capWatts, drawWatts, measuredWatts float64
}

// build makes the view of the pass, and the gauges that go with it.
func (b viewBuilder) build() builtView {
	in, res := b.in, b.res
	v := controllerapi.View{At: in.Now, Leader: b.leader}
	out := builtView{replicas: map[[2]string]int{}, rejections: map[string]int{}, adoptedJobs: len(in.Jobs)}
	v.Models = modelViews(in, res, b.info, b.last)
	bySlot := map[string][]reconcile.Job{}
	for _, j := range in.Jobs {
		bySlot[j.Replica] = append(bySlot[j.Replica], j)
	}
	counts := out.replicas
	for _, m := range in.Catalog.Models {
		for i := 0; i < m.SlotLimit(); i++ {
			slot := facility.ReplicaID(m.Name, i)
			rv := controllerapi.ReplicaView{ID: slot, Model: m.Name, State: "unplaced", Waiting: res.Waits[slot]}
			jobs := bySlot[slot]
			if _, tried := res.Decisions[slot]; m.Autoscale != nil && len(jobs) == 0 && !tried {
				continue // an autoscaled model's slot it does not want
			}
			sort.Slice(jobs, func(a, b int) bool {
				if jobs[a].State != jobs[b].State {
					return jobs[a].State < jobs[b].State
				}
				return jobs[a].CreateIndex > jobs[b].CreateIndex
			})
			if len(jobs) > 0 {
				j := jobs[0]
				rv.Profile, rv.State, rv.JobID, rv.Since, rv.Note = j.Profile, j.State.String(), j.ID, j.Since, j.Note

				for _, s := range j.Shards {
					rv.Nodes = append(rv.Nodes, s.Node)
					rv.Watts += s.Watts
				}
				rv.Domain = j.Domain.Key()
				if len(jobs) > 1 {
					for _, x := range jobs {
						rv.Jobs = append(rv.Jobs, x.ID)
					}
				}
			}
			counts[[2]string{m.Name, rv.State}]++
			v.Replicas = append(v.Replicas, rv)
		}
	}

	promised := map[string]float64{}
	for _, j := range in.Jobs {
		for _, s := range j.Shards {
			promised[s.Node] += s.Watts
		}
	}
	holds := map[string]controllerapi.Hold{}
	fileHolds := map[facility.Domain]bool{}
	status := map[string]string{}
	schedulable := map[string]bool{}
	for _, h := range b.fileHolds {
		fileHolds[h.Domain] = true
	}
	for _, n := range b.nodes {
		st := n.Status
		switch {
		case st != api.NodeStatusReady:
		case n.DrainStrategy != nil:
			st = "draining"
		case n.SchedulingEligibility != api.NodeSchedulingEligible:
			st = "ineligible"
		}
		status[n.Name] = st
		schedulable[n.Name] = observe.Schedulable(n)
	}
	for _, h := range in.Facility.Holds {
		src := "runtime"
		if fileHolds[h.Domain] {
			src = "facility"
		}
		holds[h.Domain.String()] = controllerapi.Hold{Reason: h.Reason, Drain: h.Drain, Source: src}
	}
	type agg struct {
		nodes               int
		measured, committed float64
	}
	domains := map[string]*agg{}
	for _, n := range in.Fleet.Nodes {
		nv := controllerapi.NodeView{Name: n.Name, Location: map[string]string{}, Measured: n.MeasuredWatts}
		nv.Committed = max(n.MeasuredWatts, n.BaseWatts+promised[n.Name])
		measured := n.MeasuredWatts
		if measured == 0 {
			measured = n.BaseWatts
		}
		for _, l := range facility.Levels() {
			val := n.Location.Get(l)
			if val == "" {
				continue
			}
			nv.Location[l.String()] = val
			key := l.String() + "=" + val
			a := domains[key]
			if a == nil {
				a = &agg{}
				domains[key] = a
			}
			a.nodes++
			a.measured += measured
			a.committed += nv.Committed
			if _, held := holds[key]; held {
				nv.Held = append(nv.Held, key)
			}
		}
		for _, g := range n.GPUs {
			nv.GPUModel = g.Model
			nv.GPUsFree += g.Free
			nv.GPUsTotal += g.Count
		}
		nv.Schedulable, nv.Status = schedulable[n.Name], status[n.Name]
		v.Nodes = append(v.Nodes, nv)
	}
	seen := map[string]bool{}
	// Committed draw per budgeted domain: what runs, through the
	// planner's own accounting in the pass.
	for _, u := range res.Usage {
		key := u.Domain.String()
		seen[key] = true
		dv := controllerapi.DomainView{Domain: key, CapWatts: u.CapWatts, LimitWatts: u.LimitWatts, Committed: u.DrawWatts, Headroom: u.HeadroomWatts(),
			Count: u.Count.String(), DeclaredWatts: u.DeclaredWatts, Explain: u.Explain()}
		if a := domains[key]; a != nil {
			dv.Nodes, dv.Measured = a.nodes, a.measured
		}
		if h, ok := holds[key]; ok {
			dv.Hold = &h
		}
		v.Domains = append(v.Domains, dv)
		out.budgets = append(out.budgets, budgetGauge{domain: key, capWatts: u.CapWatts, drawWatts: u.DrawWatts, measuredWatts: dv.Measured})
	}
	for key, h := range holds {
		if seen[key] {
			continue
		}
		dv := controllerapi.DomainView{Domain: key, Hold: &h}
		if a := domains[key]; a != nil {
			dv.Nodes, dv.Measured, dv.Committed = a.nodes, a.measured, a.committed
		}
		v.Domains = append(v.Domains, dv)
	}
	sort.Slice(v.Domains, func(i, j int) bool { return v.Domains[i].Domain < v.Domains[j].Domain })

	byKind := out.rejections
	for _, d := range res.Decisions {
		for _, r := range d.Rejections {
			byKind[r.Kind.String()]++
		}
	}
	out.view = v
	return out
}
