package facility

import (
	"errors"
	"fmt"
	"slices"
)

// ErrNotRunning: Remove was given a replica the planner does not account for.
var ErrNotRunning = errors.New("replica not accounted for")

// Remove takes a replica out of the planner's accounting, as if it had
// stopped: its shards' draw leaves their nodes and domains, its spread
// counts shrink, and what its shards hold (GPUs, CPU cores, memory, as
// the shards name them) is free again for the next decision. A node's
// measured draw does not shrink with it: max(measured, base + Σ shards)
// frees only what the measurement does not cover. It returns the replica
// removed, which Commit of a Decision with its shards puts back. A replica
// given to NewPlanner or Add gives back what its shards name too: the
// fleet's free counts left it out.
func (p *Planner) Remove(id string) (Replica, error) {
	i := slices.IndexFunc(p.running, func(r Replica) bool { return r.ID == id })
	if i < 0 {
		return Replica{}, fmt.Errorf("remove %s: %w", id, ErrNotRunning)
	}
	r, at := p.running[i], p.runAt[i]
	for k, s := range r.Shards {
		n := &p.nodes[at[k].node]
		if s.GPUs > 0 {
			if g := p.gpu(n, p.gpuID(s.GPU)); g != nil {
				g.free += s.GPUs
			}
		}
		n.cpu += s.CPUCores
		n.mem += s.MemoryGB
		w := at[k].w
		p.addDraw(at[k].node, [2]float64{-w[0], -w[1]})
	}
	if p.notServing[id] {
		delete(p.notServing, id)
	} else {
		p.uncount(r.Model, at)
	}
	p.running = slices.Delete(p.running, i, i+1)
	p.runAt = slices.Delete(p.runAt, i, i+1)
	if len(p.running) == 0 {
		p.running, p.runAt = nil, nil // as NewPlanner's without
	}
	return r, nil
}

// NotServing takes a running replica out of its model's spread counts and
// leaves the rest of its accounting: a replica that failed serves nowhere,
// so the domains it sat in hold one replica fewer of its model when the
// next one is placed, while its draw and what its shards hold still count
// (a shard of it may still run, or be placed again by Nomad, until it is
// removed). Without it, a replica placed again leans away from the domain
// it failed in, and two lost on one node both lean away from it onto one
// other node. Calling it again for the same replica changes nothing.
func (p *Planner) NotServing(id string) error {
	i := slices.IndexFunc(p.running, func(r Replica) bool { return r.ID == id })
	if i < 0 {
		return fmt.Errorf("not serving %s: %w", id, ErrNotRunning)
	}
	if p.notServing[id] {
		return nil
	}
	p.uncount(p.running[i].Model, p.runAt[i])
	if p.notServing == nil {
		p.notServing = map[string]bool{}
	}
	p.notServing[id] = true
	return nil
}

// Restore puts back a replica Remove took out, taking its resources again.
func (p *Planner) Restore(r Replica) error {
	return p.Commit(Decision{Replica: r.ID, Model: r.Model, Profile: r.Profile, Placed: true, Shards: slices.Clone(r.Shards)})
}

// uncount takes one replica of model out of every domain its nodes are in.
func (p *Planner) uncount(model string, nodes []shardAt) {
	cs := p.countsOf(model)
	p.logCounts(model, nodes)
	for _, l := range Levels() {
		for i, n := range nodes {
			d := p.cells[p.nodes[n.node].cell].dom[l]
			if d < 0 || slices.ContainsFunc(nodes[:i], func(m shardAt) bool { return p.cells[p.nodes[m.node].cell].dom[l] == d }) {
				continue
			}
			if cs[d] > 0 {
				cs[d]--
			}
		}
	}
}
