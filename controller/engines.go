package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"net/http"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/llmgw/llmgw/controller/observe"
	"github.com/llmgw/llmgw/controller/reconcile"
	"github.com/llmgw/llmgw/controller/render"
	"github.com/llmgw/llmgw/controllerapi"
	"github.com/llmgw/llmgw/engine"
	"github.com/llmgw/llmgw/enginemetrics"
	"github.com/llmgw/llmgw/facility"
	"github.com/llmgw/llmgw/internal/bounded"
)

// Engine metrics. Every Options.EngineMetricsInterval the controller
// scrapes the engine of each serving replica (its shard-0 allocation, whose
// service check passes: the shard that serves HTTP) on the allocation's
// http port, with the names of the engine its profile runs, and keeps per
// replica job the last reading and the last error (enginemetrics: requests
// waiting and running, KV-cache use, time to first token and tokens per
// second over the interval between two scrapes). They are in the read API
// (GET /v1/replicas, "engine"), in llmgw ctl replicas, and as llmgw_engine_*
// gauges; the autoscaler reads them from EngineMetrics (signals.go).
// Scrapes run at most engineReaders at a time, each within
// enginemetrics.DefaultTimeout; rates are measured by the wall clock, not
// Options.Now, since the engines count in real time.
const (
	defaultEngineMetricsInterval = 10 * time.Second
	engineReaders                = 8
)

// engineTarget is one replica engine to scrape.
type engineTarget struct {
	allocID, jobID, replica, model, engine, url string
	names                                       engine.Metrics
	sleep                                       *engine.SleepMode
	// adapters are the model's LoRA adapters in the catalog; listing
	// how the engine lists those it serves (nil: it has no list llmgw
	// reads).
	adapters []facility.Adapter
	listing  *engine.AdapterListing
	// runtime is the engine's API the controller loads the adapters
	// through, for a replica rendered to get them at runtime
	// (render.MetaAdapters); nil where the engine loaded them at start.
	runtime *engine.AdapterRuntime
}

// engineTargets lists the engines of serving replicas: running shard-0
// allocations of managed jobs whose check passes, whose profile's engine
// has known metrics and which have an http port.
func (c *Controller) engineTargets() []engineTarget {
	snap := c.obs.snapshot()
	jobs, allocs, checks := snap.jobs, snap.allocs, snap.checks
	cat, _ := c.files.get()
	engineOf := map[[2]string]string{} // model, profile -> engine
	adaptersOf := map[string][]facility.Adapter{}
	for _, m := range cat.Models {
		adaptersOf[m.Name] = m.Adapters
		for _, p := range m.Profiles {
			engineOf[[2]string{m.Name, p.Name}] = p.Engine
		}
	}
	type jobInfo struct {
		model, profile, replica string
		runtimeAdapters         bool
	}
	info := map[string]jobInfo{} // namespace/job ID
	for _, j := range jobs {
		if j.Meta[render.MetaManaged] == "true" {
			info[j.Namespace+"/"+j.ID] = jobInfo{j.Meta[render.MetaModel], j.Meta[render.MetaProfile], j.Meta[render.MetaReplica],
				j.Meta[render.MetaAdapters] == render.AdaptersRuntime}
		}
	}
	var out []engineTarget
	for _, a := range allocs {
		if a.TaskGroup != observe.CheckedGroup || !observe.Live(a) || a.ClientStatus != api.AllocClientStatusRunning || !checks[a.ID].Passing {
			continue
		}
		ns := a.Namespace
		if ns == "" {
			ns = api.DefaultNamespace
		}
		ji, ok := info[ns+"/"+a.JobID]
		if !ok {
			continue
		}
		eng := engineOf[[2]string{ji.model, ji.profile}]
		names, ok := engine.MetricsOf(eng)
		if !ok || !names.Known() {
			continue
		}
		addr, ok := httpAddr(a)
		if !ok {
			continue
		}
		t := engineTarget{allocID: a.ID, jobID: a.JobID, replica: ji.replica, model: ji.model,
			engine: eng, url: "http://" + addr, names: names}
		if d, ok := engine.Lookup(eng); ok {
			t.sleep = d.Sleep
			if t.adapters = adaptersOf[ji.model]; len(t.adapters) > 0 && d.Adapters != nil {
				t.listing = d.Adapters.Listed
				if ji.runtimeAdapters {
					t.runtime = d.Adapters.Runtime
				}
			}
		}
		out = append(out, t)
	}
	sort.Slice(out, func(i, k int) bool { return out[i].allocID < out[k].allocID })
	return out
}

// httpAddr is the host:port of an allocation's http port.
func httpAddr(a *api.AllocationListStub) (string, bool) {
	if a.AllocatedResources == nil {
		return "", false
	}
	for _, p := range a.AllocatedResources.Shared.Ports {
		if p.Label == render.PortHTTP && p.HostIP != "" && p.Value > 0 {
			return net.JoinHostPort(p.HostIP, strconv.Itoa(p.Value)), true
		}
	}
	return "", false
}

