package devices

import (
	"context"
	"errors"
	"fmt"
	"os"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	hclog "github.com/hashicorp/go-hclog"
	"google.golang.org/protobuf/proto"

	"github.com/llmgw/llmgw/internal/blockingquery"
	"github.com/llmgw/llmgw/internal/nvmlseam"

	"github.com/llmgw/llmgw/nomadplugin/pb/devicepb"
	"github.com/llmgw/llmgw/nomadplugin/pb/structspb"
)

// Vendor and device type of every group this plugin reports, so jobs can ask
// for device "nvidia/gpu" or "nvidia/gpu/<product>".
const (
	Vendor     = "nvidia"
	DeviceType = "gpu"
)

// healthEvents are the NVML events that make a device unhealthy.
const healthEvents = uint64(nvml.EventTypeXidCriticalError | nvml.EventTypeDoubleBitEccError)

// allGIs is the GPU instance id NVML puts in an event that is not about one
// MIG instance.
const allGIs = 0xFFFFFFFF

// ErrUnknownDevice is returned by Reserve for IDs the plugin does not offer.
var ErrUnknownDevice = errors.New("unknown device")

// Init retry: the first retry comes after initRetryMin, each next one after
// twice the wait before, up to initRetryMax. NVML's Init is a call into a
// local library, not a shared server, so there is no jitter.
const (
	initRetryMin = time.Second
	initRetryMax = time.Minute
)

// eventHealth is a device made unhealthy by an NVML event.
type eventHealth struct {
	reason string
	at     time.Time
	// fatal marks need a GPU reset or a plugin restart; see refresh.
	fatal bool
	// gpu is the physical GPU the device is on: itself, or a MIG
	// instance's parent. A reset is of the whole board.
	gpu string
	// seq orders marks against scans: a scan that began before the mark
	// says nothing about the GPU after it.
	seq uint64
	// resetSeen (fatal marks): a scan after the mark found the GPU gone
	// (GPU_IS_LOST, RESET_REQUIRED, missing from NVML's list) or showing a
	// trace (Traces), the states a reset ends.
	resetSeen bool
}

// Manager owns NVML for the plugin: it scans devices, tracks their health
// from NVML events, publishes fingerprints when anything changes, and
// answers stats and reservations. Run drives it.
type Manager struct {
	lib  nvmlseam.Lib
	cfg  Config
	log  hclog.Logger
	mock bool
	// devExists reports whether a device node exists on the host; in mock
	// mode nothing does.
	devExists func(path string) bool

	// initNVML is NVML's Init, and sleep waits between tries of it (false
	// when ctx ended first); tests replace both.
	initNVML func() nvml.Return
	sleep    func(ctx context.Context, d time.Duration) bool

	ignoredGPU map[string]bool
	ignoredXID map[uint64]bool
	poke       chan struct{}

	mu    sync.Mutex
	gpus  []GPU
	known map[int]string // NVML index -> UUID at the last good scan
	// boardAt: NVML index -> the physical GPU (a MIG instance's parent)
	// offered there when it last answered NVML; see goneNow.
	boardAt map[int]string
	events  map[string]eventHealth
	// topo is how CUDA numbers this host's GPUs, read at each scan for
	// Reserve; topoErr is why it could not be read.
	topo    nvmlseam.Topology
	topoErr error
	seq     uint64 // the last mark's seq
	fp      *devicepb.FingerprintResponse
	changed chan struct{}
	ready   bool

	// caps sets power caps (power_caps); nil when the block is absent.
	caps *capper
}

// NewManager prepares a manager; nothing touches NVML until Run.
func NewManager(lib nvmlseam.Lib, cfg Config, log hclog.Logger, mock bool) *Manager {
	m := &Manager{
		lib:        lib,
		initNVML:   lib.Init,
		sleep:      blockingquery.Sleep,
		cfg:        cfg,
		log:        log,
		mock:       mock,
		ignoredGPU: map[string]bool{},
		ignoredXID: map[uint64]bool{},
		poke:       make(chan struct{}, 1),
		known:      map[int]string{},
		boardAt:    map[int]string{},
		events:     map[string]eventHealth{},
		fp:         &devicepb.FingerprintResponse{},
		changed:    make(chan struct{}),
	}
	m.devExists = func(p string) bool {
		if m.mock {
			return false
		}
		_, err := os.Stat(p)
		return err == nil
	}
	for _, id := range cfg.IgnoredGPUIDs {
		m.ignoredGPU[id] = true
	}
	for _, x := range cfg.IgnoredXIDs {
		m.ignoredXID[x] = true
	}
	return m
}

