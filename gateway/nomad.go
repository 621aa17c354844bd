package gateway

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	nomadapi "github.com/hashicorp/nomad/api"

	"github.com/llmgw/llmgw/gatewayapi"
	"github.com/llmgw/llmgw/internal/blockingquery"
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
//
// Check reads run concurrently, at most CheckParallelism at a time for the
// whole source (all services together), each cut off after CheckTimeout
// from when it got its slot. A service's view does not wait on a slow
// read: an allocation whose read is still in flight keeps its last verdict
// and is not read again until that read ends, and every other verdict is
// published as its read answers. Only a registration that has no verdict
// yet waits for its first read, and the service's first publish waits for
// all of them, so the gateway does not start on a partial view.
type NomadSource struct {
	Client *nomadapi.Client
	Logger *slog.Logger
	// Namespace is watched; "*" watches all. Default "default".
	Namespace string
	// CheckInterval is how often checks are read; 5s by default. It also
	// bounds each blocking query, so health follows within an interval.
	CheckInterval time.Duration
	// CheckTimeout bounds one allocation's check read (its checks, and
	// its job when those have no results), from when it got its slot; 2s
	// by default.
	CheckTimeout time.Duration
	// CheckParallelism bounds the check reads in flight at once, all
	// services together; 8 by default.
	CheckParallelism int
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
		interval = DefaultCheckInterval
	}
	checkTimeout := s.CheckTimeout
	if checkTimeout <= 0 {
		checkTimeout = DefaultCheckTimeout
	}
	parallelism := s.CheckParallelism
	if parallelism <= 0 {
		parallelism = DefaultCheckParallelism
	}
	slots := make(chan struct{}, parallelism) // one token per check read in flight
	list := func(ctx context.Context, emit func(catalog)) {
		w := blockingquery.Watch[[]*nomadapi.ServiceRegistrationListStub]{
			Backoff:   discoveryBackoff(),
			Unchanged: true,
			Fetch: blockingquery.Nomad(func(q *nomadapi.QueryOptions) ([]*nomadapi.ServiceRegistrationListStub, *nomadapi.QueryMeta, error) {
				q.Namespace = ns
				return s.Client.Services().List(q)
			}),
			OnAnswer: func(stubs []*nomadapi.ServiceRegistrationListStub, _ uint64) {
				cat := catalog{}
				for _, nsStubs := range stubs {
					for _, svc := range nsStubs.Services {
						if slices.Contains(svc.Tags, gatewayapi.ServiceTag) {
							cat[nsStubs.Namespace+"/"+svc.ServiceName] = modelsFromTags(svc.Tags)
						}
					}
				}
				emit(cat)
			},
			OnError: func(err error, _ time.Duration) { log.Warn("list services", "error", err) },
		}
		w.Run(ctx)
	}
	watch := func(ctx context.Context, key string, emit func([]Instance, bool)) {
		svcNS, name, _ := strings.Cut(key, "/")
		sw := &serviceWatch{
			src: s, log: log, ns: svcNS, name: name, interval: interval, checkTimeout: checkTimeout,
			slots: slots, emit: emit,
		}
		sw.run(ctx)
	}
	return runDiscovery(ctx, log, list, watch, publish)
}

// serviceWatch follows one service's registrations and their allocations'
// checks, and emits the routable instances whenever they change. Its maps
// are touched only by the goroutine in run; the registration poll and the
// check reads report to it on channels.
type serviceWatch struct {
	src                    *NomadSource
	log                    *slog.Logger
	ns, name               string
	interval, checkTimeout time.Duration
	slots                  chan struct{} // the source's check-read tokens
	emit                   func([]Instance, bool)

	wg      sync.WaitGroup
	fetches chan registrations
	results chan checkRead

	regs     []routable
	live     map[string]bool // allocation IDs of regs
	healthy  map[string]bool // allocation ID → last verdict
	declares map[string]bool // allocation ID → its service declares checks
	inFlight map[string]bool // allocation IDs being read

	published bool       // the first emit is done
	last      []Instance // what was emitted last
}

// registrations is one answer of the registration poll; ok is false
// when the poll failed.
type registrations struct {
	regs []*nomadapi.ServiceRegistration
	ok   bool
}

// routable is a registration that reads as a replica, with its
// allocation.
type routable struct {
	in    Instance
	alloc string
}

// run watches until ctx ends: a registration answer starts a check read
// for every allocation not being read, a check result updates its verdict,
// and after either the changes are emitted.
func (sw *serviceWatch) run(ctx context.Context) {
	defer sw.wg.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sw.fetches = make(chan registrations)
	sw.results = make(chan checkRead)
	sw.live, sw.healthy, sw.declares, sw.inFlight = map[string]bool{}, map[string]bool{}, map[string]bool{}, map[string]bool{}
	sw.wg.Go(func() { sw.poll(ctx) })
	for {
		select {
		case <-ctx.Done():
			return
		case f := <-sw.fetches:
			if !f.ok {
				sw.emit(nil, false)
				continue
			}
			sw.take(ctx, f.regs)
		case r := <-sw.results:
			sw.apply(ctx, r)
		drain: // take the reads that are done before publishing
			for {
				select {
				case r := <-sw.results:
					sw.apply(ctx, r)
				default:
					break drain
				}
			}
		}
		sw.publishChanges()
	}
}