// watchEngineMetrics scrapes the serving replicas' engines until ctx ends.
func (c *Controller) watchEngineMetrics(ctx context.Context) {
	client := c.opts.EngineClient
	if client == nil {
		client = &http.Client{Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 1, IdleConnTimeout: time.Minute}}
	}
	trackers := map[string]*enginemetrics.Tracker{} // by allocation
	loads := map[string]*adapterLoads{}             // by allocation
	tick := time.NewTicker(c.opts.EngineMetricsInterval)
	defer tick.Stop()
	for {
		// The first round one interval after the start: by then the
		// allocation and check watches have read Nomad.
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		targets := c.engineTargets()
		out := make([]controllerapi.EngineMetrics, len(targets))
		last := c.engines.all()
		for i, t := range targets {
			out[i] = last[t.jobID] // keeps the last reading across an error
			if out[i].AllocID != t.allocID {
				out[i] = controllerapi.EngineMetrics{}
			}
		}
		keep := map[string]bool{}
		for _, t := range targets {
			keep[t.allocID] = true
			if trackers[t.allocID] == nil {
				trackers[t.allocID] = &enginemetrics.Tracker{}
			}
		}
		for id := range trackers {
			if !keep[id] {
				delete(trackers, id)
				delete(loads, id)
			}
		}
		for _, t := range targets {
			if t.runtime != nil && loads[t.allocID] == nil {
				loads[t.allocID] = &adapterLoads{}
			}
		}
		forEach(ctx, len(targets), engineReaders, func(i int) {
			t := targets[i]
			m := out[i]
			m.AllocID, m.URL, m.Engine = t.allocID, t.url+t.names.Path, t.engine
			s, err := enginemetrics.Scrape(ctx, client, t.url, t.names, time.Now)
			if err != nil {
				m.Error, m.ErrorAt = oneLine(err.Error()), time.Now()
			} else {
				r := trackers[t.allocID].Observe(s)
				m.Reading, m.Error, m.ErrorAt = &r, "", time.Time{}
			}
			m.Asleep = nil
			if t.sleep != nil {
				if asleep, err := readSleep(ctx, client, t.url, t.sleep); err == nil {
					m.Asleep = &asleep
				}
			}
			if len(t.adapters) > 0 {
				c.readAdapters(ctx, client, t, &m, loads[t.allocID])
			}
			out[i] = m
		})
		if ctx.Err() != nil {
			return
		}
		obs := make(map[string]controllerapi.EngineMetrics, len(targets))
		for i, t := range targets {
			obs[t.jobID] = out[i]
		}
		c.engines.set(obs)
		c.metrics.setEngines(targets, out)
	}
}

// EngineMetrics returns what the controller last read from each serving
// replica's engine, by replica job ID.
func (c *Controller) EngineMetrics() map[string]controllerapi.EngineMetrics {
	obs := c.engines.all()
	out := make(map[string]controllerapi.EngineMetrics, len(obs))
	maps.Copy(out, obs)
	return out
}

// engineReadings is what the last round of engine scrapes read, by
// replica job ID: written by watchEngineMetrics, read by the API and the
// signal rounds.
type engineReadings struct {
	// mu guards obs. The map is replaced whole by each round, never
	// changed in place, so that a reader may keep the one it got.
	mu  sync.Mutex
	obs map[string]controllerapi.EngineMetrics
}

// all returns the last round's readings; the caller must not change the
// map.
func (e *engineReadings) all() map[string]controllerapi.EngineMetrics {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.obs
}

// set replaces the readings with a round's.
func (e *engineReadings) set(obs map[string]controllerapi.EngineMetrics) {
	e.mu.Lock()
	e.obs = obs
	e.mu.Unlock()
}

// maxSleepStateBytes bounds the sleep state's answer (llama.cpp's /props
// is some kilobytes: the chat template is in it).
const maxSleepStateBytes = 1 << 20

// readSleep reads whether the engine at url sleeps, from its sleep state
// path, which does not wake it.
func readSleep(ctx context.Context, client *http.Client, url string, sm *engine.SleepMode) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, enginemetrics.DefaultTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+sm.StatePath, nil)
	if err != nil {
		return false, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return false, err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return false, fmt.Errorf("%s: %s", sm.StatePath, resp.Status)
	}
	b, err := bounded.ReadAll(resp.Body, maxSleepStateBytes)
	if err != nil {
		return false, err
	}
	var state map[string]json.RawMessage
	if err := json.Unmarshal(b, &state); err != nil {
		return false, fmt.Errorf("%s: %w", sm.StatePath, err)
	}
	var asleep bool
	if err := json.Unmarshal(state[sm.StateField], &asleep); err != nil {
		return false, fmt.Errorf("%s: %s: %w", sm.StatePath, sm.StateField, err)
	}
	return asleep, nil
}

// asleepSlots are the replica slots whose engine the last reading found
// asleep.
func (c *Controller) asleepSlots(jobs []reconcile.Job) map[string]bool {
	obs := c.engines.all()
	var out map[string]bool
	for _, j := range jobs {
		if m, ok := obs[j.ID]; ok && m.Asleep != nil && *m.Asleep {
			if out == nil {
				out = map[string]bool{}
			}
			out[j.Replica] = true
		}
	}
	return out
}
