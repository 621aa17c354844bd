package devices

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sort"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/llmgw/llmgw/internal/nvmlseam"
)

// GPU is one schedulable device: a whole GPU, or a MIG instance of one.
type GPU struct {
	UUID       string
	Group      string // device group name: the product, or "<product> MIG <profile>"
	Index      int    // NVML index of the GPU (of the parent, for MIG)
	Minor      int    // /dev/nvidia<Minor>; -1 when unknown
	PCIBusID   string
	Parent     string // parent GPU UUID for a MIG instance
	MIGProfile string
	GIID       int // MIG GPU instance id
	Attrs      Attrs
	// Err is set when NVML failed to answer for this device during the scan.
	Err error
	// Traces are what NVML still shows of past faults (a MIG instance
	// carries its parent's).
	Traces Traces

	dev    nvmlseam.Device // the handle for stats
	parent nvmlseam.Device // the parent's handle, for a MIG instance
}

// Attrs are the per-device attributes that feed the group's attributes.
type Attrs struct {
	MemoryMiB        int64
	PowerLimitW      int64 // 0 when unknown
	BAR1MiB          int64 // 0 when unsupported
	DriverVersion    string
	ComputeCap       string
	CoresClockMHz    int64
	MemoryClockMHz   int64
	PCIBandwidthMBps int64
	MIGSlices        int64
	ParentPowerW     int64 // MIG: the parent board's limit
}

// Traces are the lasting signs NVML keeps of past faults, read at every
// scan: the state XIDs 63, 64 and 154 leave behind. A query NVML does not
// support (an older GPU or driver, a MIG-enabled GPU) leaves its field at
// the zero value, which means "nothing known".
type Traces struct {
	// RemapPending: a row remapping is recorded and takes effect at the
	// next GPU reset (XID 63, Ampere and newer).
	RemapPending bool
	// RetirePending: a page retirement is recorded and takes effect at the
	// next driver load (XID 63, before Ampere).
	RetirePending bool
	// RemapFailed: a row remapping has failed on this GPU (XID 64);
	// NVIDIA's criterion for replacing the board. A reset does not clear it.
	RemapFailed bool
	// Recovery is what the driver says the GPU needs now (announced by
	// XID 154); GPU_RECOVERY_ACTION_NONE when nothing, or when unknown.
	Recovery nvml.DeviceGpuRecoveryAction
}

// nvmlError is an NVML failure that keeps NVML's return code, so health can
// tell "the GPU is gone" from other failures.
type nvmlError struct {
	msg string
	ret nvml.Return
}

func (e *nvmlError) Error() string { return e.msg }

// board is the physical GPU a device is on: itself, or a MIG instance's
// parent.
func (g GPU) board() string {
	if g.Parent != "" {
		return g.Parent
	}
	return g.UUID
}

// nvmlErrorf formats like fmt.Errorf and remembers ret.
func nvmlErrorf(ret nvml.Return, format string, args ...any) error {
	return &nvmlError{msg: fmt.Sprintf(format, args...), ret: ret}
}

// gone reports whether err is NVML saying the device has fallen off the bus
// or must be reset before it answers again (GPU_IS_LOST, RESET_REQUIRED).
func gone(err error) bool {
	var ne *nvmlError
	return errors.As(err, &ne) && goneRet(ne.ret)
}

// goneRet is gone for a bare NVML return code.
func goneRet(ret nvml.Return) bool {
	return ret == nvml.ERROR_GPU_IS_LOST || ret == nvml.ERROR_RESET_REQUIRED
}

// readTraces asks NVML for a whole GPU's traces; any query that fails
// leaves its field at "nothing known".
func readTraces(dev nvmlseam.Device) Traces {
	var t Traces
	if _, _, pending, failed, ret := dev.GetRemappedRows(); ret == nvml.SUCCESS {
		t.RemapPending, t.RemapFailed = pending, failed
	}
	if st, ret := dev.GetRetiredPagesPendingStatus(); ret == nvml.SUCCESS {
		t.RetirePending = st == nvml.FEATURE_ENABLED
	}
	vals := []nvml.FieldValue{{FieldId: nvml.FI_DEV_GET_GPU_RECOVERY_ACTION}}
	if ret := dev.GetFieldValues(vals); ret == nvml.SUCCESS && nvml.Return(vals[0].NvmlReturn) == nvml.SUCCESS {
		if v, ok := fieldUint(vals[0]); ok {
			t.Recovery = nvml.DeviceGpuRecoveryAction(v)
		}
	}
	return t
}

