package controller

import (
	"context"
	"log/slog"
	"maps"
	"slices"
	"sort"
	"sync"
	"time"

	consulapi "github.com/hashicorp/consul/api"
	"github.com/hashicorp/nomad/api"
	"golang.org/x/time/rate"

	"github.com/llmgw/llmgw/controller/config"
	"github.com/llmgw/llmgw/controller/observe"
	"github.com/llmgw/llmgw/controller/render"
	"github.com/llmgw/llmgw/facility"
)

// observer keeps the controller's snapshot of Nomad current: nodes,
// allocations and llmgw's jobs through Nomad's event stream (stream.go),
// or where it is not served through blocking queries (watchNodes,
// watchAllocs, watchJobs), each GPU node's measured power by polling
// client stats (pollPower), and the service checks of the serving shards
// (watchHealth, health.go). Every change kicks a pass. It writes nothing
// to Nomad.
type observer struct {
	nomad             *api.Client
	consul            *consulapi.Client // nil unless service_provider is consul
	log               *slog.Logger
	region, namespace string
	// eventStream is nomad.event_stream: follow the lists through Nomad's
	// event stream (stream.go), not blocking queries.
	eventStream bool
	// namespaces are nomad.namespaces: those whose allocations count.
	namespaces      []string
	serviceProvider string
	checkInterval   time.Duration // the driver's; 0: render.DefaultCheckInterval
	powerInterval   time.Duration
	// promPower is the Prometheus source of GPU draw (powersource.go);
	// nil: client stats alone.
	promPower *promPower
	metrics   *metrics
	// nodeStats are the GPU nodes' last client-stats reads, by node ID,
	// for the rounds whose draw Prometheus gives (pollPower's goroutine
	// alone uses them).
	nodeStats map[string]nodeStats
	// kick asks for a pass; forgetExpect tells the writer that the job
	// list's index went backwards.
	kick, forgetExpect func()
	// afterPower runs after every power poll, with the new readings in the
	// snapshot (the controller's power part: learning and caps).
	afterPower    func(context.Context)
	healthTrigger chan struct{} // an allocation list changed: read the checks now
	// jobsTable is the jobs table's last index the event stream's rounds
	// have seen (stream.go; its goroutine alone uses it).
	jobsTable uint64

	// mu guards snap and changed. Invariant: each list of snap is
	// replaced whole, never changed in place (a reader may keep the
	// snapshot it copied), and its synced flag is set once that list has
	// been read; changed is closed, and replaced, at every change of the
	// nodes.
	mu      sync.RWMutex
	snap    snapshot
	changed chan struct{}
	// capsWritten are the nodes (by name) whose caps variable the power
	// part wrote since the power poll last took them (capsWrittenTo): with
	// a Prometheus source their client stats are read at the next round.
	capsWritten map[string]bool
}

func newObserver() *observer {
	return &observer{
		healthTrigger: make(chan struct{}, 1),
		snap:          snapshot{nodes: map[string]*api.Node{}, power: map[string]observe.Power{}, gpus: map[string][]observe.GPUReading{}},
		changed:       make(chan struct{}),
		nodeStats:     map[string]nodeStats{},
		capsWritten:   map[string]bool{},
	}
}

type snapshot struct {
	nodes       map[string]*api.Node // by ID
	nodesSynced bool
	allocs      []*api.AllocationListStub
	allocSynced bool
	jobs        []*api.JobListStub
	jobsSynced  bool
	jobsIndex   uint64 // the job list's index (the jobs table's)
	power       map[string]observe.Power
	gpus        map[string][]observe.GPUReading // by node ID, from the same reads as power
	// checks are the service check results of running shard-0
	// allocations, by allocation ID (watchHealth).
	checks       map[string]observe.Check
	checksSynced bool
}

func (s snapshot) synced() bool {
	return s.nodesSynced && s.allocSynced && s.jobsSynced && s.checksSynced
}

// nodeReaders is how many nodes the nodes watch reads at once (the
// blocking-query fallback; a full read of the stream's uses
// nodeFirstReaders).
const nodeReaders = 8

func (o *observer) watchNodes(ctx context.Context) {
	watch(ctx, o.log, "nodes", func(q *api.QueryOptions) ([]*api.NodeListStub, *api.QueryMeta, error) {
		q.Region = o.region
		return o.nomad.Nodes().List(q)
	}, func(stubs []*api.NodeListStub, _ uint64) {
		o.mu.RLock()
		have := o.snap.nodes
		o.mu.RUnlock()
		// The list has no meta: read each changed node, a few at a time
		// (one at a time, a fleet's first read is a round trip per node).
		next, _ := o.readNodes(ctx, stubs, have, nodeReaders)
		if ctx.Err() != nil {
			return
		}
		o.mu.Lock()
		o.snap.nodes, o.snap.nodesSynced = next, true
		o.notifyLocked()
		o.mu.Unlock()
		o.kick()
	})
}

