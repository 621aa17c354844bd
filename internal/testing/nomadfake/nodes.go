package nomadfake

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/nomad/api"
)

// DefaultDrivers are the task drivers a node offers when NodeSpec.Drivers
// is nil.
var DefaultDrivers = []string{"llmgw", "raw_exec", "exec", "docker", "mock_driver"}

// NodeSpec describes a client node for AddNode. Zero fields take defaults:
// a generated ID, name "node-<n>", datacenter "dc1", pool "default",
// status "ready", eligibility "eligible", DefaultDrivers.
type NodeSpec struct {
	ID, Name, Datacenter, NodePool, NodeClass string
	// Status is "ready", "down", "initializing" or "disconnected".
	Status string
	// Eligibility is "eligible" or "ineligible".
	Eligibility string
	// Drain starts the node draining (and so ineligible).
	Drain bool
	// Meta is the client's static meta {} block; dynamic metadata set
	// through /v1/client/metadata overrides it.
	Meta       map[string]string
	Attributes map[string]string
	Drivers    []string
	Devices    []DeviceGroup
}

// DeviceGroup is one fingerprinted device group of a node.
type DeviceGroup struct {
	Vendor, Type, Name string
	Instances          []DeviceInstance
	Attributes         map[string]*api.Attribute
}

// DeviceInstance is one device of a group.
type DeviceInstance struct {
	ID      string
	Healthy bool
}

// NvidiaGPUs is a device group as nomad-device-nvml fingerprints whole
// GPUs: nvidia/gpu/<name>, healthy instances ids, and the power_limit (W)
// and memory (MiB) attributes.
func NvidiaGPUs(name string, powerLimitW, memoryMiB int64, ids ...string) DeviceGroup {
	g := DeviceGroup{
		Vendor: "nvidia", Type: "gpu", Name: name,
		Attributes: map[string]*api.Attribute{
			"power_limit": {IntVal: new(powerLimitW), Unit: "W"},
			"memory":      {IntVal: new(memoryMiB), Unit: "MiB"},
		},
	}
	for _, id := range ids {
		g.Instances = append(g.Instances, DeviceInstance{ID: id, Healthy: true})
	}
	return g
}

type nodeRecord struct {
	node     *api.Node
	static   map[string]string
	dynamic  map[string]*string
	power    map[string]float64
	nextPort int
	// used and free (healthy instances not used) cache usedDevicesLocked
	// until usedDirty.
	used      map[string]bool
	free      int
	usedDirty bool
}

// recomputeMeta is the client's merge: static meta, overridden by dynamic
// meta, where a nil dynamic value removes the key.
func (nr *nodeRecord) recomputeMeta() {
	m := maps.Clone(nr.static)
	if m == nil {
		m = map[string]string{}
	}
	for k, v := range nr.dynamic {
		if v == nil {
			delete(m, k)
		} else {
			m[k] = *v
		}
	}
	nr.node.Meta = m
}

