package devices

import (
	"fmt"
	"sort"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
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

	dev    nvml.Device // the handle for stats
	parent nvml.Device // the parent's handle, for a MIG instance
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

// scan enumerates NVML's devices. A device NVML cannot describe is returned
// with Err set (and the UUID it had at the last good scan, from known), so
// that it is reported unhealthy rather than disappearing.
func scan(lib nvml.Interface, known map[int]string) ([]GPU, error) {
	n, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("nvml device count: %s", nvml.ErrorString(ret))
	}
	driver, ret := lib.SystemGetDriverVersion()
	if ret != nvml.SUCCESS {
		driver = ""
	}
	var out []GPU
	for i := 0; i < n; i++ {
		dev, ret := lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			if uuid, ok := known[i]; ok {
				out = append(out, GPU{UUID: uuid, Index: i, Minor: -1, Err: fmt.Errorf("NVML: device %d: %s", i, nvml.ErrorString(ret))})
			}
			continue
		}
		gpus, err := describe(dev, i, driver)
		if err != nil {
			if uuid, ok := known[i]; ok {
				out = append(out, GPU{UUID: uuid, Index: i, Minor: -1, Err: err, dev: dev})
			}
			continue
		}
		out = append(out, gpus...)
	}
	return out, nil
}

// describe reads one GPU, and its MIG instances when MIG is on. With MIG on,
// only the instances are returned: the parent is not schedulable.
func describe(dev nvml.Device, index int, driver string) ([]GPU, error) {
	uuid, ret := dev.GetUUID()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("NVML: device %d uuid: %s", index, nvml.ErrorString(ret))
	}
	name, ret := dev.GetName()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("NVML: %s name: %s", uuid, nvml.ErrorString(ret))
	}
	mem, ret := dev.GetMemoryInfo()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("NVML: %s memory: %s", uuid, nvml.ErrorString(ret))
	}
	g := GPU{UUID: uuid, Group: name, Index: index, Minor: -1, dev: dev}
	if minor, ret := dev.GetMinorNumber(); ret == nvml.SUCCESS {
		g.Minor = minor
	}
	if pci, ret := dev.GetPciInfo(); ret == nvml.SUCCESS {
		g.PCIBusID = busID(pci.BusId[:])
	}
	a := Attrs{MemoryMiB: int64(mem.Total >> 20), DriverVersion: driver}
	if mw, ret := dev.GetEnforcedPowerLimit(); ret == nvml.SUCCESS {
		a.PowerLimitW = int64(mw / 1000)
	}
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

	if cur, _, ret := dev.GetMigMode(); ret == nvml.SUCCESS && cur == nvml.DEVICE_MIG_ENABLE {
		return describeMIG(g)
	}
	return []GPU{g}, nil
}

func describeMIG(parent GPU) ([]GPU, error) {
	dev := parent.dev
	count, ret := dev.GetMaxMigDeviceCount()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("NVML: %s MIG device count: %s", parent.UUID, nvml.ErrorString(ret))
	}
	var out []GPU
	for j := 0; j < count; j++ {
		mig, ret := dev.GetMigDeviceHandleByIndex(j)
		if ret == nvml.ERROR_NOT_FOUND || ret == nvml.ERROR_INVALID_ARGUMENT {
			continue // an empty slot
		}
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("NVML: %s MIG device %d: %s", parent.UUID, j, nvml.ErrorString(ret))
		}
		uuid, ret := mig.GetUUID()
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("NVML: %s MIG device %d uuid: %s", parent.UUID, j, nvml.ErrorString(ret))
		}
		mem, ret := mig.GetMemoryInfo()
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("NVML: %s memory: %s", uuid, nvml.ErrorString(ret))
		}
		giID, ret := mig.GetGpuInstanceId()
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("NVML: %s GPU instance id: %s", uuid, nvml.ErrorString(ret))
		}
		gi, ret := dev.GetGpuInstanceById(giID)
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("NVML: %s GPU instance %d: %s", uuid, giID, nvml.ErrorString(ret))
		}
		info, ret := gi.GetInfo()
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("NVML: %s GPU instance %d info: %s", uuid, giID, nvml.ErrorString(ret))
		}
		prof, ret := dev.GetGpuInstanceProfileInfo(int(info.ProfileId))
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("NVML: %s MIG profile %d: %s", uuid, info.ProfileId, nvml.ErrorString(ret))
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
			dev:        mig,
			parent:     dev,
		})
	}
	return out, nil
}

// busID turns NVML's NUL-padded C string into a Go string.
func busID(b []int8) string {
	var sb strings.Builder
	for _, c := range b {
		if c == 0 {
			break
		}
		sb.WriteByte(byte(c))
	}
	return strings.TrimSpace(sb.String())
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