// enableCaps makes Run hold the GPUs' power limits where the controller's
// caps say (the power_caps block).
func (m *Manager) enableCaps(pc PowerCaps) error {
	c, err := newCapper(pc, m.log, m.boards)
	if err != nil {
		return err
	}
	m.caps = c
	return nil
}

// boards are the physical GPUs of the last scan, MIG instances' parents
// once each, with their handles.
func (m *Manager) boards() []capBoard {
	m.mu.Lock()
	defer m.mu.Unlock()
	seen := map[string]bool{}
	var out []capBoard
	for _, g := range m.gpus {
		b := capBoard{uuid: g.UUID, dev: g.dev}
		if g.Parent != "" {
			b = capBoard{uuid: g.Parent, dev: g.parent}
		}
		if b.dev == nil || seen[b.uuid] {
			continue
		}
		seen[b.uuid] = true
		out = append(out, b)
	}
	return out
}

// Current returns the latest fingerprint, a channel closed when a newer one
// is published, and whether the first scan has finished.
func (m *Manager) Current() (*devicepb.FingerprintResponse, <-chan struct{}, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.fp, m.changed, m.ready
}

// Run initialises NVML and keeps the fingerprint current until ctx ends.
// While NVML's Init fails (no library, driver not loaded yet) it publishes
// zero devices and retries with backoff; a host without GPUs is not an
// error, and a driver that loads after the plugin starts is picked up.
func (m *Manager) Run(ctx context.Context) error {
	if !m.initWithRetry(ctx) {
		return nil
	}
	defer func() { _ = m.lib.Shutdown() }()

	m.refresh()
	var wg sync.WaitGroup
	defer wg.Wait()
	if m.caps != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m.caps.run(ctx)
		}()
	}
	if m.cfg.HealthEvents {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m.watchEvents(ctx)
		}()
	}
	tick := time.NewTicker(m.cfg.FingerprintPeriod)
	defer tick.Stop()
	recoverT := time.NewTimer(time.Hour)
	defer recoverT.Stop()
	for {
		recoverT.Reset(m.nextRecovery())
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		case <-m.poke:
		case <-recoverT.C:
		}
		m.refresh()
	}
}

// initWithRetry calls NVML's Init until it succeeds (true) or ctx ends
// (false). Until then the fingerprint has no devices. Each different error
// is logged once, not every try.
func (m *Manager) initWithRetry(ctx context.Context) bool {
	wait := blockingquery.Backoff{First: initRetryMin, Max: initRetryMax}
	last := nvml.SUCCESS
	for tries := 1; ; tries++ {
		ret := m.initNVML()
		if ret == nvml.SUCCESS {
			if tries > 1 {
				m.log.Info("NVML initialised; reporting GPUs", "tries", tries)
			}
			return true
		}
		delay := wait.Next()
		if ret != last {
			last = ret
			retry := fmt.Sprintf("from %s, doubling to every %s", delay, initRetryMax)
			if ret == nvml.ERROR_LIBRARY_NOT_FOUND {
				m.log.Warn("NVML library not found on this host; reporting no GPUs until it loads", "error", nvml.ErrorString(ret), "retry", retry)
			} else {
				m.log.Error("NVML init failed; reporting no GPUs until it succeeds", "error", nvml.ErrorString(ret), "retry", retry)
			}
		}
		m.publish(&devicepb.FingerprintResponse{})
		if !m.sleep(ctx, delay) {
			return false
		}
	}
}

// nextRecovery is how long until the earliest event-marked device may
// recover, or an hour when none is due.
func (m *Manager) nextRecovery() time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	wait := time.Hour
	if m.cfg.HealthRecovery <= 0 {
		return wait
	}
	now := time.Now()
	for _, ev := range m.events {
		if ev.fatal {
			continue // no timer clears these
		}
		// A deadline already passed belongs to a device that did not answer
		// NVML at that moment; the fingerprint ticker retries it.
		if d := ev.at.Add(m.cfg.HealthRecovery).Sub(now); d > 0 && d < wait {
			wait = d
		}
	}
	return wait
}

