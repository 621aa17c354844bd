package controller

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"time"

	consulapi "github.com/hashicorp/consul/api"
	"github.com/hashicorp/nomad/api"

	"github.com/llmgw/llmgw/controller/observe"
	"github.com/llmgw/llmgw/controller/render"
)

// Health reading. A replica serves when its shard-0 allocation's service
// check passes, as read from where the check runs: Nomad's client
// (/v1/client/allocation/<id>/checks) for service_provider "nomad", or
// Consul's health for "consul". Deployment health is not used: Nomad sets
// it only for allocations a deployment placed, and a replacement placed
// outside one (a reschedule, a blocked evaluation that found room) would
// never serve.
//
// An allocation not serving yet is read every second, one serving every
// check interval (Settings.CheckInterval), or less often in a large fleet:
// the serving ones are re-read at healthSteadyRate reads a second at most
// in all (2,500 serving replicas: each every 100 s instead of 10 s). Nomad
// offers nothing better: check results live on each client, read one
// allocation at a time (/v1/client/allocation/<id>/checks, forwarded by
// the servers), and no event carries them; an allocation that stops
// running, is restarted or fails reaches the controller through the
// allocation events at once, so the bound delays only the news of a
// running engine whose check starts failing. At most healthReaders reads
// run at a time, each bounded by healthTimeout; the first round, before
// the first pass, reads every serving allocation once. A read that fails
// leaves the allocation "health unreadable": not serving.
const (
	healthReaders    = 16
	healthTimeout    = 5 * time.Second
	healthTick       = time.Second
	healthSteadyRate = 25 // re-reads of serving allocations a second, at most
)

// servingEvery is how often each of n serving allocations is re-read:
// every check interval, or n/healthSteadyRate seconds when that is longer.
func servingEvery(every time.Duration, n int) time.Duration {
	return max(every, time.Duration(n)*time.Second/healthSteadyRate)
}

// nomadCheckSuccess is Nomad's structs.CheckSuccess.
const nomadCheckSuccess = "success"

type healthEntry struct {
	check observe.Check
	next  time.Time // when to read it again
}

// checkTarget is an allocation whose checks decide whether its replica
// serves, with its service's name and its namespace.
type checkTarget struct {
	allocID, service, namespace string
}

// checkTargets lists the running shard-0 allocations of the managed jobs.
func (o *observer) checkTargets() []checkTarget {
	o.mu.RLock()
	jobs, allocs := o.snap.jobs, o.snap.allocs
	o.mu.RUnlock()
	service := map[string]string{} // job ID -> service name
	for _, j := range jobs {
		if j.Meta[render.MetaManaged] == "true" && j.Meta[render.MetaModel] != "" {
			service[j.Namespace+"/"+j.ID] = render.ServiceName(j.Meta[render.MetaModel])
		}
	}
	var out []checkTarget
	for _, a := range allocs {
		if a.TaskGroup != observe.CheckedGroup || !observe.Live(a) || a.ClientStatus != api.AllocClientStatusRunning {
			continue
		}
		ns := a.Namespace
		if ns == "" {
			ns = api.DefaultNamespace
		}
		svc, ok := service[ns+"/"+a.JobID]
		if !ok {
			continue
		}
		out = append(out, checkTarget{allocID: a.ID, service: svc, namespace: ns})
	}
	sort.Slice(out, func(i, k int) bool { return out[i].allocID < out[k].allocID })
	return out
}