// AddNode registers a client node and returns its ID. Blocked evaluations
// are retried against it.
func (s *Server) AddNode(spec NodeSpec) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if spec.ID == "" {
		spec.ID = newID()
	}
	if _, dup := s.nodes[spec.ID]; dup {
		panic(fmt.Sprintf("nomadfake: node %q added twice", spec.ID))
	}
	if spec.Name == "" {
		spec.Name = fmt.Sprintf("node-%d", len(s.nodes)+1)
	}
	if spec.Datacenter == "" {
		spec.Datacenter = "dc1"
	}
	if spec.NodePool == "" {
		spec.NodePool = "default"
	}
	if spec.Status == "" {
		spec.Status = api.NodeStatusReady
	}
	if spec.Eligibility == "" {
		spec.Eligibility = api.NodeSchedulingEligible
	}
	if spec.Drivers == nil {
		spec.Drivers = DefaultDrivers
	}
	idx := s.nextIndexLocked()
	now := s.now()
	attrs := map[string]string{
		"kernel.name":               "linux",
		"os.name":                   "ubuntu",
		"cpu.arch":                  "amd64",
		"nomad.version":             "2.0.5",
		"unique.hostname":           spec.Name,
		"unique.network.ip-address": "127.0.0.1",
	}
	drivers := map[string]*api.DriverInfo{}
	for _, d := range spec.Drivers {
		attrs["driver."+d] = "1"
		drivers[d] = &api.DriverInfo{Attributes: map[string]string{}, Detected: true, Healthy: true,
			HealthDescription: "Healthy", UpdateTime: now}
	}
	maps.Copy(attrs, spec.Attributes)
	var devs []*api.NodeDeviceResource
	for _, g := range spec.Devices {
		d := &api.NodeDeviceResource{Vendor: g.Vendor, Type: g.Type, Name: g.Name, Attributes: g.Attributes}
		for _, in := range g.Instances {
			d.Instances = append(d.Instances, &api.NodeDevice{ID: in.ID, Healthy: in.Healthy})
		}
		devs = append(devs, d)
	}
	n := &api.Node{
		ID:         spec.ID,
		Datacenter: spec.Datacenter,
		Name:       spec.Name,
		HTTPAddr:   "127.0.0.1:4646",
		Attributes: attrs,
		NodeResources: &api.NodeResources{
			Cpu:            api.NodeCpuResources{CpuShares: 64000, TotalCpuCores: 32},
			Memory:         api.NodeMemoryResources{MemoryMB: 512 * 1024},
			Disk:           api.NodeDiskResources{DiskMB: 1 << 20},
			Devices:        devs,
			MinDynamicPort: 20000,
			MaxDynamicPort: 32000,
		},
		ReservedResources:     &api.NodeReservedResources{},
		NodeClass:             spec.NodeClass,
		NodePool:              spec.NodePool,
		SchedulingEligibility: spec.Eligibility,
		Status:                spec.Status,
		StatusUpdatedAt:       now.Unix(),
		Drivers:               drivers,
		CreateIndex:           idx,
		ModifyIndex:           idx,
	}
	nr := &nodeRecord{node: n, static: maps.Clone(spec.Meta), dynamic: map[string]*string{},
		power: map[string]float64{}, nextPort: 20000}
	nr.recomputeMeta()
	if spec.Drain {
		s.startDrainLocked(nr, &api.DrainSpec{Deadline: time.Hour}, nil)
	}
	s.nodes[n.ID] = nr
	s.nodeOrder = append(s.nodeOrder, nr)
	sort.SliceStable(s.nodeOrder, func(i, j int) bool {
		a, b := s.nodeOrder[i].node, s.nodeOrder[j].node
		if a.Name != b.Name {
			return a.Name < b.Name
		}
		return a.ID < b.ID
	})
	s.touchLocked(idx, tableNodes)
	s.capacityChanged = true
	s.unblockLocked(idx)
	s.notifyLocked()
	return n.ID
}

func (s *Server) startDrainLocked(nr *nodeRecord, spec *api.DrainSpec, meta map[string]string) {
	now := s.now()
	ds := &api.DrainStrategy{DrainSpec: *spec, StartedAt: now}
	if spec.Deadline > 0 {
		ds.ForceDeadline = now.Add(spec.Deadline)
	}
	nr.node.DrainStrategy = ds
	nr.node.Drain = true
	nr.node.SchedulingEligibility = api.NodeSchedulingIneligible
	nr.node.LastDrain = &api.DrainMetadata{StartedAt: now, UpdatedAt: now, Status: api.DrainStatusDraining, Meta: meta}
}

// modifyNodeLocked starts a write to a node.
func (s *Server) modifyNodeLocked(nr *nodeRecord) uint64 {
	idx := s.nextIndexLocked()
	nr.node.ModifyIndex = idx
	s.touchLocked(idx, tableNodes)
	s.capacityChanged = true
	return idx
}