// refresh scans NVML, applies health, and publishes a fingerprint when it
// differs from the last one.
func (m *Manager) refresh() {
	m.mu.Lock()
	known := make(map[int]string, len(m.known))
	for k, v := range m.known {
		known[k] = v
	}
	prev := m.gpus
	seq := m.seq
	m.mu.Unlock()

	gpus, unlisted, err := scan(m.lib, known)
	topo, topoErr := nvmlseam.ReadTopology(m.lib)
	if err != nil {
		// NVML cannot even count devices: keep reporting the ones we had,
		// unhealthy with the reason, rather than dropping them.
		m.log.Error("NVML scan failed", "error", err)
		gpus = make([]GPU, 0, len(prev))
		for _, g := range prev {
			g.Err = err
			gpus = append(gpus, g)
		}
	}
	boards := boardStates(gpus, unlisted)
	kept := gpus[:0]
	for _, g := range gpus {
		if m.ignoredGPU[g.UUID] || (g.Parent != "" && m.ignoredGPU[g.Parent]) {
			continue
		}
		kept = append(kept, g)
	}
	gpus = kept
	sortGPUs(gpus)

	m.mu.Lock()
	now := time.Now()
	for _, g := range gpus {
		if g.Err == nil && g.Parent == "" {
			m.known[g.Index] = g.UUID
		}
		if g.Err == nil {
			m.boardAt[g.Index] = g.board()
		}
	}
	// Recover devices whose last critical event is older than
	// health_recovery, when they answered NVML in this scan.
	answered := map[string]bool{}
	for _, g := range gpus {
		if g.Err == nil {
			answered[g.UUID] = true
			if g.Parent != "" {
				answered[g.Parent] = true
			}
		}
	}
	for uuid, ev := range m.events {
		if ev.seq > seq {
			continue // marked while this scan ran
		}
		if !ev.fatal {
			if m.cfg.HealthRecovery > 0 && now.Sub(ev.at) >= m.cfg.HealthRecovery && answered[uuid] {
				m.log.Info("device recovered", "device", uuid, "after", ev.reason, "quiet_for", now.Sub(ev.at).Round(time.Second).String())
				delete(m.events, uuid)
			}
			continue
		}
		// A fatal mark clears only in two steps: a scan sees the GPU in a
		// state a reset ends (gone from NVML, or with a trace), then a later
		// scan finds it answering with no trace. A timer never clears it.
		b, listed := boards[ev.gpu]
		switch {
		case !listed || b.resetState:
			if !ev.resetSeen {
				ev.resetSeen = true
				m.events[uuid] = ev
				m.log.Info("device with a fatal fault is gone or awaiting reset; it clears once NVML shows it back and clean",
					"device", uuid, "fault", ev.reason, "seen", b.why(listed))
			}
		case b.clean && ev.resetSeen:
			m.log.Info("device recovered from a fatal fault: seen gone or awaiting reset, now answering NVML with nothing pending",
				"device", uuid, "after", ev.reason)
			delete(m.events, uuid)
		}
	}
	for _, g := range gpus {
		if g.Err != nil {
			continue // its traces were not read
		}
		if why := m.traceReason(g.Traces); why != traceOf(prev, g.UUID, m.traceReason) {
			if why != "" {
				m.log.Error("device unhealthy", "device", g.UUID, "reason", why)
			} else {
				m.log.Info("device trace cleared", "device", g.UUID)
			}
		}
	}
	m.gpus = gpus
	if topoErr == nil && topo.IndexMismatch() != m.topo.IndexMismatch() && topo.IndexMismatch() != "" {
		m.log.Warn("NVML's device index differs from CUDA's PCI bus order on this host; CUDA_VISIBLE_DEVICES follows PCI order, engines that read it as NVML indices (vLLM's own NVML queries) would look at other GPUs",
			"first", topo.IndexMismatch())
	}
	m.topo, m.topoErr = topo, topoErr
	fp := m.fingerprintLocked()
	m.mu.Unlock()
	m.publish(fp)
}

func (m *Manager) publish(fp *devicepb.FingerprintResponse) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.ready && proto.Equal(fp, m.fp) {
		return
	}
	m.fp = fp
	m.ready = true
	close(m.changed)
	m.changed = make(chan struct{})
}