// watchAllocs keeps snap.allocs current: the allocations of the
// namespaces in nomad.namespaces, every one's GPUs counted as taken. With
// "*" (the default) that is one blocking query over every namespace the
// token may read. With a list it is one blocking query per namespace, each
// in its own goroutine, merged in the list's order: each namespace's list
// is one consistent read, and the merge holds every namespace's latest
// (Nomad indexes the allocations as one table, so any change wakes every
// namespace's query). allocSynced is set only once every namespace has
// been read: a namespace the token may not read (403) keeps the
// controller from placing anything, and says so in its log, rather than
// letting that namespace's GPUs look free.
func (o *observer) watchAllocs(ctx context.Context) {
	fetch := func(ns string) func(q *api.QueryOptions) ([]*api.AllocationListStub, *api.QueryMeta, error) {
		return func(q *api.QueryOptions) ([]*api.AllocationListStub, *api.QueryMeta, error) {
			q.Namespace, q.Region = ns, o.region
			// Task states (every task's event history) are the bulk of an
			// allocation stub, and nothing here reads them.
			q.Params = map[string]string{"resources": "true", "task_states": "false"}
			return o.nomad.Allocations().List(q)
		}
	}
	publish := func(allocs []*api.AllocationListStub, synced bool) {
		o.mu.Lock()
		o.snap.allocs, o.snap.allocSynced = allocs, synced
		o.mu.Unlock()
		o.allocsChanged()
	}
	nss := o.namespaces
	all := len(nss) == 0
	for _, ns := range nss {
		all = all || ns == config.AllNamespaces
	}
	if all {
		watch(ctx, o.log, "allocations", fetch(config.AllNamespaces), func(allocs []*api.AllocationListStub, _ uint64) {
			publish(allocs, true)
		})
		return
	}
	var mu sync.Mutex // orders the merges and their publication
	lists := make(map[string][]*api.AllocationListStub, len(nss))
	var wg sync.WaitGroup
	for _, ns := range nss {
		wg.Go(func() {
			watch(ctx, o.log, "allocations in namespace "+ns, fetch(ns), func(allocs []*api.AllocationListStub, _ uint64) {
				mu.Lock()
				defer mu.Unlock()
				lists[ns] = allocs
				var merged []*api.AllocationListStub
				for _, n := range nss {
					merged = append(merged, lists[n]...)
				}
				publish(merged, len(lists) == len(nss))
			})
		})
	}
	wg.Wait()
}

func (o *observer) watchJobs(ctx context.Context) {
	watch(ctx, o.log, "jobs", func(q *api.QueryOptions) ([]*api.JobListStub, *api.QueryMeta, error) {
		q.Namespace, q.Region, q.Prefix = o.namespace, o.region, render.JobIDPrefix
		q.Params = map[string]string{"meta": "true"}
		return o.nomad.Jobs().List(q)
	}, func(jobs []*api.JobListStub, index uint64) {
		// This callback alone writes jobsIndex: read, then forget, then
		// publish, so that no pass sees the new list with the old expect.
		o.mu.RLock()
		backwards := index < o.snap.jobsIndex
		o.mu.RUnlock()
		if backwards {
			o.forgetExpect()
		}
		o.mu.Lock()
		o.snap.jobs, o.snap.jobsSynced, o.snap.jobsIndex = jobs, true, index
		o.mu.Unlock()
		o.kick()
	})
}

