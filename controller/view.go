package controller

import (
	"encoding/json"
	"sort"
	"sync"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/llmgw/llmgw/controller/observe"
	"github.com/llmgw/llmgw/controller/reconcile"
	"github.com/llmgw/llmgw/facility"
)

// View is what the last pass saw and decided, as the read API shows it.
type View struct {
	At       time.Time     `json:"at"`
	Leader   bool          `json:"leader"`
	Replicas []ReplicaView `json:"replicas"`
	Nodes    []NodeView    `json:"nodes"`
	Domains  []DomainView  `json:"domains"`
	Models   []ModelView   `json:"models"`
}

// ReplicaView is one replica slot and the job (or jobs, during a roll or a
// move) serving it.
type ReplicaView struct {
	ID      string `json:"id"`
	Model   string `json:"model"`
	Profile string `json:"profile,omitempty"`
	State   string `json:"state"` // serving, starting, partial, pending, failed, unplaced
	// Note says why a replica that is not serving is not, shard by shard:
	// "shard-0: no check result yet", "shard-0: health unreadable: …",
	// "shard-1: node n3 down for 31s (lost_after 0s)".
	Note string `json:"note,omitempty"`
	// Waiting says why a roll or move of the replica waits this pass:
	// max_surge reached, or no room beside it with max_unavailable 0.
	Waiting string   `json:"waiting,omitempty"`
	Domain  string   `json:"domain,omitempty"`
	Nodes   []string `json:"nodes,omitempty"`
	Watts   float64  `json:"watts,omitempty"`
	JobID   string   `json:"job_id,omitempty"`
	// Jobs lists every job of the slot when there is more than one.
	Jobs  []string  `json:"jobs,omitempty"`
	Since time.Time `json:"since,omitzero"`
	// Engine is what the controller last read from the serving job's
	// engine metrics; absent while the replica does not serve, or its
	// engine has no known metrics.
	Engine *EngineMetrics `json:"engine,omitempty"`
}

// NodeView is one Nomad node as placement sees it.
type NodeView struct {
	Name        string            `json:"name"`
	Location    map[string]string `json:"location"`
	GPUModel    string            `json:"gpu_model,omitempty"`
	GPUsFree    int               `json:"gpus_free"`
	GPUsTotal   int               `json:"gpus_total"`
	Measured    float64           `json:"measured_watts"`
	Committed   float64           `json:"committed_watts"`
	Schedulable bool              `json:"schedulable"`
	// Status is Nomad's view: ready, down, initializing, or ready but
	// draining or ineligible.
	Status string   `json:"status"`
	Held   []string `json:"held,omitempty"` // held domains the node is in
}

// DomainView is one domain with a budget or a hold.
type DomainView struct {
	Domain     string  `json:"domain"`
	Nodes      int     `json:"nodes"`
	CapWatts   float64 `json:"cap_watts,omitempty"`   // the budget; 0: none
	LimitWatts float64 `json:"limit_watts,omitempty"` // the budget less headroom
	Committed  float64 `json:"committed_watts"`
	Measured   float64 `json:"measured_watts"`
	Headroom   float64 `json:"headroom_watts,omitempty"`
	Hold       *Hold   `json:"hold,omitempty"`
}

// Hold is a domain held for maintenance.
type Hold struct {
	Reason string `json:"reason"`
	Drain  bool   `json:"drain"`
	Source string `json:"source"` // "facility" (the file) or "runtime" (the API)
}

// Explain is a replica's stored placement decision.
type Explain struct {
	Replica    string               `json:"replica"`
	Placed     bool                 `json:"placed"`
	Profile    string               `json:"profile,omitempty"`
	Domain     facility.Scope       `json:"domain,omitempty"`
	Nodes      []string             `json:"nodes,omitempty"`
	Watts      float64              `json:"watts,omitempty"`
	Rejections []facility.Rejection `json:"rejections,omitempty"`
	Reasons    []string             `json:"reasons,omitempty"`
	// Waiting says why a roll or move of the replica waits (max_surge,
	// no room with max_unavailable 0).
	Waiting string    `json:"waiting,omitempty"`
	At      time.Time `json:"at"`
}

func explainOf(d facility.Decision, at time.Time) Explain {
	e := Explain{Replica: d.Replica, Placed: d.Placed, Profile: d.Profile, Domain: d.Domain, Watts: d.Watts,
		Rejections: d.Rejections, Reasons: d.Reasons(), At: at}
	for _, s := range d.Shards {
		e.Nodes = append(e.Nodes, s.Node)
	}
	return e
}

