package nomadfake_test

import (
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/llmgw/llmgw/internal/testing/nomadfake"
)

// A running allocation is registered under its group's nomad services;
// a stop deregisters it at once and, with WithShutdownDelay, completes it
// only once its shutdown_delay has passed on the fake's clock.
func TestServicesAndShutdownDelay(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	s, c := newFake(t, nomadfake.WithAutoRun(true), nomadfake.WithShutdownDelay(true), nomadfake.WithClock(func() time.Time { return now }))
	gpuNode(s, "n1", 8, nil)
	job := gpuJob("m-0", 2, 1)
	job.TaskGroups[0].ShutdownDelay = new(15 * time.Second)
	job.TaskGroups[0].Services[0].Tags = []string{"llmgw", "model=m"}
	mustRegister(t, c, job)
	gw := s.AddService(nomadfake.ServiceSpec{Name: "llmgw-gateway", Address: "127.0.0.1", Port: 8080})

	regs, meta, err := c.Services().Get("m-0", nil)
	if err != nil || len(regs) != 2 {
		t.Fatalf("registrations of m-0: %v %v", regs, err)
	}
	allocs := map[string]bool{}
	for _, a := range s.Allocations("m-0") {
		allocs[a.ID] = true
	}
	for _, r := range regs {
		port := 0
		for _, a := range s.Allocations("m-0") {
			if a.ID == r.AllocID {
				port = a.AllocatedResources.Shared.Ports[0].Value
			}
		}
		if !allocs[r.AllocID] || r.Address != "127.0.0.1" || r.Port != port || r.Port == 0 || r.JobID != "m-0" || r.Namespace != "default" {
			t.Errorf("registration %+v", r)
		}
	}
	list, _, err := c.Services().List(nil)
	if err != nil || len(list) != 1 || len(list[0].Services) != 2 || list[0].Services[0].ServiceName != "llmgw-gateway" ||
		list[0].Services[1].ServiceName != "m-0" || len(list[0].Services[1].Tags) != 2 {
		t.Errorf("service list: %+v %v", list, err)
	}
	if gws, _, err := c.Services().Get("llmgw-gateway", nil); err != nil || len(gws) != 1 || gws[0].ID != gw || gws[0].Port != 8080 {
		t.Errorf("the added service: %+v %v", gws, err)
	}

	// Stop: deregistered at once, still running until the delay passes.
	info, _, _ := c.Jobs().Info("m-0", nil)
	info.Stop = new(true)
	if _, _, err := c.Jobs().EnforceRegister(info, *info.JobModifyIndex, nil); err != nil {
		t.Fatal(err)
	}
	if regs, m2, err := c.Services().Get("m-0", nil); err != nil || len(regs) != 0 || m2.LastIndex <= meta.LastIndex {
		t.Errorf("registrations after the stop: %v (index %d, was %d) %v; want none, at a later index", regs, m2.LastIndex, meta.LastIndex, err)
	}
	for _, a := range s.Allocations("m-0") {
		if a.DesiredStatus != "stop" || a.ClientStatus != "running" {
			t.Errorf("alloc %s within its shutdown_delay: desired %s client %s, want stop/running", a.Name, a.DesiredStatus, a.ClientStatus)
		}
	}
	now = now.Add(14 * time.Second)
	s.Tick()
	if a := s.Allocations("m-0")[0]; a.ClientStatus != "running" {
		t.Errorf("14s into a 15s shutdown_delay: client %s", a.ClientStatus)
	}
	now = now.Add(time.Second)
	s.Tick()
	for _, a := range s.Allocations("m-0") {
		if a.ClientStatus != api.AllocClientStatusComplete {
			t.Errorf("alloc %s after its shutdown_delay: client %s, want complete", a.Name, a.ClientStatus)
		}
	}
}

// Without WithShutdownDelay a stop completes at once, as before.
func TestStopWithoutShutdownDelayOption(t *testing.T) {
	s, c := newFake(t, nomadfake.WithAutoRun(true))
	gpuNode(s, "n1", 8, nil)
	job := gpuJob("m-0", 1, 1)
	job.TaskGroups[0].ShutdownDelay = new(15 * time.Second)
	mustRegister(t, c, job)
	info, _, _ := c.Jobs().Info("m-0", nil)
	info.Stop = new(true)
	if _, _, err := c.Jobs().EnforceRegister(info, *info.JobModifyIndex, nil); err != nil {
		t.Fatal(err)
	}
	if a := s.Allocations("m-0")[0]; a.ClientStatus != api.AllocClientStatusComplete {
		t.Errorf("client %s, want complete", a.ClientStatus)
	}
}