// pollPower reads each schedulable GPU node's measured draw every
// power_interval: through Nomad's client stats (which go through the
// servers to the node), or, with a Prometheus source, from Prometheus
// for every node it covers (powerRound). A node that does not answer is
// left out of that round: it counts as not measured.
func (o *observer) pollPower(ctx context.Context) {
	tick := time.NewTicker(o.powerInterval)
	defer tick.Stop()
	for {
		power, gpus := o.powerRound(ctx)
		if ctx.Err() != nil {
			return
		}
		o.mu.Lock()
		changed := !maps.Equal(o.snap.power, power) || !maps.EqualFunc(o.snap.gpus, gpus, slices.Equal)
		o.snap.power, o.snap.gpus = power, gpus
		o.mu.Unlock()
		if o.afterPower != nil {
			o.afterPower(ctx)
		}
		if changed {
			o.kick()
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// powerRound reads the draw of every ready GPU node. Without a Prometheus
// source, or when its query fails (logged, and counted in
// llmgw_power_source_failures_total), every node's client stats are read.
// With one, a node whose every GPU has a Prometheus sample within max_age
// takes its draw from there, with its GPUs' limits and cap state from its
// last client-stats read; its client stats are read again once they are
// older than client_stats_interval, or its caps variable was written,
// at most statsBudget such nodes a round (the rest wait for the next).
// A node Prometheus does not cover whole (a GPU missing or stale, not
// read yet, GPUs changed) is read through client stats, as without the
// source. Every client-stats read is bounded by powerReadRate.
func (o *observer) powerRound(ctx context.Context) (map[string]observe.Power, map[string][]observe.GPUReading) {
	o.mu.Lock()
	var ids []string
	devs, nameOf, idOf := map[string]string{}, map[string]string{}, map[string]string{}
	for id, n := range o.snap.nodes {
		if n.Status == api.NodeStatusReady && hasGPU(n) {
			ids = append(ids, id)
			devs[id], nameOf[id], idOf[n.Name] = gpuDevices(n), n.Name, id
		}
	}
	writtenNames := o.capsWritten
	o.capsWritten = map[string]bool{}
	o.mu.Unlock()
	sort.Strings(ids)
	written := map[string]bool{}
	for name := range writtenNames {
		if id := idOf[name]; id != "" {
			written[id] = true
		}
	}
	// again are the written nodes whose client stats this round does not
	// read after all: the next round does.
	var again []string

	power, gpus := map[string]observe.Power{}, map[string][]observe.GPUReading{}
	var covered map[string]bool // nil: no source this round
	if o.promPower != nil {
		draws, err := o.promPower.draws(ctx)
		switch {
		case err != nil && ctx.Err() == nil:
			o.log.Warn("power: the Prometheus source failed; this round reads every GPU node's client stats", "error", err)
			o.metrics.powerSourceFailures.Inc()
		case err == nil:
			covered = map[string]bool{}
			for _, id := range ids {
				st, ok := o.nodeStats[id]
				if !ok || st.devs != devs[id] {
					continue
				}
				if g, p, ok := withDraws(st, draws); ok {
					covered[id] = true
					power[id], gpus[id] = p, g
				}
			}
		}
	}
	now := time.Now()
	budget, every := 0, time.Duration(0)
	if o.promPower != nil {
		budget, every = statsBudget(o.powerInterval), o.promPower.statsEvery
	}
	plan := planPowerReads(ids, covered, o.nodeStats, written, now, every, budget)
	gotPower, gotGPUs := o.readPower(ctx, plan.read)
	for _, id := range plan.read {
		o.metrics.powerStatsReads.WithLabelValues(plan.why[id]).Inc()
		p, ok := gotPower[id]
		if !ok {
			if plan.why[id] == readWritten {
				again = append(again, nameOf[id]) // its read failed
			}
			continue // a covered node keeps its Prometheus reading
		}
		power[id], gpus[id] = p, gotGPUs[id]
		if o.promPower != nil {
			o.nodeStats[id] = nodeStats{at: now, devs: devs[id], gpus: gotGPUs[id]}
		}
	}
	for id := range written {
		if _, planned := plan.why[id]; !planned {
			again = append(again, nameOf[id]) // the budget left it out
		}
	}
	o.capsWrittenTo(again)
	for id := range o.nodeStats {
		if _, ok := devs[id]; !ok {
			delete(o.nodeStats, id)
		}
	}
	var fromProm, fromStats float64
	for _, gs := range gpus {
		for _, g := range gs {
			if g.From == fromPrometheus {
				fromProm++
			} else {
				fromStats++
			}
		}
	}
	o.metrics.powerGPUDraws.WithLabelValues(fromPrometheus).Set(fromProm)
	o.metrics.powerGPUDraws.WithLabelValues(fromClientStats).Set(fromStats)
	return power, gpus
}

// capsWrittenTo records that the power part wrote these nodes' caps
// variables (by name): with a Prometheus source, their client stats are
// read at the next round, since their cap state and limits move.
func (o *observer) capsWrittenTo(nodes []string) {
	if o.promPower == nil {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, n := range nodes {
		o.capsWritten[n] = true
	}
}

// powerReaders is how many nodes' stats are read at once; each read has
// callTimeout (a node that does not answer is left out of that round).
// powerReadRate bounds the reads in all: every power_interval up to
// powerReadRate × power_interval GPU nodes (600 at the default 30 s), a
// round of n nodes taking n/powerReadRate seconds beyond that (500 s at
// 10,000 nodes). With the checks' bound (healthSteadyRate, 25) the
// controller's steady reads stay under 50 a second at any fleet size.
// Client stats go through the servers to each node, and
// since the nodes hold their power shares themselves (devices'
// power_caps, docs/power.md) a slower round only moves shares between
// nodes later; it does not lengthen the time a domain may stay over its
// limit. A Prometheus source (powerRound) takes most of these reads off.
const (
	powerReaders  = 8
	powerReadRate = 20 // reads a second, at most
)

// statsBudget is how many nodes Prometheus covers a round may still read
// through client stats (their refresh, and those whose caps were
// written): half of what powerReadRate allows in a power_interval, at
// least one, so that a round of them takes at most half the interval.
func statsBudget(interval time.Duration) int {
	return max(1, int(powerReadRate*interval.Seconds()/2))
}

// readPower reads the client stats of the nodes ids, powerReaders at a
// time and powerReadRate a second at most, and returns the power and
// GPUs of those that answered.
func (o *observer) readPower(ctx context.Context, ids []string) (map[string]observe.Power, map[string][]observe.GPUReading) {
	got := make([]*observe.Power, len(ids))
	readings := make([][]observe.GPUReading, len(ids))
	lim := rate.NewLimiter(powerReadRate, powerReaders)
	forEach(ctx, len(ids), powerReaders, func(i int) {
		if lim.Wait(ctx) != nil {
			return
		}
		qctx, cancel := context.WithTimeout(ctx, callTimeout)
		defer cancel()
		stats, err := o.nomad.Nodes().Stats(ids[i], (&api.QueryOptions{Region: o.region}).WithContext(qctx))
		if err != nil {
			o.log.Debug("node stats", "node", ids[i], "error", err)
			return
		}
		p := observe.NodePower(stats)
		rs := observe.GPUReadings(stats)
		for j := range rs {
			rs[j].From = fromClientStats
		}
		got[i], readings[i] = &p, rs
	})
	power, gpus := map[string]observe.Power{}, map[string][]observe.GPUReading{}
	for i, p := range got {
		if p != nil {
			power[ids[i]], gpus[ids[i]] = *p, readings[i]
		}
	}
	return power, gpus
}

func hasGPU(n *api.Node) bool {
	if n.NodeResources == nil {
		return false
	}
	for _, d := range n.NodeResources.Devices {
		if d.Vendor == "nvidia" && d.Type == "gpu" {
			return true
		}
	}
	return false
}

// snapshot returns the snapshot as it is now. Its maps and lists are
// shared: read them, never change them.
func (o *observer) snapshot() snapshot {
	o.mu.RLock()
	defer o.mu.RUnlock()
	return o.snap
}

// nodesShow reports whether cond holds of the snapshot now, and a
// channel closed at the next change of the nodes (waitUntil).
func (o *observer) nodesShow(cond func(snapshot) bool) (bool, <-chan struct{}) {
	o.mu.RLock()
	defer o.mu.RUnlock()
	return cond(o.snap), o.changed
}

// notifyLocked wakes the waiters on the nodes; call it with mu held for
// writing after changing them.
func (o *observer) notifyLocked() {
	close(o.changed)
	o.changed = make(chan struct{})
}

// nodeID returns the ID of the node named name (or with that ID), or
// "" and every node's name.
func (o *observer) nodeID(name string) (string, []string) {
	var names []string
	for id, n := range o.snapshot().nodes {
		if n.Name == name || id == name {
			return id, nil
		}
		names = append(names, n.Name)
	}
	return "", names
}

// knownDomain reports whether some node is in d.
func (o *observer) knownDomain(d facility.Domain) bool {
	for _, k := range o.domainKeys() {
		if k == d.String() {
			return true
		}
	}
	return false
}

// domainKeys returns the domains (level=value) the nodes' meta names,
// sorted.
func (o *observer) domainKeys() []string {
	seen := map[string]bool{}
	var out []string
	for _, n := range o.snapshot().nodes {
		for lvl, key := range observe.LocationKeys {
			if v := n.Meta[key]; v != "" {
				k := lvl.String() + "=" + v
				if !seen[k] {
					seen[k] = true
					out = append(out, k)
				}
			}
		}
	}
	sort.Strings(out)
	return out
}
