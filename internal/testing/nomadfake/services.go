package nomadfake

import (
	"fmt"
	"net/http"
	"sort"
	"time"

	"github.com/hashicorp/nomad/api"
)

// The service catalog (Nomad-provider services) and shutdown_delay.
//
// A running allocation (desired run, client running) is registered under
// each of its group's nomad-provider services, on the address and port of
// the service's port label (127.0.0.1 and the allocation's port), with the
// service's tags, as a Nomad client registers it once the allocation's
// tasks start. The registration goes when the server stops the allocation
// (desired stop), before the tasks do: Nomad's client deregisters a
// group's services first and only then waits the group's shutdown_delay
// and signals the tasks. With WithShutdownDelay a stopped running
// allocation keeps running, deregistered, until the fake's clock passes
// its shutdown_delay (Tick, or any request, completes it); without it the
// allocation completes at once, as before. AddService registers a service
// no job of the fake runs (a gateway run elsewhere). e2e/autoscale_test.go
// asserts the same order against a real Nomad.

// tableServices is the service registrations' table.
const tableServices = "service_registrations"

// WithShutdownDelay makes a stopped running allocation whose group has a
// shutdown_delay stay running for that long on the fake's clock, its
// services deregistered, before it completes.
func WithShutdownDelay(on bool) Option {
	return func(s *Server) { s.shutdownDelay = on }
}

// ServiceSpec is a registration AddService adds.
type ServiceSpec struct {
	Namespace, Name, Address string
	Port                     int
	Tags                     []string
}

// AddService registers a service in the fake's catalog, as a Nomad client
// would for an allocation the fake does not run, and returns its ID.
func (s *Server) AddService(spec ServiceSpec) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	ns := spec.Namespace
	if ns == "" {
		ns = api.DefaultNamespace
	}
	idx := s.nextIndexLocked()
	r := &api.ServiceRegistration{
		ID: fmt.Sprintf("_nomad-test-%s-%d", spec.Name, idx), ServiceName: spec.Name, Namespace: ns,
		Datacenter: "dc1", Tags: append([]string(nil), spec.Tags...), Address: spec.Address, Port: spec.Port,
		CreateIndex: idx, ModifyIndex: idx,
	}
	s.extraServices = append(s.extraServices, r)
	s.touchLocked(idx, tableServices)
	s.notifyLocked()
	return r.ID
}

// registrationsLocked lists every registration, in creation order.
func (s *Server) registrationsLocked() []*api.ServiceRegistration {
	var out []*api.ServiceRegistration
	for _, a := range s.sortedAllocsLocked(func(a *allocRecord) bool {
		return a.DesiredStatus == api.AllocDesiredStatusRun && a.ClientStatus == api.AllocClientStatusRunning
	}) {
		tg := a.Job.LookupTaskGroup(a.TaskGroup)
		if tg == nil {
			continue
		}
		for _, svc := range tg.Services {
			if svc.Provider != "nomad" {
				continue
			}
			port := 0
			if a.AllocatedResources != nil {
				for _, p := range a.AllocatedResources.Shared.Ports {
					if p.Label == svc.PortLabel {
						port = p.Value
					}
				}
			}
			out = append(out, &api.ServiceRegistration{
				ID:          fmt.Sprintf("_nomad-task-%s-group-%s-%s-%s", a.ID, a.TaskGroup, svc.Name, svc.PortLabel),
				ServiceName: svc.Name, Namespace: a.Namespace, NodeID: a.NodeID, Datacenter: "dc1",
				JobID: a.JobID, AllocID: a.ID, Tags: append([]string(nil), svc.Tags...), Address: "127.0.0.1", Port: port,
				CreateIndex: a.CreateIndex, ModifyIndex: a.CreateIndex,
			})
		}
	}
	return append(out, s.extraServices...)
}

func (s *Server) handleServiceList(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		methodNotAllowed(w)
		return
	}
	ns := namespace(r)
	s.query(w, r, func() (any, uint64, *httpError) {
		byNS := map[string]map[string][]string{}
		for _, reg := range s.registrationsLocked() {
			if !nsMatches(ns, reg.Namespace) {
				continue
			}
			if byNS[reg.Namespace] == nil {
				byNS[reg.Namespace] = map[string][]string{}
			}
			tags := byNS[reg.Namespace][reg.ServiceName]
			for _, t := range reg.Tags {
				if !contains(tags, t) {
					tags = append(tags, t)
				}
			}
			byNS[reg.Namespace][reg.ServiceName] = tags
		}
		out := []*api.ServiceRegistrationListStub{}
		for _, n := range sortedMapKeys(byNS) {
			stub := &api.ServiceRegistrationListStub{Namespace: n}
			for _, name := range sortedMapKeys(byNS[n]) {
				stub.Services = append(stub.Services, &api.ServiceRegistrationStub{ServiceName: name, Tags: byNS[n][name]})
			}
			out = append(out, stub)
		}
		return out, s.tableIndexLocked(tableServices), nil
	})
}

func (s *Server) handleService(w http.ResponseWriter, r *http.Request, name string) {
	if r.Method != http.MethodGet {
		methodNotAllowed(w)
		return
	}
	ns := namespace(r)
	s.query(w, r, func() (any, uint64, *httpError) {
		out := []*api.ServiceRegistration{}
		for _, reg := range s.registrationsLocked() {
			if reg.ServiceName == name && nsMatches(ns, reg.Namespace) {
				out = append(out, reg)
			}
		}
		return out, s.tableIndexLocked(tableServices), nil
	})
}

// sweepStopsLocked completes the stopping allocations whose shutdown_delay
// has passed.
func (s *Server) sweepStopsLocked() {
	if len(s.stopping) == 0 {
		return
	}
	now := s.now()
	var idx uint64
	for id, a := range s.stopping {
		if a.stopAt.IsZero() {
			delete(s.stopping, id)
			continue
		}
		if now.Before(a.stopAt) || a.ClientStatus != api.AllocClientStatusRunning {
			continue
		}
		delete(s.stopping, id)
		if idx == 0 {
			idx = s.nextIndexLocked()
		}
		a.ClientStatus, a.stopAt = api.AllocClientStatusComplete, time.Time{}
		s.modifyAllocLocked(a, idx)
	}
	if idx != 0 {
		for k := range s.jobs {
			s.refreshJobStatusLocked(k, idx)
		}
		s.notifyLocked()
	}
}

// shutdownDelayOf is the shutdown_delay of a's group, 0 without one.
func shutdownDelayOf(a *allocRecord) time.Duration {
	if tg := a.Job.LookupTaskGroup(a.TaskGroup); tg != nil && tg.ShutdownDelay != nil {
		return *tg.ShutdownDelay
	}
	return 0
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

func sortedMapKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
