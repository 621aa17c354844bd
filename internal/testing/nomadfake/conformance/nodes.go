package conformance

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/hashicorp/nomad/api"
)

// unknownID is an ID no node or allocation has.
const unknownID = "00000000-0000-4000-8000-000000000000"

// AllocationChecks: GET /v1/client/allocation/<id>/checks answers the
// nomad-provider checks of the allocation's group services, "success"
// while it runs healthy; none once it has ended; an unknown allocation is
// 404 "Unknown allocation".
func AllocationChecks(t *testing.T, tg *Target) {
	id := "conf-checks"
	tg.register(t, tg.job(id, tg.Nodes[0], 1, 0))
	a := tg.waitRunning(t, id, 1)[0]
	eventually(t, "the check passing", func() (bool, string) {
		cs, err := tg.Client.Allocations().Checks(a.ID, nil)
		if err != nil {
			return false, err.Error()
		}
		if len(cs) != 1 {
			return false, fmt.Sprintf("%d checks", len(cs))
		}
		for cid, c := range cs {
			if c.ID != cid || len(cid) != 64 || c.Check != "ready" || c.Service != id || c.Group != a.Name || c.Mode != "healthiness" {
				t.Fatalf("check %s: %+v; want a 64-digit ID, check ready, service %s, group %s, mode healthiness", cid, c, id, a.Name)
			}
			return c.Status == "success" && c.StatusCode == http.StatusOK, fmt.Sprintf("status %s %d", c.Status, c.StatusCode)
		}
		return false, ""
	})
	tg.stop(t, id)
	eventually(t, "no check results once the allocation ended", func() (bool, string) {
		cs, err := tg.Client.Allocations().Checks(a.ID, nil)
		if err != nil {
			return false, err.Error()
		}
		return len(cs) == 0, fmt.Sprintf("%d checks", len(cs))
	})
	_, err := tg.Client.Allocations().Checks(unknownID, nil)
	wantErr(t, "checks of an unknown allocation", err, http.StatusNotFound, "Unknown allocation")
}

