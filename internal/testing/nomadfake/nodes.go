package nomadfake

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/llmgw/llmgw/devicesapi"
)

// NodeSpec describes a client node for AddNode: a ready, eligible node in
// datacenter dc1 and node pool default. A zero ID is generated, a zero
// Name is "node-<n>".
type NodeSpec struct {
	ID, Name string
	// Meta is the client's static meta {} block; dynamic metadata set
	// through /v1/client/metadata overrides it.
	Meta    map[string]string
	Devices []DeviceGroup
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
	node    *api.Node
	static  map[string]string
	dynamic map[string]*string
	power   map[string]float64
	// stats are further device stats by device ID (SetDeviceStats), as a
	// device plugin reports them beside power_draw.
	stats map[string]map[string]*api.StatValue
}

// recomputeMeta is the client's merge: static meta, overridden by dynamic
// meta, where a nil dynamic value removes the key.
func (nr *nodeRecord) recomputeMeta() { nr.node.Meta = nr.mergedMeta() }

// mergedMeta is the client's merged meta: static, overridden by dynamic.
func (nr *nodeRecord) mergedMeta() map[string]string {
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
	return m
}

// AddNode registers a client node and returns its ID. It panics on a
// duplicate ID or name.
func (s *Server) AddNode(spec NodeSpec) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if spec.ID == "" {
		spec.ID = newID()
	}
	if spec.Name == "" {
		spec.Name = fmt.Sprintf("node-%d", len(s.nodes)+1)
	}
	if _, dup := s.nodes[spec.ID]; dup {
		panic(fmt.Sprintf("nomadfake: node %q added twice", spec.ID))
	}
	if _, dup := s.byName[spec.Name]; dup {
		panic(fmt.Sprintf("nomadfake: two nodes named %q", spec.Name))
	}
	idx := s.nextIndexLocked()
	now := s.now()
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
		Datacenter: "dc1",
		Name:       spec.Name,
		HTTPAddr:   "127.0.0.1:4646",
		Attributes: map[string]string{"nomad.version": "2.0.5", "unique.hostname": spec.Name},
		NodeResources: &api.NodeResources{
			Cpu:     api.NodeCpuResources{CpuShares: 64000, TotalCpuCores: 32},
			Memory:  api.NodeMemoryResources{MemoryMB: 512 * 1024},
			Devices: devs,
		},
		ReservedResources:     &api.NodeReservedResources{},
		NodePool:              "default",
		SchedulingEligibility: api.NodeSchedulingEligible,
		Status:                api.NodeStatusReady,
		StatusUpdatedAt:       now.Unix(),
		CreateIndex:           idx,
		ModifyIndex:           idx,
	}
	nr := &nodeRecord{node: n, static: maps.Clone(spec.Meta), dynamic: map[string]*string{}, power: map[string]float64{}}
	nr.recomputeMeta()
	s.nodes[n.ID] = nr
	s.byName[n.Name] = nr
	s.touchLocked(idx, tableNodes)
	s.markLocked(string(api.TopicNode), "NodeRegistration", n.ID, nr)
	s.notifyLocked()
	return n.ID
}

// modifyNodeLocked starts a write to a node.
func (s *Server) modifyNodeLocked(nr *nodeRecord) uint64 {
	idx := s.nextIndexLocked()
	nr.node.ModifyIndex = idx
	s.touchLocked(idx, tableNodes)
	s.markLocked(string(api.TopicNode), "NodeRegistration", nr.node.ID, nr)
	return idx
}

// SetNodeStatus changes a node's status: "ready", "down", "initializing"
// or "disconnected". A node going down loses its live allocations
// (ClientStatus lost, DesiredStatus stop), as Nomad's heartbeat expiry
// does; nothing replaces them (the controller's groups are pinned to the
// node). A disconnected node keeps its allocations as they are (Nomad
// shows them "unknown").
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
	s.markLocked(string(api.TopicNode), "NodeEvent", nodeID, nr) // Nomad's node status update
	nr.node.Status = status
	nr.node.StatusUpdatedAt = s.now().Unix()
	if status == api.NodeStatusDown {
		for _, a := range s.allocsByNode[nodeID] {
			if a.live() {
				s.setClientStatusLocked(a, api.AllocClientStatusLost, false, idx)
				// Nomad's node-update evaluation cannot place the slot
				// again: the group is pinned to this node.
				if rec := s.jobs[nsKey{a.Namespace, a.JobID}]; rec != nil {
					rec.unplaced = true
				}
				s.refreshJobStatusLocked(nsKey{a.Namespace, a.JobID}, idx)
			}
		}
	}
	s.notifyLocked()
	return nil
}