// poll reads the service's registrations (blocking queries) in a
// goroutine of its own, so that run can take check results while a query
// blocks.
func (sw *serviceWatch) poll(ctx context.Context) {
	send := func(f registrations) {
		select {
		case sw.fetches <- f:
		case <-ctx.Done():
		}
	}
	w := blockingquery.Watch[[]*nomadapi.ServiceRegistration]{
		Wait:      sw.interval,
		Backoff:   discoveryBackoff(),
		Unchanged: true, // every answer rereads the checks
		Fetch: blockingquery.Nomad(func(q *nomadapi.QueryOptions) ([]*nomadapi.ServiceRegistration, *nomadapi.QueryMeta, error) {
			q.Namespace = sw.ns
			return sw.src.Client.Services().Get(sw.name, q)
		}),
		OnAnswer: func(regs []*nomadapi.ServiceRegistration, _ uint64) { send(registrations{regs: regs, ok: true}) },
		OnError: func(err error, _ time.Duration) {
			sw.log.Warn("registrations of service", "service", sw.name, "namespace", sw.ns, "error", err)
			send(registrations{})
		},
	}
	w.Run(ctx)
}

// take replaces the registrations, forgets the verdicts of allocations
// gone, and starts a read of every live allocation not being read.
func (sw *serviceWatch) take(ctx context.Context, regs []*nomadapi.ServiceRegistration) {
	sw.regs = sw.regs[:0]
	clear(sw.live)
	for _, r := range regs {
		in, ok := instanceFromTags(r.ID, r.Address, r.Port, r.Tags, 0)
		if !ok {
			continue
		}
		sw.regs = append(sw.regs, routable{in, r.AllocID})
		sw.live[r.AllocID] = true
	}
	for id := range sw.healthy {
		if !sw.live[id] {
			delete(sw.healthy, id)
			delete(sw.declares, id)
		}
	}
	for id := range sw.live {
		if !sw.inFlight[id] {
			sw.startRead(ctx, id)
		}
	}
}

// startRead reads allocID's checks in a goroutine once it has a slot.
func (sw *serviceWatch) startRead(ctx context.Context, allocID string) {
	sw.inFlight[allocID] = true
	d, known := sw.declares[allocID]
	sw.wg.Go(func() {
		select {
		case sw.slots <- struct{}{}:
		case <-ctx.Done():
			return
		}
		r := sw.src.readChecks(ctx, allocID, sw.name, sw.checkTimeout, d, known)
		<-sw.slots
		select {
		case sw.results <- r:
		case <-ctx.Done():
		}
	})
}

// apply takes a read's verdict; a read that failed keeps the last verdict
// (routed when there is none yet).
func (sw *serviceWatch) apply(ctx context.Context, r checkRead) {
	delete(sw.inFlight, r.alloc)
	if !sw.live[r.alloc] {
		return // deregistered while it was read
	}
	prev, seen := sw.healthy[r.alloc]
	ok := r.ok
	if r.err != nil {
		if ctx.Err() == nil {
			sw.log.Debug("allocation checks", "alloc", r.alloc, "error", r.err)
		}
		ok = prev || !seen
	} else if r.declKnown {
		sw.declares[r.alloc] = r.declares
	}
	if seen && prev != ok {
		sw.log.Info("replica health changed", "service", sw.name, "alloc", r.alloc, "healthy", ok)
	}
	sw.healthy[r.alloc] = ok
}

// publishChanges emits the healthy registrations when they differ from
// the last emit; the first emit waits until every registration has a
// verdict.
func (sw *serviceWatch) publishChanges() {
	insts := make([]Instance, 0, len(sw.regs))
	for _, r := range sw.regs {
		v, seen := sw.healthy[r.alloc]
		if !seen && !sw.published {
			return // the first publish has every verdict
		}
		if v {
			insts = append(insts, r.in)
		}
	}
	if sw.published && slices.Equal(insts, sw.last) {
		return
	}
	sw.published, sw.last = true, insts
	sw.emit(insts, true)
}

// checkRead is what one read of an allocation's checks found.
type checkRead struct {
	alloc string
	// err is why the checks could not be read; the rest is then unset.
	err error
	// ok is the verdict: every check of the service succeeded, or it has
	// none and declares none.
	ok bool
	// declares is whether the service declares checks, when declKnown.
	declares, declKnown bool
}

// readChecks reads allocID's checks for service, within timeout. When
// they have no results it needs to know whether the service declares
// checks: declares if known, else read from the allocation's job.
func (s *NomadSource) readChecks(ctx context.Context, allocID, service string, timeout time.Duration, declares, known bool) checkRead {
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	st, err := s.Client.Allocations().Checks(allocID, (&nomadapi.QueryOptions{}).WithContext(cctx))
	if err != nil {
		return checkRead{alloc: allocID, err: err}
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
	if results > 0 {
		return checkRead{alloc: allocID, ok: ok}
	}
	// No results yet: a service with checks between its registration
	// and its first (pending) result, or a service without checks.
	if !known {
		alloc, _, err := s.Client.Allocations().Info(allocID, (&nomadapi.QueryOptions{}).WithContext(cctx))
		if err != nil {
			return checkRead{alloc: allocID, err: err}
		}
		declares = declaresChecks(alloc, service)
	}
	return checkRead{alloc: allocID, ok: !declares, declares: declares, declKnown: true}
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
