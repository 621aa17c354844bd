package controller

import (
	"fmt"
	"sort"
	"time"

	"github.com/llmgw/llmgw/controller/autoscale"
	"github.com/llmgw/llmgw/controller/reconcile"
	"github.com/llmgw/llmgw/controllerapi"
	"github.com/llmgw/llmgw/facility"
)

// Scaling. Each pass (and a standby's view refresh) asks every autoscaled
// model's Scaler what it wants given the slots the model has in Nomad now
// (autoscale.Scaler.Decide), puts a pin in its place while one is in force
// (llmgw ctl scale: controllerapi.Pin, in Nomad Variables), and hands the counts
// to the reconciler as reconcile.Input.Want; the reconciler fits them to
// the budgets by priority (Result.Scale) and the pass carries its actions
// out. A scale down stops the victims' jobs as every stop does: Nomad
// deregisters the replica's service first, so the gateways stop sending it
// requests, and keeps the engine serving for the group's shutdown_delay
// before it signals it (render, docs/controller.md "Autoscaling").

func decisionView(d autoscale.Decision, at time.Time) controllerapi.ScaleDecision {
	out := controllerapi.ScaleDecision{At: at, Current: d.Current, Want: d.Want, Rule: d.Rule.String(), Reason: d.Reason}
	if d.Needed >= 0 {
		v := d.Needed
		out.Needed = &v
	}
	if d.NeededDown >= 0 {
		v := d.NeededDown
		out.NeededDown = &v
	}
	return out
}

// scaleInfo is what deciding the counts of a pass found, for the view and
// the events.
type scaleInfo struct {
	decisions map[string]controllerapi.ScaleDecision
	pins      map[string]controllerapi.Pin // in force
	expired   bool                         // some stored pin has expired
}

// slotsHeld counts, per model, the slots with a live job inside the
// model's slot range: what the scaler calls the model's current count.
func slotsHeld(cat facility.Catalog, jobs []reconcile.Job) map[string]int {
	slot := map[string]string{} // replica id -> model, for the valid slots
	for _, m := range cat.Models {
		for i := 0; i < m.SlotLimit(); i++ {
			slot[facility.ReplicaID(m.Name, i)] = m.Name
		}
	}
	seen := map[string]bool{}
	out := map[string]int{}
	for _, j := range jobs {
		if m, ok := slot[j.Replica]; ok && m == j.Model && !seen[j.Replica] {
			seen[j.Replica] = true
			out[m]++
		}
	}
	return out
}

// decideCounts asks every autoscaled model's scaler for its count and
// applies the pins in force.
func (s *scaleState) decideCounts(cat facility.Catalog, jobs []reconcile.Job, pins []controllerapi.Pin, now time.Time, dry bool) (map[string]reconcile.Want, scaleInfo) {
	info := scaleInfo{decisions: map[string]controllerapi.ScaleDecision{}, pins: map[string]controllerapi.Pin{}}
	for _, p := range pins {
		if p.Active(now) {
			info.pins[p.Model] = p
		} else {
			info.expired = true
		}
	}
	held := slotsHeld(cat, jobs)
	wants := map[string]reconcile.Want{}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range cat.Models {
		if m.Autoscale == nil {
			continue
		}
		sc := s.scalers[m.Name]
		switch {
		case sc == nil && dry:
			sc = autoscale.New(autoscale.Config{})
		case sc == nil:
			sc = autoscale.New(autoscale.Config{})
			s.scalers[m.Name] = sc
		case dry:
			// A dry run decides on a copy: its cooldowns stay untouched.
			sc = sc.Clone()
		}
		d := sc.Decide(*m.Autoscale, now, held[m.Name])
		info.decisions[m.Name] = decisionView(d, now)
		w := reconcile.Want{N: d.Want, Reason: d.Reason}
		if p, ok := info.pins[m.Name]; ok {
			by := ""
			if p.SetBy != "" {
				by = " by " + p.SetBy
			}
			why := ""
			if p.Reason != "" {
				why = " (" + p.Reason + ")"
			}
			w = reconcile.Want{N: p.Replicas, Reason: fmt.Sprintf("pinned at %d%s until %s%s (llmgw ctl scale); without the pin the autoscaler would want %d: %s",
				p.Replicas, by, p.Until.UTC().Format(time.RFC3339), why, d.Want, d.Reason)}
		}
		wants[m.Name] = w
	}
	return wants, info
}