// SetNodeStatus changes a node's status. A node going down loses its live
// allocations (ClientStatus lost, DesiredStatus stop), as Nomad's heartbeat
// expiry does; with AutoReschedule they are replaced at once.
func (s *Server) SetNodeStatus(nodeID, status string) error {
	switch status {
	case api.NodeStatusReady, api.NodeStatusDown, api.NodeStatusInit, api.NodeStatusDisconnected:
	default:
		return fmt.Errorf("nomadfake: unknown node status %q", status)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	nr := s.nodes[nodeID]
	if nr == nil {
		return fmt.Errorf("nomadfake: unknown node %q", nodeID)
	}
	idx := s.modifyNodeLocked(nr)
	nr.node.Status = status
	nr.node.StatusUpdatedAt = s.now().Unix()
	var lost []*api.Allocation
	if status == api.NodeStatusDown {
		for _, a := range s.allocsByNode[nodeID] {
			if !allocTerminal(a) {
				s.capacityChanged = true
				s.setClientStatusLocked(a, api.AllocClientStatusLost, false)
				s.modifyAllocLocked(a, idx)
				lost = append(lost, a)
			}
		}
	}
	s.afterAllocChangeLocked(lost, idx)
	s.notifyLocked()
	return nil
}

// SetDeviceHealth marks one device instance healthy or not, as a device
// plugin's fingerprint would.
func (s *Server) SetDeviceHealth(nodeID, deviceID string, healthy bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	nr := s.nodes[nodeID]
	if nr == nil {
		return fmt.Errorf("nomadfake: unknown node %q", nodeID)
	}
	for _, g := range nr.node.NodeResources.Devices {
		for _, in := range g.Instances {
			if in.ID != deviceID {
				continue
			}
			idx := s.modifyNodeLocked(nr)
			in.Healthy = healthy
			nr.usedDirty = true
			in.HealthDescription = ""
			if !healthy {
				in.HealthDescription = "unhealthy (set by nomadfake)"
			}
			s.unblockLocked(idx)
			s.notifyLocked()
			return nil
		}
	}
	return fmt.Errorf("nomadfake: node %q has no device %q", nodeID, deviceID)
}

// SetPowerDraw sets the power draw one device reports in the node's client
// stats (0 W until set). Stats are not raft state: no index changes.
func (s *Server) SetPowerDraw(nodeID, deviceID string, watts float64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	nr := s.nodes[nodeID]
	if nr == nil {
		return fmt.Errorf("nomadfake: unknown node %q", nodeID)
	}
	for _, g := range nr.node.NodeResources.Devices {
		for _, in := range g.Instances {
			if in.ID == deviceID {
				nr.power[deviceID] = watts
				return nil
			}
		}
	}
	return fmt.Errorf("nomadfake: node %q has no device %q", nodeID, deviceID)
}

// Node returns a copy of a node as the API shows it, or nil.
func (s *Server) Node(nodeID string) *api.Node {
	s.mu.Lock()
	defer s.mu.Unlock()
	nr := s.nodes[nodeID]
	if nr == nil {
		return nil
	}
	b, _ := json.Marshal(nr.node)
	var out api.Node
	_ = json.Unmarshal(b, &out)
	return &out
}

func nodeStub(n *api.Node, resources, os bool) *api.NodeListStub {
	host := n.HTTPAddr
	if i := strings.LastIndexByte(host, ':'); i >= 0 {
		host = host[:i]
	}
	st := &api.NodeListStub{
		Address:               host,
		ID:                    n.ID,
		Datacenter:            n.Datacenter,
		Name:                  n.Name,
		NodeClass:             n.NodeClass,
		NodePool:              n.NodePool,
		Version:               n.Attributes["nomad.version"],
		Drain:                 n.DrainStrategy != nil,
		SchedulingEligibility: n.SchedulingEligibility,
		Status:                n.Status,
		StatusDescription:     n.StatusDescription,
		Drivers:               n.Drivers,
		LastDrain:             n.LastDrain,
		CreateIndex:           n.CreateIndex,
		ModifyIndex:           n.ModifyIndex,
	}
	if resources {
		st.NodeResources = n.NodeResources
		st.ReservedResources = n.ReservedResources
	}
	if os {
		st.Attributes = map[string]string{"os.name": n.Attributes["os.name"]}
	}
	return st
}

func (s *Server) handleNodeList(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	prefix := q.Get("prefix")
	resources, _ := strconv.ParseBool(q.Get("resources"))
	os, _ := strconv.ParseBool(q.Get("os"))
	s.query(w, r, func() (any, uint64, *httpError) {
		out := []*api.NodeListStub{}
		for _, nr := range s.nodes {
			if strings.HasPrefix(nr.node.ID, prefix) {
				out = append(out, nodeStub(nr.node, resources, os))
			}
		}
		sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
		return out, s.tableIndexLocked(tableNodes), nil
	})
}

func (s *Server) handleNode(w http.ResponseWriter, r *http.Request, rest string) {
	if id, ok := strings.CutSuffix(rest, "/allocations"); ok {
		s.nodeAllocations(w, r, id)
		return
	}
	if id, ok := strings.CutSuffix(rest, "/drain"); ok {
		s.nodeDrain(w, r, id)
		return
	}
	if id, ok := strings.CutSuffix(rest, "/eligibility"); ok {
		s.nodeEligibility(w, r, id)
		return
	}
	if strings.Contains(rest, "/") {
		notFaked(w, r)
		return
	}
	s.query(w, r, func() (any, uint64, *httpError) {
		nr := s.nodes[rest]
		if nr == nil {
			return nil, s.tableIndexLocked(tableNodes), errorf(http.StatusNotFound, "node not found")
		}
		return nr.node, nr.node.ModifyIndex, nil
	})
}

func (s *Server) nodeDrain(w http.ResponseWriter, r *http.Request, id string) {
	if r.Method != http.MethodPut && r.Method != http.MethodPost {
		methodNotAllowed(w)
		return
	}
	var req api.NodeUpdateDrainRequest
	if err := decodeBody(r, &req); err != nil {
		writeError(w, err)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	nr := s.nodes[id]
	if nr == nil {
		writeError(w, errorf(http.StatusInternalServerError, "node not found"))
		return
	}
	idx := s.modifyNodeLocked(nr)
	if req.DrainSpec != nil {
		s.startDrainLocked(nr, req.DrainSpec, req.Meta)
	} else {
		nr.node.DrainStrategy = nil
		nr.node.Drain = false
		if nr.node.LastDrain != nil && nr.node.LastDrain.Status == api.DrainStatusDraining {
			nr.node.LastDrain.Status = api.DrainStatusCanceled
			nr.node.LastDrain.UpdatedAt = s.now()
		}
		if req.MarkEligible {
			nr.node.SchedulingEligibility = api.NodeSchedulingEligible
		}
		s.unblockLocked(idx)
	}
	s.notifyLocked()
	writeJSON(w, http.StatusOK, idx, map[string]any{"NodeModifyIndex": idx, "EvalIDs": []string{}, "EvalCreateIndex": 0, "Index": idx})
}

func (s *Server) nodeEligibility(w http.ResponseWriter, r *http.Request, id string) {
	if r.Method != http.MethodPut && r.Method != http.MethodPost {
		methodNotAllowed(w)
		return
	}
	var req api.NodeUpdateEligibilityRequest
	if err := decodeBody(r, &req); err != nil {
		writeError(w, err)
		return
	}
	if req.Eligibility != api.NodeSchedulingEligible && req.Eligibility != api.NodeSchedulingIneligible {
		writeError(w, errorf(http.StatusBadRequest, "invalid scheduling eligibility %q", req.Eligibility))
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	nr := s.nodes[id]
	if nr == nil {
		writeError(w, errorf(http.StatusInternalServerError, "node not found"))
		return
	}
	if nr.node.DrainStrategy != nil && req.Eligibility == api.NodeSchedulingEligible {
		writeError(w, errorf(http.StatusInternalServerError, "can not set node's scheduling eligibility to eligible while it is draining"))
		return
	}
	idx := s.modifyNodeLocked(nr)
	nr.node.SchedulingEligibility = req.Eligibility
	s.unblockLocked(idx)
	s.notifyLocked()
	writeJSON(w, http.StatusOK, idx, map[string]any{"NodeModifyIndex": idx, "EvalIDs": []string{}, "EvalCreateIndex": 0, "Index": idx})
}

// clientNodeLocked finds the node a client endpoint is forwarded to, with
// Nomad's answers when it cannot be reached.
func (s *Server) clientNodeLocked(id string, unknownCode int) (*nodeRecord, *httpError) {
	if id == "" {
		return nil, errorf(http.StatusBadRequest, "No local Node and node_id not provided")
	}
	nr := s.nodes[id]
	if nr == nil {
		return nil, errorf(unknownCode, "Unknown node %q", id)
	}
	if nr.node.Status == api.NodeStatusDown {
		return nil, errorf(http.StatusNotFound, "No path to node")
	}
	return nr, nil
}

func (s *Server) handleNodeMeta(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodGet:
		s.mu.Lock()
		defer s.mu.Unlock()
		nr, err := s.clientNodeLocked(r.URL.Query().Get("node_id"), http.StatusInternalServerError)
		if err != nil {
			writeError(w, err)
			return
		}
		writeClientJSON(w, nodeMetaResponse(nr))
	case http.MethodPost:
		var req api.NodeMetaApplyRequest
		if err := decodeBody(r, &req); err != nil {
			writeError(w, err)
			return
		}
		if id := r.URL.Query().Get("node_id"); id != "" {
			req.NodeID = id
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		nr, err := s.clientNodeLocked(req.NodeID, http.StatusInternalServerError)
		if err != nil {
			writeError(w, err)
			return
		}
		if err := validateMetaKeys(req.Meta); err != nil {
			writeError(w, err)
			return
		}
		for k, v := range req.Meta {
			if v == nil {
				if _, static := nr.static[k]; !static {
					delete(nr.dynamic, k)
					continue
				}
				nr.dynamic[k] = nil
				continue
			}
			nr.dynamic[k] = new(*v)
		}
		idx := s.modifyNodeLocked(nr)
		nr.recomputeMeta()
		s.unblockLocked(idx)
		s.notifyLocked()
		writeClientJSON(w, nodeMetaResponse(nr))
	default:
		methodNotAllowed(w)
	}
}

func hclIdent(s string) bool {
	if s == "" {
		return false
	}
	for i, c := range s {
		letter := c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c > 127
		digitOrDash := c == '-' || (c >= '0' && c <= '9')
		if !letter && (i == 0 || !digitOrDash) {
			return false
		}
	}
	return true
}

// validateMetaKeys is Nomad's NodeMetaApplyRequest.Validate.
func validateMetaKeys(m map[string]*string) *httpError {
	if len(m) == 0 {
		return errorf(http.StatusBadRequest, "missing required Meta object")
	}
	for k := range m {
		if k == "" {
			return errorf(http.StatusBadRequest, "metadata keys must not be empty")
		}
		for _, part := range strings.Split(k, ".") {
			if !hclIdent(part) {
				return errorf(http.StatusBadRequest, "%q is invalid; metadata keys must be valid dotted hcl identifiers", k)
			}
		}
	}
	return nil
}

func nodeMetaResponse(nr *nodeRecord) *api.NodeMetaResponse {
	dyn := map[string]*string{}
	for k, v := range nr.dynamic {
		if v != nil {
			v = new(*v)
		}
		dyn[k] = v
	}
	static := maps.Clone(nr.static)
	if static == nil {
		static = map[string]string{}
	}
	return &api.NodeMetaResponse{Meta: maps.Clone(nr.node.Meta), Dynamic: dyn, Static: static}
}

func (s *Server) handleClientStats(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		methodNotAllowed(w)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	nr, err := s.clientNodeLocked(r.URL.Query().Get("node_id"), http.StatusNotFound)
	if err != nil {
		writeError(w, err)
		return
	}
	writeClientJSON(w, s.hostStatsLocked(nr))
}

func (s *Server) hostStatsLocked(nr *nodeRecord) *api.HostStats {
	now := s.now()
	n := nr.node
	total := uint64(n.NodeResources.Memory.MemoryMB) << 20
	hs := &api.HostStats{
		Memory:      &api.HostMemoryStats{Total: total, Available: total, Free: total},
		CPU:         []*api.HostCPUStats{{CPU: "cpu0", Idle: 100}},
		DeviceStats: []*api.DeviceGroupStats{},
		Uptime:      3600,
	}
	for _, g := range n.NodeResources.Devices {
		gs := &api.DeviceGroupStats{Vendor: g.Vendor, Type: g.Type, Name: g.Name, InstanceStats: map[string]*api.DeviceStats{}}
		var limit *float64
		if a := g.Attributes["power_limit"]; a != nil && a.IntVal != nil {
			limit = new(float64(*a.IntVal))
		}
		for _, in := range g.Instances {
			pw := &api.StatValue{FloatNumeratorVal: new(nr.power[in.ID]), Unit: "W", Desc: "Power draw"}
			if limit != nil {
				pw.FloatDenominatorVal = new(*limit)
				pw.Desc = "Power draw of enforced power limit"
			}
			gs.InstanceStats[in.ID] = &api.DeviceStats{
				Summary:   pw,
				Stats:     &api.StatObject{Attributes: map[string]*api.StatValue{"power_draw": pw}},
				Timestamp: now,
			}
		}
		hs.DeviceStats = append(hs.DeviceStats, gs)
	}
	return hs
}