// board is one physical GPU's state in one scan.
type board struct {
	// resetState: NVML says the GPU is gone or must be reset
	// (GPU_IS_LOST, RESET_REQUIRED) or shows a trace: states a reset ends.
	resetState bool
	// clean: it and all its instances answered, with no trace.
	clean bool
	// err is the first NVML error, for the log.
	err error
}

func (b board) why(listed bool) string {
	switch {
	case !listed:
		return "missing from NVML's device list"
	case b.err != nil:
		return b.err.Error()
	default:
		return "NVML shows a fault trace (pending remap or retirement, failed remap, or a recovery action)"
	}
}

// boardStates groups a scan's devices by physical GPU. It looks at every
// device NVML listed, ignored ones included, and the GPUs that failed
// without being offered (unlisted).
func boardStates(gpus []GPU, unlisted map[string]error) map[string]board {
	out := map[string]board{}
	for id, err := range unlisted {
		out[id] = board{resetState: gone(err), err: err}
	}
	for _, g := range gpus {
		id := g.UUID
		if g.Parent != "" {
			id = g.Parent
		}
		b, ok := out[id]
		if !ok {
			b.clean = true
		}
		if g.Err != nil {
			b.clean = false
			if b.err == nil {
				b.err = g.Err
			}
			if gone(g.Err) {
				b.resetState = true
			}
		} else if g.Traces != (Traces{}) {
			b.clean = false
			b.resetState = true
		}
		out[id] = b
	}
	return out
}

// traceReason is the health description for NVML's traces of past faults,
// or "" when they do not make the device unhealthy. Each trace is the
// lasting state of one XID, and follows that XID in ignored_xids.
func (m *Manager) traceReason(t Traces) string {
	switch {
	case t.RemapFailed && !m.ignoredXID[64]:
		return "NVML: a row remapping failed on this GPU (XID 64)"
	case t.Recovery != nvml.GPU_RECOVERY_ACTION_NONE && !m.ignoredXID[154]:
		return "NVML: recovery action required: " + recoveryName(t.Recovery) + " (XID 154)"
	case t.RemapPending && !m.ignoredXID[63]:
		return "NVML: row remapping pending until GPU reset (XID 63)"
	case t.RetirePending && !m.ignoredXID[63]:
		return "NVML: page retirement pending until driver reload (XID 63)"
	}
	return ""
}

func traceOf(gpus []GPU, uuid string, reason func(Traces) string) string {
	for _, g := range gpus {
		if g.UUID == uuid {
			return reason(g.Traces)
		}
	}
	return ""
}

func recoveryName(a nvml.DeviceGpuRecoveryAction) string {
	switch a {
	case nvml.GPU_RECOVERY_ACTION_GPU_RESET:
		return "GPU reset"
	case nvml.GPU_RECOVERY_ACTION_NODE_REBOOT:
		return "node reboot"
	case nvml.GPU_RECOVERY_ACTION_DRAIN_P2P:
		return "drain peer-to-peer traffic"
	case nvml.GPU_RECOVERY_ACTION_DRAIN_AND_RESET:
		return "drain and GPU reset"
	case nvml.GPU_RECOVERY_ACTION_RECOVER_IMEX_DOMAIN:
		return "recover IMEX domain"
	case nvml.GPU_RECOVERY_ACTION_BUS_RESET:
		return "bus reset"
	case nvml.GPU_RECOVERY_ACTION_SYSTEM_REBOOT:
		return "system reboot"
	}
	return fmt.Sprintf("action %d", a)
}

// health returns whether a device is healthy and why not.
func (m *Manager) healthLocked(g GPU) (bool, string) {
	if g.Err != nil {
		return false, g.Err.Error()
	}
	if ev, ok := m.events[g.UUID]; ok {
		return false, ev.reason
	}
	if g.Parent != "" {
		if ev, ok := m.events[g.Parent]; ok {
			return false, ev.reason
		}
	}
	if why := m.traceReason(g.Traces); why != "" {
		return false, why
	}
	return true, ""
}