// modelViews builds the models of the view from a pass.
func modelViews(in reconcile.Input, res reconcile.Result, info scaleInfo, last map[string]*controllerapi.ScaleEvent) []controllerapi.ModelView {
	serving := map[string]int{}
	slots := map[string]map[string]bool{}
	for _, j := range in.Jobs {
		if slots[j.Model] == nil {
			slots[j.Model] = map[string]bool{}
		}
		slots[j.Model][j.Replica] = true
	}
	servingSlot := map[string]bool{}
	for _, j := range in.Jobs {
		if j.State == reconcile.Serving && !servingSlot[j.Replica] {
			servingSlot[j.Replica] = true
			serving[j.Model]++
		}
	}
	spares := map[string][]string{}
	for _, s := range res.Spares {
		state := "fetching"
		if s.Held {
			state = "held"
		}
		spares[s.Model] = append(spares[s.Model], s.Node+" ("+state+")")
	}
	out := make([]controllerapi.ModelView, 0, len(in.Catalog.Models))
	for _, m := range in.Catalog.Models {
		mv := controllerapi.ModelView{Name: m.Name, Priority: m.Priority, Min: m.Replicas, Max: m.Replicas, Wanted: m.Replicas,
			Has: len(slots[m.Name]), Serving: serving[m.Name], LastChange: last[m.Name], Warnings: m.Warnings()}
		if w := m.Weights; w != nil && w.Path == "" {
			key := w.Key()
			wv := &controllerapi.WeightsView{Key: key, Source: w.String(), Nodes: []string{}, WarmSpares: m.WarmSpares, Spares: spares[m.Name]}
			for _, n := range in.Fleet.Nodes {
				if b, ok := n.Weights[key]; ok {
					wv.Nodes = append(wv.Nodes, n.Name)
					wv.Bytes = max(wv.Bytes, b)
				}
			}
			mv.Weights = wv
		}
		if a := m.Autoscale; a != nil {
			mv.Autoscale, mv.Min, mv.Max, mv.Target = true, a.Min, a.Max, a.Target.String()
			if s, ok := res.Scale[m.Name]; ok {
				mv.Wanted, mv.Has, mv.Explain, mv.Reason = s.Want, s.Has, s.Explain(), s.Reason
				mv.Added, mv.Stopped, mv.Yielded = s.Added, s.Stopped, s.Yielded
			}
			if d, ok := info.decisions[m.Name]; ok {
				mv.Decision = &d
			}
			if p, ok := info.pins[m.Name]; ok {
				mv.Pin = &p
			}
		}
		out = append(out, mv)
	}
	return out
}

// scaleEvents counts the changes of count a pass carried out: the slots
// it created for growth, and stopped to scale down or to yield, of those
// actions that were done.
func (c *Controller) scaleEvents(res reconcile.Result, info scaleInfo, done map[string]bool, now time.Time) {
	names := make([]string, 0, len(res.Scale))
	for n := range res.Scale {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		s := res.Scale[name]
		count := func(slots []string) int {
			n := 0
			for _, sl := range slots {
				if done[sl] {
					n++
				}
			}
			return n
		}
		added, stopped, yielded := count(s.Added), count(s.Stopped), count(s.Yielded)
		if added+stopped+yielded == 0 {
			continue
		}
		reason := "hold"
		if d, ok := info.decisions[name]; ok {
			reason = d.Rule
		}
		if _, ok := info.pins[name]; ok {
			reason = "pin"
		}
		var ev controllerapi.ScaleEvent
		record := func(label string, n int) {
			if n == 0 {
				return
			}
			c.metrics.scaleEvents.WithLabelValues(name, label).Inc()
			ev = controllerapi.ScaleEvent{At: now, From: s.Had, To: s.Had + added - stopped - yielded, Reason: label, Detail: s.Reason}
		}
		record(reason, added+stopped)
		if yielded > 0 {
			record("yield", yielded)
			ev.Detail = fmt.Sprintf("%d slot(s) gave their place to a model of higher priority (%v)", yielded, s.Yielded)
		}
		c.log.Info("scaled", "model", name, "from", ev.From, "to", ev.To, "reason", ev.Reason, "detail", ev.Detail)
		c.scale.setLastChange(name, ev)
	}
}
