package gateway

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"time"

	nomadapi "github.com/hashicorp/nomad/api"
)

// Nomad check statuses (Nomad's structs.CheckSuccess and friends).
const nomadCheckSuccess = "success"

// NomadSource discovers replicas among Nomad's own service registrations:
// /v1/services (blocking) for the services tagged llmgw, and for each
// /v1/service/<name> (blocking) for its registrations.
//
// Nomad's registrations carry no health, so each registration's allocation
// checks (/v1/client/allocation/<id>/checks) are read after every change
// and every CheckInterval: a registration is routed when every check of its
// service reports success. Nomad registers a service a moment before it
// reports its checks (as pending); a registration with no check results
// is routed only if its service declares no checks, which is read once per
// allocation from the allocation's job. While its allocation's checks cannot be read
// (an unreachable client, an ACL token without read-job on the client), it
// keeps its last verdict, routed at first, and the gateway's passive
// health (the circuit breaker) is what protects clients.
type NomadSource struct {
	Client *nomadapi.Client
	Logger *slog.Logger
	// Namespace is watched; "*" watches all. Default "default".
	Namespace string
	// CheckInterval is how often checks are read; 5s by default. It also
	// bounds each blocking query, so health follows within an interval.
	CheckInterval time.Duration
	// CheckTimeout bounds one allocation's check read; 2s by default.
	CheckTimeout time.Duration
}

// Run watches Nomad until ctx ends, publishing every change.
func (s *NomadSource) Run(ctx context.Context, publish func(Snapshot)) error {
	log := s.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("discovery", "nomad")
	ns := s.Namespace
	if ns == "" {
		ns = nomadapi.DefaultNamespace
	}
	interval := s.CheckInterval
	if interval <= 0 {
		interval = 5 * time.Second
	}
	checkTimeout := s.CheckTimeout
	if checkTimeout <= 0 {
		checkTimeout = 2 * time.Second
	}
	list := func(ctx context.Context, emit func(catalog)) {
		var idx uint64
		var bo backoff
		for ctx.Err() == nil {
			start := time.Now()
			q := (&nomadapi.QueryOptions{Namespace: ns, WaitIndex: idx, WaitTime: defaultBlockingWait}).WithContext(ctx)
			stubs, meta, err := s.Client.Services().List(q)
			if err != nil {
				if ctx.Err() == nil {
					log.Warn("list services", "error", err)
				}
				bo.wait(ctx)
				continue
			}
			bo.reset()
			cat := catalog{}
			for _, nsStubs := range stubs {
				for _, svc := range nsStubs.Services {
					if slices.Contains(svc.Tags, ServiceTag) {
						cat[nsStubs.Namespace+"/"+svc.ServiceName] = modelsFromTags(svc.Tags)
					}
				}
			}
			emit(cat)
			prev := idx
			idx = nextIndex(idx, meta.LastIndex)
			sleep(ctx, gap(start, prev, idx))
		}
	}
	watch := func(ctx context.Context, key string, emit func([]Instance, bool)) {
		svcNS, name, _ := strings.Cut(key, "/")
		healthy := map[string]bool{}  // allocation ID → last verdict
		declares := map[string]bool{} // allocation ID → its service declares checks
		var idx uint64
		var bo backoff
		for ctx.Err() == nil {
			start := time.Now()
			q := (&nomadapi.QueryOptions{Namespace: svcNS, WaitIndex: idx, WaitTime: interval}).WithContext(ctx)
			regs, meta, err := s.Client.Services().Get(name, q)
			if err != nil {
				if ctx.Err() == nil {
					log.Warn("registrations of service", "service", name, "namespace", svcNS, "error", err)
					emit(nil, false)
				}
				bo.wait(ctx)
				continue
			}
			bo.reset()
			live := map[string]bool{}
			insts := make([]Instance, 0, len(regs))
			for _, r := range regs {
				in, ok := instanceFromTags(r.ID, r.Address, r.Port, r.Tags, 0)
				if !ok {
					continue
				}
				live[r.AllocID] = true
				if s.allocHealthy(ctx, log, r.AllocID, name, checkTimeout, healthy, declares) {
					insts = append(insts, in)
				}
			}
			for id := range healthy {
				if !live[id] {
					delete(healthy, id)
					delete(declares, id)
				}
			}
			emit(insts, true)
			prev := idx
			idx = nextIndex(idx, meta.LastIndex)
			sleep(ctx, gap(start, prev, idx))
		}
	}
	return runDiscovery(ctx, log, list, watch, publish)
}

// allocHealthy reads allocID's checks for service and records the verdict
// in healthy: every check of the service succeeded, or it has none and
// declares none (declares caches that, per allocation). When they cannot
// be read the last verdict stands, true at first.
func (s *NomadSource) allocHealthy(ctx context.Context, log *slog.Logger, allocID, service string, timeout time.Duration, healthy, declares map[string]bool) bool {
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	keep := func(err error) bool {
		if ctx.Err() == nil {
			log.Debug("allocation checks", "alloc", allocID, "error", err)
		}
		v, seen := healthy[allocID]
		if !seen {
			v = true
			healthy[allocID] = v
		}
		return v
	}
	st, err := s.Client.Allocations().Checks(allocID, (&nomadapi.QueryOptions{}).WithContext(cctx))
	if err != nil {
		return keep(err)
	}
	ok, results := true, 0
	for _, c := range st {
		if c.Service == service {
			results++
			if c.Status != nomadCheckSuccess {
				ok = false
			}
		}
	}
	if results == 0 {
		// No results yet: a service with checks between its registration
		// and its first (pending) result, or a service without checks.
		d, known := declares[allocID]
		if !known {
			alloc, _, err := s.Client.Allocations().Info(allocID, (&nomadapi.QueryOptions{}).WithContext(cctx))
			if err != nil {
				return keep(err)
			}
			d = declaresChecks(alloc, service)
			declares[allocID] = d
		}
		ok = !d
	}
	if prev, seen := healthy[allocID]; seen && prev != ok {
		log.Info("replica health changed", "service", service, "alloc", allocID, "healthy", ok)
	}
	healthy[allocID] = ok
	return ok
}

// declaresChecks reports whether alloc's task group declares checks for
// the service named service, at group or task level.
func declaresChecks(alloc *nomadapi.Allocation, service string) bool {
	if alloc == nil || alloc.Job == nil {
		return false
	}
	withChecks := func(svcs []*nomadapi.Service) bool {
		for _, sv := range svcs {
			if sv != nil && sv.Name == service && len(sv.Checks) > 0 {
				return true
			}
		}
		return false
	}
	for _, tg := range alloc.Job.TaskGroups {
		if tg == nil || tg.Name == nil || *tg.Name != alloc.TaskGroup {
			continue
		}
		if withChecks(tg.Services) {
			return true
		}
		for _, t := range tg.Tasks {
			if t != nil && withChecks(t.Services) {
				return true
			}
		}
	}
	return false
}
