// Package nvmlseam is llmgw's one way into NVIDIA's NVML, shared by the
// device plugin (devices/) and the task driver (driver/): the library and
// device interfaces they program against (Lib, Device), the real library
// behind them (Open), the helpers both need to name a device, and the one
// rule that binds allocated devices to CUDA (Topology, Binding): whole GPUs
// as CUDA indices in PCI bus order under CUDA_DEVICE_ORDER=PCI_BUS_ID, MIG
// instances by UUID. The device plugin's Reserve and the driver both bind
// through it, so they cannot disagree on the rule.
//
// go-nvml's real binding (nvml.New) and its mocks
// (github.com/NVIDIA/go-nvml/pkg/nvml/mock, and the DGX systems under
// mock/) satisfy Lib and Device as they are, so a test hands a mock to the
// very code that runs on a GPU host. The interfaces list only what llmgw
// reads, and the one thing it sets (a GPU's power limit, for the device
// plugin's power caps), so a reader sees at a glance which NVML calls the
// plugins depend on. A handle keeps its dynamic type: NVML's handles (and the mocks') are
// the values go-nvml returns, compared and passed back to it unchanged.
//
// This package links no mock: the binaries that import it (the device
// plugin, the driver) get the real library only; the device plugin's mock
// mode builds its own mock in devices/.
package nvmlseam

import (
	"strconv"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// Lib is what llmgw uses of the NVML library.
type Lib interface {
	Init() nvml.Return
	Shutdown() nvml.Return
	SystemGetDriverVersion() (string, nvml.Return)
	DeviceGetCount() (int, nvml.Return)
	DeviceGetHandleByIndex(index int) (nvml.Device, nvml.Return)
	// DeviceGetHandleByUUID takes a GPU-… or a MIG-… UUID.
	DeviceGetHandleByUUID(uuid string) (nvml.Device, nvml.Return)
	EventSetCreate() (nvml.EventSet, nvml.Return)
}

// Device is what llmgw reads of one NVML device handle (a whole GPU or a
// MIG instance) and the power limit it sets on a whole GPU.
type Device interface {
	// Identity and place on the host.
	GetUUID() (string, nvml.Return)
	GetIndex() (int, nvml.Return)
	GetName() (string, nvml.Return)
	GetMinorNumber() (int, nvml.Return)
	GetPciInfo() (nvml.PciInfo, nvml.Return)

	// What the board can do.
	GetMemoryInfo() (nvml.Memory, nvml.Return)
	GetBAR1MemoryInfo() (nvml.BAR1Memory, nvml.Return)
	GetCudaComputeCapability() (int, int, nvml.Return)
	GetMaxClockInfo(nvml.ClockType) (uint32, nvml.Return)
	GetMaxPcieLinkGeneration() (int, nvml.Return)
	GetMaxPcieLinkWidth() (int, nvml.Return)

	// Power, temperature, use and wear.
	GetEnforcedPowerLimit() (uint32, nvml.Return)
	// The range a power limit may be set in and the board's default, in
	// mW; SetPowerManagementLimit sets the limit (root only on real GPUs:
	// NO_PERMISSION otherwise; INVALID_ARGUMENT outside the range).
	GetPowerManagementLimitConstraints() (minMW, maxMW uint32, ret nvml.Return)
	GetPowerManagementDefaultLimit() (uint32, nvml.Return)
	SetPowerManagementLimit(mw uint32) nvml.Return
	GetPowerUsage() (uint32, nvml.Return)
	GetTemperature(nvml.TemperatureSensors) (uint32, nvml.Return)
	GetUtilizationRates() (nvml.Utilization, nvml.Return)
	GetTotalEccErrors(nvml.MemoryErrorType, nvml.EccCounterType) (uint64, nvml.Return)
	GetTotalEnergyConsumption() (uint64, nvml.Return)

	// Traces of past faults, and events.
	GetRemappedRows() (int, int, bool, bool, nvml.Return)
	GetRetiredPagesPendingStatus() (nvml.EnableState, nvml.Return)
	GetFieldValues([]nvml.FieldValue) nvml.Return
	RegisterEvents(uint64, nvml.EventSet) nvml.Return

	// MIG.
	GetMigMode() (int, int, nvml.Return)
	GetMaxMigDeviceCount() (int, nvml.Return)
	GetMigDeviceHandleByIndex(int) (nvml.Device, nvml.Return)
	GetGpuInstanceId() (int, nvml.Return)
	GetGpuInstanceById(int) (nvml.GpuInstance, nvml.Return)
	GetGpuInstanceProfileInfo(int) (nvml.GpuInstanceProfileInfo, nvml.Return)

	// Processes.
	GetComputeRunningProcesses() ([]nvml.ProcessInfo, nvml.Return)
}

// go-nvml's library and device handles are a Lib and a Device.
var (
	_ Lib    = nvml.Interface(nil)
	_ Device = nvml.Device(nil)
)

// Open returns the host's NVML library (libnvidia-ml.so.1). Nothing is
// loaded until Init; on a host without the library Init returns
// nvml.ERROR_LIBRARY_NOT_FOUND rather than failing here.
func Open() Lib { return nvml.New() }

// Explain renders an NVML return code for an operator without needing the
// library, naming the library file when it is missing.
func Explain(ret nvml.Return) string {
	if ret == nvml.ERROR_LIBRARY_NOT_FOUND {
		return "NVML library (libnvidia-ml.so.1) not found"
	}
	return ret.Error()
}

// DeviceByID finds the device that one CUDA_VISIBLE_DEVICES entry names: an
// integer is an NVML index, anything else a UUID (GPU-… or MIG-…).
func DeviceByID(lib Lib, id string) (nvml.Device, nvml.Return) {
	if n, err := strconv.Atoi(id); err == nil {
		return lib.DeviceGetHandleByIndex(n)
	}
	return lib.DeviceGetHandleByUUID(id)
}

// BusID is a device's PCI bus id ("00000000:18:00.0") from NVML's
// NUL-padded C string.
func BusID(pci nvml.PciInfo) string {
	var sb strings.Builder
	for _, c := range pci.BusId {
		if c == 0 {
			break
		}
		sb.WriteByte(byte(c))
	}
	return strings.TrimSpace(sb.String())
}