func (m *Manager) fingerprintLocked() *devicepb.FingerprintResponse {
	byGroup := map[string][]GPU{}
	for _, g := range m.gpus {
		if g.Group == "" {
			// A device that failed before we ever learnt its product: put
			// it with the other devices at its index's last known group.
			g.Group = m.lastGroupLocked(g.UUID)
		}
		byGroup[g.Group] = append(byGroup[g.Group], g)
	}
	names := make([]string, 0, len(byGroup))
	for n := range byGroup {
		names = append(names, n)
	}
	sort.Strings(names)
	out := &devicepb.FingerprintResponse{}
	for _, name := range names {
		gs := byGroup[name]
		grp := &devicepb.DeviceGroup{
			Vendor:     Vendor,
			DeviceType: DeviceType,
			DeviceName: name,
			Attributes: groupAttributes(gs),
		}
		for _, g := range gs {
			healthy, why := m.healthLocked(g)
			d := &devicepb.DetectedDevice{ID: g.UUID, Healthy: healthy, HealthDescription: why}
			if g.PCIBusID != "" {
				d.HwLocality = &devicepb.DeviceLocality{PciBusId: g.PCIBusID}
			}
			grp.Devices = append(grp.Devices, d)
		}
		out.DeviceGroup = append(out.DeviceGroup, grp)
	}
	return out
}

func (m *Manager) lastGroupLocked(uuid string) string {
	for _, grp := range m.fp.GetDeviceGroup() {
		for _, d := range grp.GetDevices() {
			if d.GetID() == uuid {
				return grp.GetDeviceName()
			}
		}
	}
	return "unknown"
}

// groupAttributes merges the devices' attributes. When GPUs of one product
// differ, the group reports the conservative value for scheduling and power:
// the least memory, clock and bandwidth, and the highest power limit.
func groupAttributes(gs []GPU) map[string]*structspb.Attribute {
	var a Attrs
	first := true
	for _, g := range gs {
		if g.Err != nil {
			continue
		}
		x := g.Attrs
		if first {
			a, first = x, false
			continue
		}
		a.MemoryMiB = minPos(a.MemoryMiB, x.MemoryMiB)
		a.BAR1MiB = minPos(a.BAR1MiB, x.BAR1MiB)
		a.CoresClockMHz = minPos(a.CoresClockMHz, x.CoresClockMHz)
		a.MemoryClockMHz = minPos(a.MemoryClockMHz, x.MemoryClockMHz)
		a.PCIBandwidthMBps = minPos(a.PCIBandwidthMBps, x.PCIBandwidthMBps)
		a.PowerLimitW = max(a.PowerLimitW, x.PowerLimitW)
		a.ParentPowerW = max(a.ParentPowerW, x.ParentPowerW)
	}
	if first {
		return nil
	}
	out := map[string]*structspb.Attribute{}
	intAttr := func(k string, v int64, unit string) {
		if v > 0 {
			out[k] = &structspb.Attribute{Value: &structspb.Attribute_IntVal{IntVal: v}, Unit: unit}
		}
	}
	strAttr := func(k, v string) {
		if v != "" {
			out[k] = &structspb.Attribute{Value: &structspb.Attribute_StringVal{StringVal: v}}
		}
	}
	intAttr("memory", a.MemoryMiB, "MiB")
	intAttr("power_limit", a.PowerLimitW, "W")
	intAttr("bar1", a.BAR1MiB, "MiB")
	strAttr("driver_version", a.DriverVersion)
	strAttr("cuda_compute_capability", a.ComputeCap)
	intAttr("cores_clock", a.CoresClockMHz, "MHz")
	intAttr("memory_clock", a.MemoryClockMHz, "MHz")
	intAttr("pci_bandwidth", a.PCIBandwidthMBps, "MB/s")
	intAttr("mig_slices", a.MIGSlices, "")
	intAttr("parent_power_limit", a.ParentPowerW, "W")
	return out
}

func minPos(a, b int64) int64 {
	switch {
	case a <= 0:
		return b
	case b <= 0:
		return a
	default:
		return min(a, b)
	}
}