// ServiceCatalog: a running allocation is registered under its group's
// nomad services on 127.0.0.1 and its port, with the service's tags; it is
// deregistered once stopped.
func ServiceCatalog(t *testing.T, tg *Target) {
	id := "conf-svc"
	tg.register(t, tg.job(id, tg.Nodes[0], 1, 0))
	a := tg.waitRunning(t, id, 1)[0]
	port := 0
	for _, p := range a.AllocatedResources.Shared.Ports {
		if p.Label == "http" {
			port = p.Value
		}
	}
	wantTags := []string{"conformance", "case=" + id}
	eventually(t, "the service registered", func() (bool, string) {
		regs, _, err := tg.Client.Services().Get(id, nil)
		if err != nil {
			return false, err.Error()
		}
		if len(regs) != 1 {
			return false, fmt.Sprintf("%d registrations", len(regs))
		}
		r := regs[0]
		if r.ServiceName != id || r.Namespace != api.DefaultNamespace || r.JobID != id || r.AllocID != a.ID ||
			r.NodeID != a.NodeID || r.Address != "127.0.0.1" || r.Port != port || !slices.Equal(r.Tags, wantTags) {
			t.Fatalf("registration %+v; want %s in default for allocation %s on node %s at 127.0.0.1:%d, tags %q",
				r, id, a.ID, a.NodeID, port, wantTags)
		}
		return true, ""
	})
	listed := func() []string {
		ls, _, err := tg.Client.Services().List(nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range ls {
			for _, s := range l.Services {
				if s.ServiceName == id {
					if l.Namespace != api.DefaultNamespace {
						t.Errorf("%s listed in namespace %q", id, l.Namespace)
					}
					return s.Tags
				}
			}
		}
		return nil
	}
	if got := listed(); !slices.Equal(got, wantTags) {
		t.Errorf("GET /v1/services: %s with tags %q, want %q", id, got, wantTags)
	}
	tg.stop(t, id)
	eventually(t, "the service deregistered", func() (bool, string) {
		regs, _, err := tg.Client.Services().Get(id, nil)
		if err != nil {
			return false, err.Error()
		}
		return len(regs) == 0 && listed() == nil, fmt.Sprintf("%d registrations", len(regs))
	})
}

// NodeListAndInfo: the node list's stubs carry no Meta; a node read
// carries its meta and answers its ModifyIndex as X-Nomad-Index.
func NodeListAndInfo(t *testing.T, tg *Target) {
	r := tg.raw(t, http.MethodGet, "/v1/nodes", "")
	var raw []map[string]any
	if err := json.Unmarshal([]byte(r.body), &raw); err != nil || r.code != http.StatusOK {
		t.Fatalf("GET /v1/nodes: %d %v", r.code, err)
	}
	for _, n := range raw {
		if m, ok := n["Meta"]; ok && m != nil {
			t.Errorf("GET /v1/nodes: stub %v carries Meta %v", n["Name"], m)
		}
	}
	stubs, _, err := tg.Client.Nodes().List(nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range tg.Nodes {
		i := slices.IndexFunc(stubs, func(s *api.NodeListStub) bool { return s.Name == name })
		if i < 0 {
			t.Fatalf("node %s not listed", name)
		}
		s := stubs[i]
		if s.Status != api.NodeStatusReady || s.SchedulingEligibility != api.NodeSchedulingEligible || s.Drain ||
			s.NodePool != "default" || s.Address != "127.0.0.1" {
			t.Errorf("stub of %s: %+v; want ready, eligible, not draining, pool default, address 127.0.0.1", name, s)
		}
		n, qm, err := tg.Client.Nodes().Info(s.ID, nil)
		if err != nil {
			t.Fatal(err)
		}
		if qm.LastIndex != n.ModifyIndex {
			t.Errorf("GET /v1/node/%s: X-Nomad-Index %d, want its ModifyIndex %d", s.ID, qm.LastIndex, n.ModifyIndex)
		}
		if n.Meta[StaticMetaKey] != StaticMetaValue || n.Name != name || n.Datacenter != s.Datacenter {
			t.Errorf("node %s: name %s, datacenter %s, meta %v", s.ID, n.Name, n.Datacenter, n.Meta)
		}
	}
}

// DynamicNodeMeta: POST /v1/client/metadata merges as the client does:
// dynamic meta overrides static, a nil value removes a dynamic key or
// masks a static one; keys must be dotted HCL identifiers; the node's
// Meta follows.
func DynamicNodeMeta(t *testing.T, tg *Target) {
	nodeID := tg.nodeID(t, tg.Nodes[0])
	apply := func(m map[string]*string) (*api.NodeMetaResponse, error) {
		return tg.Client.Nodes().Meta().Apply(&api.NodeMetaApplyRequest{NodeID: nodeID, Meta: m}, nil)
	}
	nodeMeta := func(what string, ok func(map[string]string) bool) {
		t.Helper()
		eventually(t, "node meta "+what, func() (bool, string) {
			n, _, err := tg.Client.Nodes().Info(nodeID, nil)
			if err != nil {
				return false, err.Error()
			}
			return ok(n.Meta), fmt.Sprint(n.Meta)
		})
	}
	const dyn = "conformance.dynamic"
	r, err := apply(map[string]*string{dyn: new("v1")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = apply(map[string]*string{dyn: nil, StaticMetaKey: new(StaticMetaValue)}) })
	if r.Meta[dyn] != "v1" || r.Dynamic[dyn] == nil || *r.Dynamic[dyn] != "v1" || r.Static[StaticMetaKey] != StaticMetaValue {
		t.Errorf("after setting %s: %+v", dyn, r)
	}
	nodeMeta(dyn+"=v1", func(m map[string]string) bool { return m[dyn] == "v1" })

	r, err = apply(map[string]*string{StaticMetaKey: nil})
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := r.Dynamic[StaticMetaKey]; !ok || v != nil {
		t.Errorf("masking static %s: Dynamic %v, want it there as null", StaticMetaKey, r.Dynamic)
	}
	if _, ok := r.Meta[StaticMetaKey]; ok || r.Static[StaticMetaKey] != StaticMetaValue {
		t.Errorf("masking static %s: Meta %v Static %v; want it gone from Meta, kept in Static", StaticMetaKey, r.Meta, r.Static)
	}
	nodeMeta(StaticMetaKey+" masked", func(m map[string]string) bool { _, ok := m[StaticMetaKey]; return !ok })

	r, err = apply(map[string]*string{dyn: nil})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := r.Meta[dyn]; ok {
		t.Errorf("removing %s: Meta %v", dyn, r.Meta)
	}
	if _, ok := r.Dynamic[dyn]; ok {
		t.Errorf("removing dynamic-only %s: Dynamic %v, want it gone", dyn, r.Dynamic)
	}
	nodeMeta(dyn+" removed", func(m map[string]string) bool { _, ok := m[dyn]; return !ok })

	_, err = apply(map[string]*string{"bad key": new("x")})
	wantErr(t, "a key with a space", err, http.StatusBadRequest, `"bad key" is invalid; metadata keys must be valid dotted hcl identifiers`)
	_, err = apply(map[string]*string{})
	wantErr(t, "no meta", err, http.StatusBadRequest, "missing required Meta object")
}

// ClientStatsDevices: GET /v1/client/stats?node_id= answers one device
// group per vendor/type/name with stats per instance, whose power_draw is
// in W over the group's power_limit; it sets no index header; an unknown
// node is 404 "Unknown node <id>".
func ClientStatsDevices(t *testing.T, tg *Target) {
	nodeID := tg.nodeID(t, tg.Nodes[0])
	g := tg.gpuGroup(t, nodeID)
	limit := g.Attributes["power_limit"]
	if limit == nil || limit.IntVal == nil || limit.Unit != "W" {
		t.Fatalf("device group attributes %v: want power_limit in W", g.Attributes)
	}
	eventually(t, "device stats of every GPU", func() (bool, string) {
		hs, err := tg.Client.Nodes().Stats(nodeID, nil)
		if err != nil {
			return false, err.Error()
		}
		var gs *api.DeviceGroupStats
		for _, d := range hs.DeviceStats {
			if d.Vendor == "nvidia" && d.Type == "gpu" && d.Name == tg.GPUName {
				if gs != nil {
					t.Fatalf("two stats groups for nvidia/gpu/%s", tg.GPUName)
				}
				gs = d
			}
		}
		if gs == nil {
			return false, fmt.Sprintf("%d device groups, none nvidia/gpu/%s", len(hs.DeviceStats), tg.GPUName)
		}
		for _, in := range g.Instances {
			s := gs.InstanceStats[in.ID]
			if s == nil || s.Stats == nil {
				return false, "no stats for " + in.ID
			}
			p := s.Stats.Attributes["power_draw"]
			if p == nil || p.FloatNumeratorVal == nil || p.FloatDenominatorVal == nil || p.Unit != "W" ||
				*p.FloatDenominatorVal != float64(*limit.IntVal) {
				t.Fatalf("%s power_draw %+v, want a value in W over %d", in.ID, p, *limit.IntVal)
			}
		}
		return true, ""
	})
	r := tg.raw(t, http.MethodGet, "/v1/client/stats?node_id="+nodeID, "")
	if r.code != http.StatusOK || r.header.Get("X-Nomad-Index") != "" {
		t.Errorf("GET /v1/client/stats: %d, X-Nomad-Index %q; want 200 and none", r.code, r.header.Get("X-Nomad-Index"))
	}
	r = tg.raw(t, http.MethodGet, "/v1/client/stats?node_id="+unknownID, "")
	if want := "Unknown node " + unknownID; r.code != http.StatusNotFound || !strings.Contains(r.body, want) {
		t.Errorf("stats of an unknown node: %d %q, want 404 %q", r.code, r.body, want)
	}
}

// NodeDownLosesAllocations: a node going down loses its allocations
// (client lost, desired stop); its client endpoints answer 404 "No path to
// node"; a job whose only slot was there reads running (Nomad 2.0.5 holds
// a blocked evaluation for the slot and does not show the job pending).
// It ends the node for good: it runs last.
func NodeDownLosesAllocations(t *testing.T, tg *Target) {
	id := "conf-down"
	node := tg.Nodes[1]
	nodeID := tg.nodeID(t, node)
	tg.register(t, tg.job(id, node, 1, 1))
	a := tg.waitRunning(t, id, 1)[0]
	tg.NodeDown(t, node)
	eventually(t, "the node down and its allocation lost", func() (bool, string) {
		n, _, err := tg.Client.Nodes().Info(nodeID, nil)
		if err != nil {
			return false, err.Error()
		}
		var st string
		for _, b := range tg.allocs(t, id) {
			if b.ID == a.ID {
				st = b.DesiredStatus + "/" + b.ClientStatus
			}
		}
		return n.Status == api.NodeStatusDown && st == "stop/lost", "node " + n.Status + ", allocation " + st
	})
	tg.waitJobStatus(t, id, "running")
	for _, path := range []string{"/v1/client/stats?node_id=" + nodeID, "/v1/client/allocation/" + a.ID + "/checks"} {
		r := tg.raw(t, http.MethodGet, path, "")
		if r.code != http.StatusNotFound || !strings.Contains(r.body, "No path to node") {
			t.Errorf("GET %s of a down node: %d %q, want 404 No path to node", path, r.code, r.body)
		}
	}
}
