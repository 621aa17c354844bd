package devices

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"maps"
	"math"
	"slices"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxb200"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh200"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
)

// mockSystem describes one of go-nvml's mock DGX systems, with the values
// go-nvml's mocks do not fake filled in from the real boards' data sheets.
type mockSystem struct {
	newServer   func() *server.Server
	productName string // what real NVML reports for this board
	powerLimitW uint32 // the default, and the highest a limit may be set to
	minLimitW   uint32 // the lowest a power limit may be set to
	smClockMHz  uint32
	memClockMHz uint32
	bar1MiB     uint64
	pcieGen     int
	pcieWidth   int
}

var mockSystems = map[string]mockSystem{
	"dgxa100": {dgxa100.New, "NVIDIA A100-SXM4-40GB", 400, 100, 1410, 1215, 65536, 4, 16},
	"dgxh100": {dgxh100.New, "NVIDIA H100 80GB HBM3", 700, 200, 1980, 2619, 131072, 5, 16},
	"dgxh200": {dgxh200.New, "NVIDIA H200", 700, 200, 1980, 3201, 262144, 5, 16},
	"dgxb200": {dgxb200.New, "NVIDIA B200", 1000, 200, 1965, 3996, 262144, 5, 16},
}

// MockSystems lists the names the mock block accepts, sorted.
func MockSystems() []string {
	out := make([]string, 0, len(mockSystems))
	for k := range mockSystems {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// dgx PCI bus numbers, as an eight-GPU HGX board enumerates them.
var mockBuses = []int{0x18, 0x2a, 0x3a, 0x5d, 0x9a, 0xab, 0xba, 0xdb}

// Draw modes of the mock (mock.draw).
const (
	// DrawFixed: every GPU draws power_watts (40% of its limit by default).
	DrawFixed = "fixed"
	// DrawLoad: a GPU's draw follows the CPU use of the processes bound to
	// it (see loadSampler); power_watts is its idle draw.
	DrawLoad = "load"
)

// MockNVML is an nvml.Interface serving one of go-nvml's mock systems, with
// power, power limits, temperature, utilisation, clocks, ECC, energy, PCI
// and MIG filled in and an event set that tests (and nothing else) can feed.
type MockNVML struct {
	*server.Server
	system  mockSystem
	events  chan nvml.EventData
	devices []*MockGPU
	// load, in draw = "load" mode, reads how busy each GPU's processes are.
	load *loadSampler
}

// MockGPU is one GPU of a MockNVML. Tests change its exported fields through
// Update to inject faults while the plugin reads them.
type MockGPU struct {
	*server.Device
	mu sync.Mutex
	// PowerMW is what the GPU would draw with no limit: fixed, or (draw =
	// "load") set from its processes' load at each reading. It reports
	// min(PowerMW, LimitMW), as a GPU held at its limit does.
	PowerMW uint32
	LimitMW uint32 // enforced power limit
	// The range SetPowerManagementLimit accepts, and the default limit.
	MinLimitMW, MaxLimitMW, DefaultLimitMW uint32
	// SetLimitErr, when not SUCCESS, is what SetPowerManagementLimit
	// answers (NO_PERMISSION: a plugin not running as root).
	SetLimitErr nvml.Return
	Err         nvml.Return // when not SUCCESS, every query of this GPU fails with it
	// IdleMW is the draw at no load (draw = "load").
	IdleMW uint32
	// energyMJ is the energy drawn up to energyAt.
	energyMJ  float64
	energyAt  time.Time
	ECCCorr   uint64
	ECCUncorr uint64
	// What NVML keeps of past faults (see Traces); a reset clears all but
	// RemapFailed.
	RemapPending  bool
	RetirePending bool
	RemapFailed   bool
	Recovery      nvml.DeviceGpuRecoveryAction
	MIG           []*mock.Device
	migUUIDs      []string
}

// NewMockNVML builds the mock for cfg. It never touches real hardware.
func NewMockNVML(cfg MockConfig) (*MockNVML, error) {
	sys, ok := mockSystems[cfg.System]
	if !ok {
		return nil, fmt.Errorf("mock.system: unknown mock system %q (want one of %v)", cfg.System, MockSystems())
	}
	s := sys.newServer()
	n := len(s.Devices)
	if cfg.GPUs != nil {
		if *cfg.GPUs < 0 || *cfg.GPUs > n {
			return nil, fmt.Errorf("mock.gpus: %d is out of range: %s has %d GPUs", *cfg.GPUs, cfg.System, n)
		}
		n = *cfg.GPUs
	}
	s.Devices = s.Devices[:n]
	m := &MockNVML{Server: s, system: sys, events: make(chan nvml.EventData, 64)}
	limitMW := sys.powerLimitW * 1000
	drawMW := uint32(float64(limitMW) * 0.4)
	switch cfg.Draw {
	case "", DrawFixed:
	case DrawLoad:
		drawMW = uint32(float64(limitMW) * 0.1)
		m.load = newLoadSampler(procRoot)
	default:
		return nil, fmt.Errorf("mock.draw: %q is not a draw mode (want %q or %q)", cfg.Draw, DrawFixed, DrawLoad)
	}
	if cfg.PowerWatts != nil {
		if *cfg.PowerWatts < 0 || math.IsNaN(*cfg.PowerWatts) {
			return nil, fmt.Errorf("mock.power_watts: must be zero or more, got %v", *cfg.PowerWatts)
		}
		if *cfg.PowerWatts > float64(sys.powerLimitW) {
			return nil, fmt.Errorf("mock.power_watts: %v W is above the %s board limit of %d W", *cfg.PowerWatts, cfg.System, sys.powerLimitW)
		}
		drawMW = uint32(*cfg.PowerWatts * 1000)
	}
	for i, d := range s.Devices {
		sd := d.(*server.Device)
		sd.UUID = mockUUID("GPU", cfg.Seed, cfg.System, strconv.Itoa(i))
		sd.PciBusID = fmt.Sprintf("00000000:%02X:00.0", mockBuses[i%len(mockBuses)]+i/len(mockBuses))
		sd.Config.Name = sys.productName
		sd.MemoryInfo.Free = sd.MemoryInfo.Total - sd.MemoryInfo.Used
		g := &MockGPU{Device: sd, PowerMW: drawMW, LimitMW: limitMW, Err: nvml.SUCCESS,
			MinLimitMW: sys.minLimitW * 1000, MaxLimitMW: limitMW, DefaultLimitMW: limitMW,
			IdleMW: drawMW, energyAt: time.Now()}
		if cfg.DenyPowerLimit {
			g.SetLimitErr = nvml.ERROR_NO_PERMISSION
		}
		m.wire(g)
		m.devices = append(m.devices, g)
	}
	for _, key := range slices.Sorted(maps.Keys(cfg.MIG)) {
		idx, err := strconv.Atoi(key)
		if err != nil || idx < 0 || idx >= n {
			return nil, fmt.Errorf("mock.mig: key %q is not the index of one of the %d mock GPUs", key, n)
		}
		if err := m.partition(m.devices[idx], cfg.Seed, cfg.System, cfg.MIG[key]); err != nil {
			return nil, fmt.Errorf("mock.mig[%q]: %w", key, err)
		}
	}
	// One handle per GPU, as real NVML has: the *MockGPU, in events as in
	// DeviceGetHandleByIndex, so a handle names its GPU even when every
	// query of it fails.
	s.DeviceGetHandleByIndexFunc = func(i int) (nvml.Device, nvml.Return) {
		if i < 0 || i >= len(m.devices) {
			return nil, nvml.ERROR_INVALID_ARGUMENT
		}
		return m.devices[i], nvml.SUCCESS
	}
	s.EventSetCreateFunc = func() (nvml.EventSet, nvml.Return) {
		return &mock.EventSet{
			WaitFunc: m.wait,
			FreeFunc: func() nvml.Return { return nvml.SUCCESS },
		}, nvml.SUCCESS
	}
	return m, nil
}

// Update changes a mock GPU's state under its lock.
func (g *MockGPU) Update(f func(g *MockGPU)) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.accrueLocked(time.Now())
	f(g)
}

// drawLocked is what the GPU draws now: its load's draw, held at its
// enforced limit.
func (g *MockGPU) drawLocked() uint32 { return min(g.PowerMW, g.LimitMW) }

// accrueLocked adds the energy drawn since the last reading, at the draw
// now, so the counter only grows while the draw changes.
func (g *MockGPU) accrueLocked(now time.Time) {
	if dt := now.Sub(g.energyAt).Seconds(); dt > 0 {
		g.energyMJ += float64(g.drawLocked()) * dt
	}
	g.energyAt = now
}

// follow sets a GPU's unlimited draw from its processes' load (draw =
// "load"): idle + utilisation × (default limit − idle).
func (m *MockNVML) follow(g *MockGPU) {
	if m.load == nil {
		return
	}
	util := m.load.Util(g.UUID)
	for _, u := range g.migUUIDs {
		util += m.load.Util(u) // a process bound to one of its MIG instances
	}
	util = min(util, 1)
	g.mu.Lock()
	defer g.mu.Unlock()
	g.accrueLocked(time.Now())
	idle := min(g.IdleMW, g.DefaultLimitMW)
	g.PowerMW = idle + uint32(util*float64(g.DefaultLimitMW-idle))
}

// GPUs returns the mock's GPUs in NVML index order.
func (m *MockNVML) GPUs() []*MockGPU { return m.devices }

// InjectEvent queues an NVML event, as a driver reporting an XID or ECC
// error would. It is the fault-injection seam for tests.
func (m *MockNVML) InjectEvent(ev nvml.EventData) { m.events <- ev }

func (m *MockNVML) wait(timeoutMS uint32) (nvml.EventData, nvml.Return) {
	t := time.NewTimer(time.Duration(timeoutMS) * time.Millisecond)
	defer t.Stop()
	select {
	case ev := <-m.events:
		return ev, nvml.SUCCESS
	case <-t.C:
		return nvml.EventData{}, nvml.ERROR_TIMEOUT
	}
}

func mockUUID(kind string, parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	b := h.Sum(nil)
	return fmt.Sprintf("%s-%x-%x-%x-%x-%x", kind, b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// wire sets the functions go-nvml's mock leaves unset.
func (m *MockNVML) wire(g *MockGPU) {
	sys := m.system
	d := g.Device
	guard := func() nvml.Return {
		g.mu.Lock()
		defer g.mu.Unlock()
		return g.Err
	}
	origUUID := d.GetUUIDFunc
	d.GetUUIDFunc = func() (string, nvml.Return) {
		if r := guard(); r != nvml.SUCCESS {
			return "", r
		}
		return origUUID()
	}
	origIndex, origMinor, origName := d.GetIndexFunc, d.GetMinorNumberFunc, d.GetNameFunc
	d.GetIndexFunc = func() (int, nvml.Return) {
		if r := guard(); r != nvml.SUCCESS {
			return 0, r
		}
		return origIndex()
	}
	d.GetMinorNumberFunc = func() (int, nvml.Return) {
		if r := guard(); r != nvml.SUCCESS {
			return 0, r
		}
		return origMinor()
	}
	d.GetNameFunc = func() (string, nvml.Return) {
		if r := guard(); r != nvml.SUCCESS {
			return "", r
		}
		return origName()
	}
	origMem := d.GetMemoryInfoFunc
	d.GetMemoryInfoFunc = func() (nvml.Memory, nvml.Return) {
		if r := guard(); r != nvml.SUCCESS {
			return nvml.Memory{}, r
		}
		return origMem()
	}
	d.GetPciInfoFunc = func() (nvml.PciInfo, nvml.Return) {
		if r := guard(); r != nvml.SUCCESS {
			return nvml.PciInfo{}, r
		}
		var p nvml.PciInfo
		p.PciDeviceId = d.Config.PciDeviceId
		for i := 0; i < len(d.PciBusID) && i < len(p.BusId)-1; i++ {
			p.BusId[i] = int8(d.PciBusID[i])
		}
		return p, nvml.SUCCESS
	}
	d.GetEnforcedPowerLimitFunc = func() (uint32, nvml.Return) {
		g.mu.Lock()
		defer g.mu.Unlock()
		return g.LimitMW, g.Err
	}
	d.GetPowerManagementLimitFunc = d.GetEnforcedPowerLimitFunc
	d.GetPowerManagementLimitConstraintsFunc = func() (uint32, uint32, nvml.Return) {
		g.mu.Lock()
		defer g.mu.Unlock()
		return g.MinLimitMW, g.MaxLimitMW, g.Err
	}
	d.GetPowerManagementDefaultLimitFunc = func() (uint32, nvml.Return) {
		g.mu.Lock()
		defer g.mu.Unlock()
		return g.DefaultLimitMW, g.Err
	}
	d.SetPowerManagementLimitFunc = func(mw uint32) nvml.Return {
		g.mu.Lock()
		defer g.mu.Unlock()
		switch {
		case g.Err != nvml.SUCCESS:
			return g.Err
		case g.SetLimitErr != nvml.SUCCESS:
			return g.SetLimitErr
		case mw < g.MinLimitMW || mw > g.MaxLimitMW:
			// Real NVML's answer to a limit outside the constraints.
			return nvml.ERROR_INVALID_ARGUMENT
		}
		g.LimitMW = mw
		return nvml.SUCCESS
	}
	d.GetPowerUsageFunc = func() (uint32, nvml.Return) {
		m.follow(g)
		g.mu.Lock()
		defer g.mu.Unlock()
		return g.drawLocked(), g.Err
	}
	d.GetTemperatureFunc = func(nvml.TemperatureSensors) (uint32, nvml.Return) {
		m.follow(g)
		g.mu.Lock()
		defer g.mu.Unlock()
		// An idle HGX board sits near 30 C and nears 70 C at its limit.
		return 30 + uint32(40*float64(g.drawLocked())/float64(max(g.DefaultLimitMW, 1))), g.Err
	}
	d.GetUtilizationRatesFunc = func() (nvml.Utilization, nvml.Return) {
		m.follow(g)
		g.mu.Lock()
		defer g.mu.Unlock()
		frac := float64(g.drawLocked()) / float64(max(g.DefaultLimitMW, 1))
		return nvml.Utilization{Gpu: uint32(100 * frac), Memory: uint32(60 * frac)}, g.Err
	}
	d.GetTotalEnergyConsumptionFunc = func() (uint64, nvml.Return) {
		m.follow(g)
		g.mu.Lock()
		defer g.mu.Unlock()
		// mJ drawn since the mock started, at the draw seen at each
		// reading.
		g.accrueLocked(time.Now())
		return uint64(g.energyMJ), g.Err
	}
	d.GetTotalEccErrorsFunc = func(t nvml.MemoryErrorType, _ nvml.EccCounterType) (uint64, nvml.Return) {
		g.mu.Lock()
		defer g.mu.Unlock()
		if t == nvml.MEMORY_ERROR_TYPE_CORRECTED {
			return g.ECCCorr, g.Err
		}
		return g.ECCUncorr, g.Err
	}
	d.GetMaxClockInfoFunc = func(ct nvml.ClockType) (uint32, nvml.Return) {
		if ct == nvml.CLOCK_MEM {
			return sys.memClockMHz, guard()
		}
		return sys.smClockMHz, guard()
	}
	d.GetBAR1MemoryInfoFunc = func() (nvml.BAR1Memory, nvml.Return) {
		total := sys.bar1MiB << 20
		return nvml.BAR1Memory{Bar1Total: total, Bar1Free: total}, guard()
	}
	d.GetMaxPcieLinkGenerationFunc = func() (int, nvml.Return) { return sys.pcieGen, guard() }
	d.GetMaxPcieLinkWidthFunc = func() (int, nvml.Return) { return sys.pcieWidth, guard() }
	d.GetRemappedRowsFunc = func() (int, int, bool, bool, nvml.Return) {
		g.mu.Lock()
		defer g.mu.Unlock()
		if len(g.MIG) > 0 {
			// As real NVML: not supported on a MIG-enabled GPU.
			return 0, 0, false, false, nvml.ERROR_NOT_SUPPORTED
		}
		return 0, 0, g.RemapPending, g.RemapFailed, g.Err
	}
	d.GetRetiredPagesPendingStatusFunc = func() (nvml.EnableState, nvml.Return) {
		g.mu.Lock()
		defer g.mu.Unlock()
		if g.RetirePending {
			return nvml.FEATURE_ENABLED, g.Err
		}
		return nvml.FEATURE_DISABLED, g.Err
	}
	d.GetFieldValuesFunc = func(vals []nvml.FieldValue) nvml.Return {
		g.mu.Lock()
		defer g.mu.Unlock()
		if g.Err != nvml.SUCCESS {
			return g.Err
		}
		for i := range vals {
			if vals[i].FieldId != nvml.FI_DEV_GET_GPU_RECOVERY_ACTION {
				vals[i].NvmlReturn = uint32(nvml.ERROR_NOT_SUPPORTED)
				continue
			}
			vals[i].NvmlReturn = uint32(nvml.SUCCESS)
			vals[i].ValueType = uint32(nvml.VALUE_TYPE_UNSIGNED_INT)
			vals[i].Value = [8]byte{}
			binary.NativeEndian.PutUint32(vals[i].Value[:4], uint32(g.Recovery))
		}
		return nvml.SUCCESS
	}
	d.RegisterEventsFunc = func(uint64, nvml.EventSet) nvml.Return { return guard() }
	d.IsMigDeviceHandleFunc = func() (bool, nvml.Return) { return false, nvml.SUCCESS }
	d.GetMaxMigDeviceCountFunc = func() (int, nvml.Return) {
		if len(g.MIG) == 0 {
			return 0, nvml.SUCCESS
		}
		return 7, guard()
	}
	d.GetMigDeviceHandleByIndexFunc = func(i int) (nvml.Device, nvml.Return) {
		if r := guard(); r != nvml.SUCCESS {
			return nil, r
		}
		if i < 0 || i >= len(g.MIG) {
			return nil, nvml.ERROR_NOT_FOUND
		}
		return g.MIG[i], nvml.SUCCESS
	}
	d.GetGpuInstanceByIdFunc = func(id int) (nvml.GpuInstance, nvml.Return) {
		d.RLock()
		defer d.RUnlock()
		for gi := range d.GpuInstances {
			if int(gi.Info.Id) == id {
				return gi, nvml.SUCCESS
			}
		}
		return nil, nvml.ERROR_NOT_FOUND
	}
}

// partition puts a mock GPU in MIG mode with one GPU instance (and one
// full-size compute instance) per named profile, in order.
func (m *MockNVML) partition(g *MockGPU, seed, system string, profiles []string) error {
	d := g.Device
	if len(profiles) == 0 {
		return nil
	}
	byName := map[string]nvml.GpuInstanceProfileInfo{}
	var names []string
	for _, info := range d.Config.MIGProfiles.GpuInstanceProfiles {
		n := MIGProfileName(info)
		byName[n] = info
		names = append(names, n)
	}
	sort.Strings(names)
	slices := 0
	for _, p := range profiles {
		info, ok := byName[p]
		if !ok {
			return fmt.Errorf("unknown MIG profile %q for %s (have %v)", p, d.Config.Name, names)
		}
		slices += int(info.SliceCount)
	}
	if slices > 7 {
		return fmt.Errorf("profiles %v need %d slices; a GPU has 7", profiles, slices)
	}
	if ret, _ := d.SetMigMode(nvml.DEVICE_MIG_ENABLE); ret != nvml.SUCCESS {
		return fmt.Errorf("enable MIG: %s", nvml.ErrorString(ret))
	}
	for j, p := range profiles {
		info := byName[p]
		gi, ret := d.CreateGpuInstance(&info)
		if ret != nvml.SUCCESS {
			return fmt.Errorf("create GPU instance %q: %s", p, nvml.ErrorString(ret))
		}
		giInfo, _ := gi.GetInfo()
		uuid := mockUUID("MIG", seed, system, d.UUID, strconv.Itoa(j))
		mem := info.MemorySizeMB << 20
		giID := int(giInfo.Id)
		mig := &mock.Device{
			GetUUIDFunc: func() (string, nvml.Return) { return uuid, nvml.SUCCESS },
			GetMemoryInfoFunc: func() (nvml.Memory, nvml.Return) {
				return nvml.Memory{Total: mem, Free: mem}, nvml.SUCCESS
			},
			GetGpuInstanceIdFunc:                   func() (int, nvml.Return) { return giID, nvml.SUCCESS },
			GetComputeInstanceIdFunc:               func() (int, nvml.Return) { return 0, nvml.SUCCESS },
			IsMigDeviceHandleFunc:                  func() (bool, nvml.Return) { return true, nvml.SUCCESS },
			GetDeviceHandleFromMigDeviceHandleFunc: func() (nvml.Device, nvml.Return) { return g, nvml.SUCCESS },
		}
		g.MIG = append(g.MIG, mig)
		g.migUUIDs = append(g.migUUIDs, uuid)
	}
	return nil
}

// MIGProfileName names a GPU instance profile the way nvidia-smi does:
// "<slices>g.<memory>gb", with the media-engine suffix where it has one.
func MIGProfileName(info nvml.GpuInstanceProfileInfo) string {
	name := fmt.Sprintf("%dg.%dgb", info.SliceCount, int(math.Round(float64(info.MemorySizeMB)/1024)))
	switch info.Id {
	case nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV1, nvml.GPU_INSTANCE_PROFILE_2_SLICE_REV1:
		name += "+me"
	case nvml.GPU_INSTANCE_PROFILE_1_SLICE_GFX, nvml.GPU_INSTANCE_PROFILE_2_SLICE_GFX,
		nvml.GPU_INSTANCE_PROFILE_3_SLICE_GFX, nvml.GPU_INSTANCE_PROFILE_4_SLICE_GFX:
		name += "+gfx"
	case nvml.GPU_INSTANCE_PROFILE_1_SLICE_NO_ME, nvml.GPU_INSTANCE_PROFILE_2_SLICE_NO_ME:
		name += "-me"
	case nvml.GPU_INSTANCE_PROFILE_1_SLICE_ALL_ME, nvml.GPU_INSTANCE_PROFILE_2_SLICE_ALL_ME:
		name += "+me.all"
	}
	return name
}