// watchEvents registers every GPU for critical XID and double-bit ECC
// events and marks devices unhealthy as they arrive.
func (m *Manager) watchEvents(ctx context.Context) {
	set, ret := m.lib.EventSetCreate()
	if ret != nvml.SUCCESS {
		m.log.Warn("NVML health events unavailable; health comes from device queries only", "error", nvml.ErrorString(ret))
		return
	}
	defer func() { _ = set.Free() }()
	n, ret := m.lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		m.log.Warn("NVML health events: cannot count devices", "error", nvml.ErrorString(ret))
		return
	}
	registered := 0
	for i := 0; i < n; i++ {
		dev, ret := m.lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			continue
		}
		if ret := dev.RegisterEvents(healthEvents, set); ret != nvml.SUCCESS {
			m.log.Warn("NVML health events not supported on device", "index", i, "error", nvml.ErrorString(ret))
			continue
		}
		registered++
	}
	if registered == 0 && n > 0 {
		m.log.Warn("NVML health events: no device accepted registration")
		return
	}
	for ctx.Err() == nil {
		ev, ret := set.Wait(1000)
		switch ret {
		case nvml.SUCCESS:
			m.handleEvent(ev)
		case nvml.ERROR_TIMEOUT:
		default:
			m.log.Warn("NVML event wait failed", "error", nvml.ErrorString(ret))
			if ret == nvml.ERROR_GPU_IS_LOST {
				// NVML says a GPU is lost but not which: find it.
				m.markUnidentified("NVML: GPU is lost", true)
			}
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}
}

// handleEvent applies one NVML event to device health.
func (m *Manager) handleEvent(ev nvml.EventData) {
	var reason string
	var fatal bool
	switch ev.EventType {
	case nvml.EventTypeXidCriticalError:
		if m.ignoredXID[ev.EventData] {
			m.log.Debug("ignoring XID", "xid", ev.EventData, "class", ClassifyXID(ev.EventData).String())
			return
		}
		reason = XIDReason(ev.EventData)
		fatal = ClassifyXID(ev.EventData) == XIDFatal
	case nvml.EventTypeDoubleBitEccError:
		reason, fatal = "double-bit ECC error", true
	default:
		return
	}
	uuid, ok := m.eventGPU(ev.Device)
	if !ok {
		m.markUnidentified(reason, fatal)
		return
	}
	target := uuid
	m.mu.Lock()
	if ev.GpuInstanceId != allGIs {
		for _, g := range m.gpus {
			if g.Parent == uuid && uint32(g.GIID) == ev.GpuInstanceId {
				target = g.UUID
			}
		}
	}
	marked := m.markLocked(target, uuid, reason, fatal, time.Now())
	m.mu.Unlock()
	if marked {
		m.log.Error("device unhealthy", "device", target, "reason", reason, "clears", clearsWhen(fatal))
	} else {
		m.log.Warn("device already unhealthy from a fatal fault; a transient event does not change that", "device", target, "event", reason)
	}
	m.nudge()
}

// eventGPU names the physical GPU an event came from. NVML's event carries
// the GPU's handle, but a GPU that has fallen off the bus (XID 79 comes
// from one) no longer answers its UUID, often by the time the event is
// read. The handle itself is then compared with the handles of the last
// scan (NVML's handles are fixed for the life of the library), and the
// GPU's PCI bus id and index are asked in case they still answer.
func (m *Manager) eventGPU(dev nvmlseam.Device) (string, bool) {
	if dev == nil {
		return "", false
	}
	if uuid, ret := dev.GetUUID(); ret == nvml.SUCCESS {
		return uuid, true
	}
	m.mu.Lock()
	gpus := m.gpus
	m.mu.Unlock()
	for _, g := range gpus {
		h := g.dev
		if g.parent != nil {
			h = g.parent
		}
		if sameHandle(dev, h) {
			return g.board(), true
		}
	}
	if pci, ret := dev.GetPciInfo(); ret == nvml.SUCCESS {
		if bus := nvmlseam.BusID(pci); bus != "" {
			for _, g := range gpus {
				if strings.EqualFold(g.PCIBusID, bus) {
					return g.board(), true
				}
			}
		}
	}
	if i, ret := dev.GetIndex(); ret == nvml.SUCCESS {
		for _, g := range gpus {
			if g.Index == i {
				return g.board(), true
			}
		}
	}
	return "", false
}

// sameHandle reports whether a and b are one NVML device handle. Handles
// of a type that cannot be compared, and empty ones, name nothing.
func sameHandle(a, b nvmlseam.Device) bool {
	if a == nil || b == nil {
		return false
	}
	t := reflect.TypeOf(a)
	if t != reflect.TypeOf(b) || !t.Comparable() || reflect.ValueOf(a).IsZero() {
		return false
	}
	return a == b
}