// watchHealth keeps snap.checks current until ctx ends.
func (o *observer) watchHealth(ctx context.Context) {
	entries := map[string]*healthEntry{}
	every := o.checkInterval
	if every <= 0 {
		every = render.DefaultCheckInterval
	}
	tick := time.NewTicker(healthTick)
	defer tick.Stop()
	for {
		o.mu.RLock()
		ready := o.snap.allocSynced && o.snap.jobsSynced
		o.mu.RUnlock()
		if ready {
			targets := o.checkTargets()
			now := time.Now() // the reads' schedule: wall time
			var due []checkTarget
			keep := map[string]bool{}
			for _, t := range targets {
				keep[t.allocID] = true
				if e := entries[t.allocID]; e == nil || !now.Before(e.next) {
					due = append(due, t)
				}
			}
			changed := false
			for id := range entries {
				if !keep[id] {
					delete(entries, id)
					changed = true
				}
			}
			if len(due) > 0 {
				// Every running shard-0 allocation is one to keep
				// re-reading once it serves.
				serving := len(targets)
				for id, chk := range o.readHealth(ctx, due) {
					e := entries[id]
					if e == nil {
						e = &healthEntry{}
						entries[id] = e
						changed = true
					}
					if e.check != chk {
						changed = true
					}
					e.check = chk
					e.next = now.Add(healthTick)
					if chk.Read && chk.Passing {
						e.next = now.Add(every)
						if period := servingEvery(every, serving); period > every {
							// Spread around the period (its mean), so that
							// the re-reads do not come back in one round.
							e.next = now.Add(period/2 + time.Duration(rand.Int64N(int64(period))))
						}
					}
				}
			}
			if ctx.Err() != nil {
				return
			}
			o.mu.Lock()
			first := !o.snap.checksSynced
			if changed || first {
				checks := make(map[string]observe.Check, len(entries))
				for id, e := range entries {
					checks[id] = e.check
				}
				o.snap.checks, o.snap.checksSynced = checks, true
			}
			o.mu.Unlock()
			if changed || first {
				o.kick()
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-o.healthTrigger:
		}
	}
}

// readHealth reads the checks of targets, a few at a time.
func (o *observer) readHealth(ctx context.Context, targets []checkTarget) map[string]observe.Check {
	if o.serviceProvider == render.ProviderConsul {
		return o.readConsulHealth(ctx, targets)
	}
	out := make([]observe.Check, len(targets))
	forEach(ctx, len(targets), healthReaders, func(i int) { out[i] = o.readNomadChecks(ctx, targets[i]) })
	m := make(map[string]observe.Check, len(targets))
	for i, t := range targets {
		m[t.allocID] = out[i]
	}
	return m
}

func (o *observer) readNomadChecks(ctx context.Context, t checkTarget) observe.Check {
	cctx, cancel := context.WithTimeout(ctx, healthTimeout)
	defer cancel()
	q := &api.QueryOptions{Namespace: t.namespace, Region: o.region}
	st, err := o.nomad.Allocations().Checks(t.allocID, q.WithContext(cctx))
	if err != nil {
		return observe.Check{Detail: oneLine(err.Error())}
	}
	return nomadVerdict(st, t.service)
}

// nomadVerdict folds an allocation's check results for service.
func nomadVerdict(st api.AllocCheckStatuses, service string) observe.Check {
	ids := make([]string, 0, len(st))
	for id := range st {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	results := 0
	for _, id := range ids {
		r := st[id]
		if r.Service != service {
			continue
		}
		results++
		if r.Status != nomadCheckSuccess {
			d := fmt.Sprintf("check %s: %s", r.Check, r.Status)
			if r.StatusCode != 0 {
				d += fmt.Sprintf(" (HTTP %d)", r.StatusCode)
			}
			return observe.Check{Read: true, Detail: d}
		}
	}
	if results == 0 {
		return observe.Check{Read: true, Detail: "no check result yet"}
	}
	return observe.Check{Read: true, Passing: true}
}

// readConsulHealth reads, per service, Consul's health of every instance
// and picks the targets' by the service IDs Nomad gives them in Consul
// ("_nomad-task-<alloc ID>-…").
func (o *observer) readConsulHealth(ctx context.Context, targets []checkTarget) map[string]observe.Check {
	out := make(map[string]observe.Check, len(targets))
	if o.consul == nil {
		for _, t := range targets {
			out[t.allocID] = observe.Check{Detail: "service_provider is consul but no Consul client is configured"}
		}
		return out
	}
	byService := map[string][]checkTarget{}
	for _, t := range targets {
		byService[t.service] = append(byService[t.service], t)
	}
	names := make([]string, 0, len(byService))
	for n := range byService {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		cctx, cancel := context.WithTimeout(ctx, healthTimeout)
		entries, _, err := o.consul.Health().Service(name, "", false, (&consulapi.QueryOptions{}).WithContext(cctx))
		cancel()
		for _, t := range byService[name] {
			if err != nil {
				out[t.allocID] = observe.Check{Detail: "consul: " + oneLine(err.Error())}
				continue
			}
			out[t.allocID] = consulVerdict(entries, t.allocID)
		}
	}
	return out
}

// consulVerdict is the health of the Consul instance of allocID's service.
func consulVerdict(entries []*consulapi.ServiceEntry, allocID string) observe.Check {
	prefix := "_nomad-task-" + allocID + "-"
	for _, e := range entries {
		if e.Service == nil || !strings.HasPrefix(e.Service.ID, prefix) {
			continue
		}
		switch st := e.Checks.AggregatedStatus(); st {
		case consulapi.HealthPassing:
			if len(e.Checks) == 0 {
				return observe.Check{Read: true, Detail: "no check result yet"}
			}
			return observe.Check{Read: true, Passing: true}
		default:
			return observe.Check{Read: true, Detail: "consul health: " + st}
		}
	}
	return observe.Check{Read: true, Detail: "not registered in Consul yet"}
}

func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}