// fieldUint decodes an unsigned NVML field value (a C union, in the host's
// byte order).
func fieldUint(f nvml.FieldValue) (uint64, bool) {
	switch nvml.ValueType(f.ValueType) {
	case nvml.VALUE_TYPE_UNSIGNED_INT:
		return uint64(binary.NativeEndian.Uint32(f.Value[:4])), true
	case nvml.VALUE_TYPE_UNSIGNED_LONG, nvml.VALUE_TYPE_UNSIGNED_LONG_LONG:
		return binary.NativeEndian.Uint64(f.Value[:]), true
	case nvml.VALUE_TYPE_UNSIGNED_SHORT:
		return uint64(binary.NativeEndian.Uint16(f.Value[:2])), true
	}
	return 0, false
}

// scan enumerates NVML's devices. A device NVML cannot describe is returned
// with Err set (and the UUID it had at the last good scan, from known), so
// that it is reported unhealthy rather than disappearing. A GPU that fails
// without a known UUID (a MIG-enabled one: only its instances are offered)
// but still gives NVML its UUID is in unlisted, with the error.
func scan(lib nvmlseam.Lib, known map[int]string) ([]GPU, map[string]error, error) {
	n, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nil, nil, nvmlErrorf(ret, "nvml device count: %s", nvml.ErrorString(ret))
	}
	unlisted := map[string]error{}
	driver, ret := lib.SystemGetDriverVersion()
	if ret != nvml.SUCCESS {
		driver = ""
	}
	var out []GPU
	for i := 0; i < n; i++ {
		dev, ret := lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			if uuid, ok := known[i]; ok {
				out = append(out, GPU{UUID: uuid, Index: i, Minor: -1, Err: nvmlErrorf(ret, "NVML: device %d: %s", i, nvml.ErrorString(ret))})
			}
			continue
		}
		gs, err := describe(dev, i, driver)
		if err != nil {
			if uuid, ok := known[i]; ok {
				out = append(out, GPU{UUID: uuid, Index: i, Minor: -1, Err: err, dev: dev})
			} else if uuid, ret := dev.GetUUID(); ret == nvml.SUCCESS {
				unlisted[uuid] = err
			}
			continue
		}
		out = append(out, gs...)
	}
	return out, unlisted, nil
}

// describe reads one GPU, and its MIG instances when MIG is on. With MIG on,
// only the instances are returned: the parent is not schedulable.
func describe(dev nvmlseam.Device, index int, driver string) ([]GPU, error) {
	uuid, ret := dev.GetUUID()
	if ret != nvml.SUCCESS {
		return nil, nvmlErrorf(ret, "NVML: device %d uuid: %s", index, nvml.ErrorString(ret))
	}
	name, ret := dev.GetName()
	if ret != nvml.SUCCESS {
		return nil, nvmlErrorf(ret, "NVML: %s name: %s", uuid, nvml.ErrorString(ret))
	}
	mem, ret := dev.GetMemoryInfo()
	if ret != nvml.SUCCESS {
		return nil, nvmlErrorf(ret, "NVML: %s memory: %s", uuid, nvml.ErrorString(ret))
	}
	g := GPU{UUID: uuid, Group: name, Index: index, Minor: -1, dev: dev}
	if minor, ret := dev.GetMinorNumber(); ret == nvml.SUCCESS {
		g.Minor = minor
	}
	if pci, ret := dev.GetPciInfo(); ret == nvml.SUCCESS {
		g.PCIBusID = nvmlseam.BusID(pci)
	}
	a := Attrs{MemoryMiB: int64(mem.Total >> 20), DriverVersion: driver}
	a.PowerLimitW = boardLimitW(dev)
	if bar1, ret := dev.GetBAR1MemoryInfo(); ret == nvml.SUCCESS {
		a.BAR1MiB = int64(bar1.Bar1Total >> 20)
	}
	if maj, mnr, ret := dev.GetCudaComputeCapability(); ret == nvml.SUCCESS {
		a.ComputeCap = fmt.Sprintf("%d.%d", maj, mnr)
	}
	if c, ret := dev.GetMaxClockInfo(nvml.CLOCK_SM); ret == nvml.SUCCESS {
		a.CoresClockMHz = int64(c)
	}
	if c, ret := dev.GetMaxClockInfo(nvml.CLOCK_MEM); ret == nvml.SUCCESS {
		a.MemoryClockMHz = int64(c)
	}
	gen, ret1 := dev.GetMaxPcieLinkGeneration()
	width, ret2 := dev.GetMaxPcieLinkWidth()
	if ret1 == nvml.SUCCESS && ret2 == nvml.SUCCESS {
		a.PCIBandwidthMBps = pcieLaneMBps(gen) * int64(width)
	}
	g.Attrs = a
	g.Traces = readTraces(dev)

	if cur, _, ret := dev.GetMigMode(); ret == nvml.SUCCESS && cur == nvml.DEVICE_MIG_ENABLE {
		return describeMIG(g)
	}
	return []GPU{g}, nil
}