// markUnidentified applies an event that names no GPU the plugin can
// identify, or the event wait's GPU_IS_LOST. It asks NVML at once which
// GPUs are gone (goneNow): those are the ones the event is about, and only
// they are marked. A fatal mark on them counts this read as the "gone"
// half of the reset, so it clears at the first scan that finds the GPU
// back and clean. When NVML shows no GPU gone, every GPU gets a transient
// mark, which health_recovery ends once they answer: a fault NVML does not
// place must not take every GPU of the node out for good.
func (m *Manager) markUnidentified(reason string, fatal bool) {
	lost, anyGone := m.goneNow()
	m.mu.Lock()
	now := time.Now()
	if anyGone {
		gone := make([]string, 0, len(lost))
		for uuid := range lost {
			gone = append(gone, uuid)
		}
		sort.Strings(gone)
		for _, uuid := range gone {
			m.markLocked(uuid, uuid, reason, fatal, now)
			// Every mark on it is older than the read that saw it gone.
			if ev := m.events[uuid]; ev.fatal {
				ev.resetSeen = true
				m.events[uuid] = ev
			}
		}
		m.mu.Unlock()
		if len(gone) == 0 {
			m.log.Warn("NVML fault not tied to a GPU; the GPUs NVML shows gone are not offered (ignored_gpu_ids), nothing marked", "reason", reason)
			return
		}
		m.log.Error("NVML fault not tied to a GPU; marked the GPUs NVML shows gone", "reason", reason, "devices", strings.Join(gone, ","),
			"clears", "once NVML shows them back and clean")
		m.nudge()
		return
	}
	boards := map[string]bool{}
	for _, uuid := range m.boardAt {
		boards[uuid] = true
	}
	for _, g := range m.gpus {
		boards[g.board()] = true
	}
	why := reason + " (unidentified GPU)"
	for uuid := range boards {
		m.markLocked(uuid, uuid, why, false, now)
	}
	m.mu.Unlock()
	m.log.Error("NVML fault not tied to a GPU and no GPU is gone; all devices unhealthy", "reason", reason, "fatal_event", fatal,
		"clears", clearsWhen(false))
	m.nudge()
}

// goneNow asks NVML, now, which GPUs are gone: a GPU at an index that
// answers GPU_IS_LOST or RESET_REQUIRED (to its handle, UUID or memory
// query), or one offered before that is missing from NVML's list. It
// returns those of the offered GPUs (physical ones, by UUID), and whether
// NVML showed any GPU gone at all, ignored ones included.
func (m *Manager) goneNow() (map[string]bool, bool) {
	m.mu.Lock()
	at := make(map[int]string, len(m.boardAt))
	for i, uuid := range m.boardAt {
		at[i] = uuid
	}
	m.mu.Unlock()
	n, ret := m.lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nil, false
	}
	goneAt := map[int]bool{}
	uuidAt := map[int]string{}
	present := map[string]bool{}
	for i := 0; i < n; i++ {
		dev, ret := m.lib.DeviceGetHandleByIndex(i)
		if ret == nvml.SUCCESS {
			var uuid string
			if uuid, ret = dev.GetUUID(); ret == nvml.SUCCESS {
				uuidAt[i], present[uuid] = uuid, true
				_, ret = dev.GetMemoryInfo()
			}
		}
		if goneRet(ret) {
			goneAt[i] = true
		}
	}
	lost := map[string]bool{}
	for i, uuid := range at {
		switch {
		case goneAt[i] && (uuidAt[i] == "" || uuidAt[i] == uuid):
			lost[uuid] = true
		case present[uuid]:
			// answering, here or at another index
		case i >= n || uuidAt[i] != "":
			lost[uuid] = true // missing from NVML's list
		}
	}
	return lost, len(goneAt) > 0 || len(lost) > 0
}

// markLocked records an event against device uuid on physical GPU gpu. A
// transient event does not replace a fatal mark (false); a new fatal event
// starts a fatal mark over, so a reset seen before it does not count.
func (m *Manager) markLocked(uuid, gpu, reason string, fatal bool, now time.Time) bool {
	if old, ok := m.events[uuid]; ok && old.fatal && !fatal {
		return false
	}
	m.seq++
	m.events[uuid] = eventHealth{reason: reason, at: now, fatal: fatal, gpu: gpu, seq: m.seq}
	return true
}