// updateView rebuilds the read API's view and the gauges from a pass.
func (c *Controller) updateView(in reconcile.Input, res reconcile.Result, info scaleInfo) {
	v := View{At: in.Now}
	v.Models = modelViews(in, res, info, c.scale.lastChanges())
	c.metrics.setModels(v.Models)
	bySlot := map[string][]reconcile.Job{}
	for _, j := range in.Jobs {
		bySlot[j.Replica] = append(bySlot[j.Replica], j)
	}
	c.metrics.replicas.Reset()
	counts := map[[2]string]int{}
	for _, m := range in.Catalog.Models {
		for i := 0; i < m.SlotLimit(); i++ {
			slot := facility.ReplicaID(m.Name, i)
			rv := ReplicaView{ID: slot, Model: m.Name, State: "unplaced", Waiting: res.Waits[slot]}
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
	for k, n := range counts {
		c.metrics.replicas.WithLabelValues(k[0], k[1]).Set(float64(n))
	}

	promised := map[string]float64{}
	for _, j := range in.Jobs {
		for _, s := range j.Shards {
			promised[s.Node] += s.Watts
		}
	}
	holds := map[string]Hold{}
	fileHolds := map[facility.Domain]bool{}
	status := map[string]string{}
	schedulable := map[string]bool{}
	_, fac := c.files.get()
	for _, h := range fac.Holds {
		fileHolds[h.Domain] = true
	}
	for _, n := range c.obs.snapshot().nodes {
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
		holds[h.Domain.String()] = Hold{Reason: h.Reason, Drain: h.Drain, Source: src}
	}
	type agg struct {
		nodes               int
		measured, committed float64
	}
	domains := map[string]*agg{}
	for _, n := range in.Fleet.Nodes {
		nv := NodeView{Name: n.Name, Location: map[string]string{}, Measured: n.MeasuredWatts}
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
	c.metrics.domainCap.Reset()
	c.metrics.domainDraw.Reset()
	c.metrics.domainMeasured.Reset()
	seen := map[string]bool{}
	// Committed draw per budgeted domain: what runs, through the
	// planner's own accounting in the pass.
	for _, u := range res.Usage {
		key := u.Domain.String()
		seen[key] = true
		dv := DomainView{Domain: key, CapWatts: u.CapWatts, LimitWatts: u.LimitWatts, Committed: u.DrawWatts, Headroom: u.HeadroomWatts()}
		if a := domains[key]; a != nil {
			dv.Nodes, dv.Measured = a.nodes, a.measured
		}
		if h, ok := holds[key]; ok {
			dv.Hold = &h
		}
		v.Domains = append(v.Domains, dv)
		c.metrics.domainCap.WithLabelValues(key).Set(u.CapWatts)
		c.metrics.domainDraw.WithLabelValues(key).Set(u.DrawWatts)
		c.metrics.domainMeasured.WithLabelValues(key).Set(dv.Measured)
	}
	for key, h := range holds {
		if seen[key] {
			continue
		}
		dv := DomainView{Domain: key, Hold: &h}
		if a := domains[key]; a != nil {
			dv.Nodes, dv.Measured, dv.Committed = a.nodes, a.measured, a.committed
		}
		v.Domains = append(v.Domains, dv)
	}
	sort.Slice(v.Domains, func(i, j int) bool { return v.Domains[i].Domain < v.Domains[j].Domain })

	c.metrics.rejections.Reset()
	byKind := map[string]int{}
	for _, d := range res.Decisions {
		for _, r := range d.Rejections {
			byKind[r.Kind.String()]++
		}
	}
	for k, n := range byKind {
		c.metrics.rejections.WithLabelValues(k).Set(float64(n))
	}
	c.metrics.adopted.WithLabelValues("jobs").Set(float64(len(in.Jobs)))

	v.Leader = c.lead.isLeading()
	c.views.publish(v, c.inputGen)
}

// viewState is the read API's view as the last pass (or a standby's view
// refresh) built it, and the generations of the API's writes that wait
// for it.
type viewState struct {
	// mu guards every field below. Invariant: viewGen is the write
	// generation read before the snapshot the view was built from, so a
	// write whose generation is at most viewGen shows in the view; changed
	// is closed, and replaced, at every new view.
	mu   sync.RWMutex
	view View
	// next counts the API's writes whose effect the view must show before
	// the write answers (holds, labels): each write, once Nomad shows it,
	// takes the next number (nextGen).
	next, viewGen uint64
	changed       chan struct{}
}

// get returns the view; its lists are shared: read them, never change
// them.
func (s *viewState) get() View {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.view
}

// publish makes v, built from an input read after write generation gen,
// the view, and wakes the waiters.
func (s *viewState) publish(v View, gen uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.view, s.viewGen = v, gen
	close(s.changed)
	s.changed = make(chan struct{})
}

// gen returns the write generation now.
func (s *viewState) gen() uint64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.next
}

// nextGen takes the next write generation.
func (s *viewState) nextGen() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.next++
	return s.next
}

// shows reports whether the view was built after write generation
// target, and a channel closed at the next view (waitUntil).
func (s *viewState) shows(target uint64) (bool, <-chan struct{}) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.viewGen >= target, s.changed
}

// saveDecisions stores each decision of the pass that changed since it
// was last stored, so explanations survive restarts without a write per
// replica per pass.
func (c *Controller) saveDecisions(res reconcile.Result) {
	now := c.now()
	for slot, d := range res.Decisions {
		e := explainOf(d, now)
		e.Waiting = res.Waits[slot]
		key := e
		key.At = time.Time{}
		b, _ := json.Marshal(key)
		if c.saved[slot] == string(b) {
			continue
		}
		if err := c.store.SaveDecision(slot, e); err != nil {
			c.log.Warn("save decision", "replica", slot, "error", err)
			continue
		}
		c.saved[slot] = string(b)
	}
}
