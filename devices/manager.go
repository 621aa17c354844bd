package devices

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	hclog "github.com/hashicorp/go-hclog"
	"google.golang.org/protobuf/proto"

	"github.com/llmgw/llmgw/internal/nomadplugin/pb/devicepb"
	"github.com/llmgw/llmgw/internal/nomadplugin/pb/structspb"
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

type eventHealth struct {
	reason string
	at     time.Time
}

// Manager owns NVML for the plugin: it scans devices, tracks their health
// from NVML events, publishes fingerprints when anything changes, and
// answers stats and reservations. Run drives it.
type Manager struct {
	lib  nvml.Interface
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

	mu      sync.Mutex
	gpus    []GPU
	known   map[int]string // NVML index -> UUID at the last good scan
	events  map[string]eventHealth
	fp      *devicepb.FingerprintResponse
	changed chan struct{}
	ready   bool
}

// NewManager prepares a manager; nothing touches NVML until Run.
func NewManager(lib nvml.Interface, cfg Config, log hclog.Logger, mock bool) *Manager {
	m := &Manager{
		lib:        lib,
		initNVML:   lib.Init,
		sleep:      sleepCtx,
		cfg:        cfg,
		log:        log,
		mock:       mock,
		ignoredGPU: map[string]bool{},
		ignoredXID: map[uint64]bool{},
		poke:       make(chan struct{}, 1),
		known:      map[int]string{},
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
	delay := initRetryMin
	last := nvml.SUCCESS
	for tries := 1; ; tries++ {
		ret := m.initNVML()
		if ret == nvml.SUCCESS {
			if tries > 1 {
				m.log.Info("NVML initialised; reporting GPUs", "tries", tries)
			}
			return true
		}
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
		delay = min(2*delay, initRetryMax)
	}
}

// sleepCtx waits d, or until ctx ends (false).
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
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
	m.mu.Unlock()

	gpus, err := scan(m.lib, known)
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
		if m.cfg.HealthRecovery > 0 && now.Sub(ev.at) >= m.cfg.HealthRecovery && answered[uuid] {
			m.log.Info("device recovered", "device", uuid, "after", ev.reason, "quiet_for", now.Sub(ev.at).Round(time.Second).String())
			delete(m.events, uuid)
		}
	}
	m.gpus = gpus
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
				m.markAll("NVML: GPU is lost")
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
	switch ev.EventType {
	case nvml.EventTypeXidCriticalError:
		if m.ignoredXID[ev.EventData] {
			m.log.Debug("ignoring application XID", "xid", ev.EventData)
			return
		}
		reason = XIDReason(ev.EventData)
	case nvml.EventTypeDoubleBitEccError:
		reason = "double-bit ECC error"
	default:
		return
	}
	if ev.Device == nil {
		m.markAll(reason)
		return
	}
	uuid, ret := ev.Device.GetUUID()
	if ret != nvml.SUCCESS {
		m.markAll(reason)
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
	m.events[target] = eventHealth{reason: reason, at: time.Now()}
	m.mu.Unlock()
	m.log.Error("device unhealthy", "device", target, "reason", reason)
	m.nudge()
}

func (m *Manager) markAll(reason string) {
	m.mu.Lock()
	now := time.Now()
	for _, g := range m.gpus {
		m.events[g.UUID] = eventHealth{reason: reason, at: now}
	}
	m.mu.Unlock()
	m.log.Error("all devices unhealthy", "reason", reason)
	m.nudge()
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
func (m *Manager) Reserve(ids []string) (Reservation, error) {
	m.mu.Lock()
	byID := make(map[string]GPU, len(m.gpus))
	for _, g := range m.gpus {
		byID[g.UUID] = g
	}
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
	minors := map[int]bool{}
	for i, g := range picked {
		uuids[i] = g.UUID
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
	list := strings.Join(uuids, ",")
	return Reservation{
		Envs:    map[string]string{"CUDA_VISIBLE_DEVICES": list, "NVIDIA_VISIBLE_DEVICES": list},
		Devices: devs,
	}, nil
}