func clearsWhen(fatal bool) string {
	if fatal {
		return "after NVML shows the GPU reset (gone or awaiting reset, then back and clean), or a plugin restart; never by timer"
	}
	return "after health_recovery with no new event, once it answers NVML"
}

// inherit takes over old's event marks, so that a new configuration in the
// same process clears nothing: only a new plugin process starts clean. Call
// it before Run, once old has stopped.
func (m *Manager) inherit(old *Manager) {
	old.mu.Lock()
	marks := make([]string, 0, len(old.events))
	for uuid := range old.events {
		marks = append(marks, uuid)
	}
	sort.Slice(marks, func(i, j int) bool { return old.events[marks[i]].seq < old.events[marks[j]].seq })
	evs := make([]eventHealth, len(marks))
	for i, uuid := range marks {
		evs[i] = old.events[uuid]
	}
	old.mu.Unlock()
	m.mu.Lock()
	defer m.mu.Unlock()
	for i, uuid := range marks {
		m.seq++
		ev := evs[i]
		ev.seq = m.seq
		m.events[uuid] = ev
	}
}

func (m *Manager) nudge() {
	select {
	case m.poke <- struct{}{}:
	default:
	}
}

// Reservation is what a task needs to use its devices.
type Reservation struct {
	Envs    map[string]string
	Devices []string // host device node paths, also the task paths
}

// Reserve returns the environment and device nodes for the given devices.
// The environment binds a plain process to them (nvmlseam.Binding): whole
// GPUs as CUDA indices in PCI bus order with CUDA_DEVICE_ORDER=PCI_BUS_ID,
// MIG instances by UUID, and the UUIDs in NVIDIA_VISIBLE_DEVICES and
// LLMGW_GPU_UUIDS. Several MIG instances are all listed, for a task that
// runs one process per instance; llmgw's driver refuses more than one for
// its single engine process.
func (m *Manager) Reserve(ids []string) (Reservation, error) {
	m.mu.Lock()
	byID := make(map[string]GPU, len(m.gpus))
	for _, g := range m.gpus {
		byID[g.UUID] = g
	}
	topo, topoErr := m.topo, m.topoErr
	m.mu.Unlock()
	var unknown []string
	var picked []GPU
	seen := map[string]bool{}
	for _, id := range ids {
		g, ok := byID[id]
		if !ok {
			unknown = append(unknown, id)
			continue
		}
		if !seen[id] {
			seen[id] = true
			picked = append(picked, g)
		}
	}
	if len(unknown) > 0 {
		have := make([]string, 0, len(byID))
		for id := range byID {
			have = append(have, id)
		}
		sort.Strings(have)
		return Reservation{}, fmt.Errorf("%w: %s (this node has %s)", ErrUnknownDevice, strings.Join(unknown, ", "), strings.Join(have, ", "))
	}
	if len(picked) == 0 {
		return Reservation{}, fmt.Errorf("%w: no device IDs given", ErrUnknownDevice)
	}
	sortGPUs(picked)
	uuids := make([]string, len(picked))
	var devs []string
	var groups []string
	minors := map[int]bool{}
	for i, g := range picked {
		uuids[i] = g.UUID
		if grp := Vendor + "/" + DeviceType + "/" + g.Group; !slices.Contains(groups, grp) {
			groups = append(groups, grp)
		}
		if g.Minor >= 0 && !minors[g.Minor] {
			minors[g.Minor] = true
			if p := fmt.Sprintf("/dev/nvidia%d", g.Minor); m.devExists(p) {
				devs = append(devs, p)
			}
		}
	}
	for _, p := range []string{"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"} {
		if m.devExists(p) {
			devs = append(devs, p)
		}
	}
	bind, err := topo.Bind(uuids)
	if topoErr != nil {
		err = topoErr
	}
	if err != nil {
		// The scan knows these devices but NVML's numbering could not be
		// read: UUIDs bind a process as surely, only some engines refuse
		// them.
		bind = nvmlseam.UUIDBinding(uuids, err.Error())
	}
	if bind.ByUUID != "" && bind.MIG == 0 {
		m.log.Info("reserving whole GPUs by UUID rather than CUDA index", "devices", strings.Join(uuids, ","), "why", bind.ByUUID)
	}
	envs := bind.Env()
	envs[nvmlseam.EnvGroup] = strings.Join(groups, ",")
	return Reservation{Envs: envs, Devices: devs}, nil
}