func describeMIG(parent GPU) ([]GPU, error) {
	dev := parent.dev
	count, ret := dev.GetMaxMigDeviceCount()
	if ret != nvml.SUCCESS {
		return nil, nvmlErrorf(ret, "NVML: %s MIG device count: %s", parent.UUID, nvml.ErrorString(ret))
	}
	var out []GPU
	for j := 0; j < count; j++ {
		mig, ret := dev.GetMigDeviceHandleByIndex(j)
		if ret == nvml.ERROR_NOT_FOUND || ret == nvml.ERROR_INVALID_ARGUMENT {
			continue // an empty slot
		}
		if ret != nvml.SUCCESS {
			return nil, nvmlErrorf(ret, "NVML: %s MIG device %d: %s", parent.UUID, j, nvml.ErrorString(ret))
		}
		uuid, ret := mig.GetUUID()
		if ret != nvml.SUCCESS {
			return nil, nvmlErrorf(ret, "NVML: %s MIG device %d uuid: %s", parent.UUID, j, nvml.ErrorString(ret))
		}
		mem, ret := mig.GetMemoryInfo()
		if ret != nvml.SUCCESS {
			return nil, nvmlErrorf(ret, "NVML: %s memory: %s", uuid, nvml.ErrorString(ret))
		}
		giID, ret := mig.GetGpuInstanceId()
		if ret != nvml.SUCCESS {
			return nil, nvmlErrorf(ret, "NVML: %s GPU instance id: %s", uuid, nvml.ErrorString(ret))
		}
		gi, ret := dev.GetGpuInstanceById(giID)
		if ret != nvml.SUCCESS {
			return nil, nvmlErrorf(ret, "NVML: %s GPU instance %d: %s", uuid, giID, nvml.ErrorString(ret))
		}
		info, ret := gi.GetInfo()
		if ret != nvml.SUCCESS {
			return nil, nvmlErrorf(ret, "NVML: %s GPU instance %d info: %s", uuid, giID, nvml.ErrorString(ret))
		}
		prof, ret := dev.GetGpuInstanceProfileInfo(int(info.ProfileId))
		if ret != nvml.SUCCESS {
			return nil, nvmlErrorf(ret, "NVML: %s MIG profile %d: %s", uuid, info.ProfileId, nvml.ErrorString(ret))
		}
		profile := MIGProfileName(prof)
		a := parent.Attrs
		a.MemoryMiB = int64(mem.Total >> 20)
		a.MIGSlices = int64(prof.SliceCount)
		a.ParentPowerW = parent.Attrs.PowerLimitW
		a.PowerLimitW = 0
		a.BAR1MiB = 0
		out = append(out, GPU{
			UUID:       uuid,
			Group:      parent.Group + " MIG " + profile,
			Index:      parent.Index,
			Minor:      parent.Minor,
			PCIBusID:   parent.PCIBusID,
			Parent:     parent.UUID,
			MIGProfile: profile,
			GIID:       giID,
			Attrs:      a,
			Traces:     parent.Traces,
			dev:        mig,
			parent:     dev,
		})
	}
	return out, nil
}

// boardLimitW is a GPU's power_limit attribute: its default power limit,
// not the enforced one, so that a power cap (the plugin's own, or an
// operator's) changes neither the fingerprint nor the draw placement derives
// from it. A GPU that does not report a default reports its enforced limit.
// 0 when neither answers.
func boardLimitW(dev nvmlseam.Device) int64 {
	if mw, ret := dev.GetPowerManagementDefaultLimit(); ret == nvml.SUCCESS && mw > 0 {
		return int64(mw / 1000)
	}
	if mw, ret := dev.GetEnforcedPowerLimit(); ret == nvml.SUCCESS {
		return int64(mw / 1000)
	}
	return 0
}

// pcieLaneMBps is the usable one-direction bandwidth of one PCIe lane.
func pcieLaneMBps(gen int) int64 {
	switch gen {
	case 1:
		return 250
	case 2:
		return 500
	case 3:
		return 985
	case 4:
		return 1969
	case 5:
		return 3938
	case 6:
		return 7563
	default:
		return 0
	}
}

// sortGPUs orders devices by NVML index, then UUID, the stable order used in
// fingerprints and reservations.
func sortGPUs(gs []GPU) {
	sort.SliceStable(gs, func(i, j int) bool {
		if gs[i].Index != gs[j].Index {
			return gs[i].Index < gs[j].Index
		}
		return gs[i].UUID < gs[j].UUID
	})
}