// SetDeviceHealth marks one device instance healthy or not, as a device
// plugin's fingerprint would. Allocations holding it keep it.
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
			s.modifyNodeLocked(nr)
			in.Healthy = healthy
			in.HealthDescription = ""
			if !healthy {
				in.HealthDescription = "unhealthy (set by nomadfake)"
			}
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
	nr, err := s.deviceNodeLocked(nodeID, deviceID)
	if err != nil {
		return err
	}
	nr.power[deviceID] = watts
	return nil
}

// SetDeviceStats sets further stats one device reports in the node's
// client stats, beside power_draw (what nomad-device-nvml adds: its power
// limits and cap state, devicesapi). Stats are not raft state: no index
// changes.
func (s *Server) SetDeviceStats(nodeID, deviceID string, stats map[string]*api.StatValue) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	nr, err := s.deviceNodeLocked(nodeID, deviceID)
	if err != nil {
		return err
	}
	if nr.stats == nil {
		nr.stats = map[string]map[string]*api.StatValue{}
	}
	nr.stats[deviceID] = stats
	return nil
}

// deviceNodeLocked returns the node that has the device, or why not.
func (s *Server) deviceNodeLocked(nodeID, deviceID string) (*nodeRecord, error) {
	nr := s.nodes[nodeID]
	if nr == nil {
		return nil, fmt.Errorf("nomadfake: unknown node %q", nodeID)
	}
	for _, g := range nr.node.NodeResources.Devices {
		for _, in := range g.Instances {
			if in.ID == deviceID {
				return nr, nil
			}
		}
	}
	return nil, fmt.Errorf("nomadfake: node %q has no device %q", nodeID, deviceID)
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

// nodeStub is Nomad's node list stub (without ?resources or ?os).
func nodeStub(n *api.Node) *api.NodeListStub {
	host, _, _ := strings.Cut(n.HTTPAddr, ":")
	return &api.NodeListStub{
		Address:               host,
		ID:                    n.ID,
		Datacenter:            n.Datacenter,
		Name:                  n.Name,
		NodePool:              n.NodePool,
		Version:               n.Attributes["nomad.version"],
		Drain:                 n.DrainStrategy != nil,
		SchedulingEligibility: n.SchedulingEligibility,
		Status:                n.Status,
		CreateIndex:           n.CreateIndex,
		ModifyIndex:           n.ModifyIndex,
	}
}

func (s *Server) handleNodeList(w http.ResponseWriter, r *http.Request) {
	s.query(w, r, func() (any, uint64, *httpError) {
		out := []*api.NodeListStub{}
		for _, nr := range s.nodes {
			out = append(out, nodeStub(nr.node))
		}
		sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
		return out, s.tableIndexLocked(tableNodes), nil
	})
}

func (s *Server) handleNode(w http.ResponseWriter, r *http.Request, rest string) {
	if strings.Contains(rest, "/") {
		notFaked(w, r) // allocations, drain, eligibility, purge
		return
	}
	s.query(w, r, func() (any, uint64, *httpError) {
		nr := s.nodes[rest]
		if nr == nil {
			return nil, s.missingIndexLocked(tableNodes), errorf(http.StatusNotFound, "node not found")
		}
		return nr.node, nr.node.ModifyIndex, nil
	})
}

// clientNodeLocked finds the node a client endpoint is forwarded to, with
// Nomad's answers when it cannot be reached.
func (s *Server) clientNodeLocked(id string, unknownCode int) (*nodeRecord, *httpError) {
	if id == "" {
		return nil, errorf(http.StatusBadRequest, "No local Node and node_id not provided")
	}
	nr := s.nodes[id]
	if nr == nil {
		return nil, errorf(unknownCode, "Unknown node %s", id)
	}
	if nr.node.Status == api.NodeStatusDown {
		return nil, errorf(http.StatusNotFound, "No path to node")
	}
	return nr, nil
}

// handleNodeMeta answers POST /v1/client/metadata (the read, GET, is not
// faked).
func (s *Server) handleNodeMeta(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
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
		writeClientJSON(w, nodeMetaResponse(nr))
		publish := func() {
			s.modifyNodeLocked(nr)
			nr.recomputeMeta()
			s.notifyLocked()
		}
		if s.nodeMetaDelay <= 0 {
			publish()
			return
		}
		time.AfterFunc(s.nodeMetaDelay, func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			publish()
		})
	default:
		notFaked(w, r)
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
	return &api.NodeMetaResponse{Meta: nr.mergedMeta(), Dynamic: dyn, Static: static}
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
			attrs := map[string]*api.StatValue{devicesapi.StatPowerDraw: pw}
			for k, v := range nr.stats[in.ID] {
				attrs[k] = v
			}
			gs.InstanceStats[in.ID] = &api.DeviceStats{
				Summary:   pw,
				Stats:     &api.StatObject{Attributes: attrs},
				Timestamp: now,
			}
		}
		hs.DeviceStats = append(hs.DeviceStats, gs)
	}
	return hs
}
