package nvmlseam_test

import (
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh200"

	"github.com/llmgw/llmgw/internal/nvmlseam"
)

// go-nvml's mocks are what the seam's users test with: the plain mock and
// the DGX systems must both be a Lib, their devices a Device.
var (
	_ nvmlseam.Lib    = (*mock.Interface)(nil)
	_ nvmlseam.Device = (*mock.Device)(nil)
	_ nvmlseam.Lib    = dgxh200.New()
)

func TestDeviceByID(t *testing.T) {
	byIndex := &mock.Device{GetUUIDFunc: func() (string, nvml.Return) { return "GPU-by-index", nvml.SUCCESS }}
	byUUID := &mock.Device{GetUUIDFunc: func() (string, nvml.Return) { return "MIG-by-uuid", nvml.SUCCESS }}
	var asked []string
	lib := &mock.Interface{
		DeviceGetHandleByIndexFunc: func(i int) (nvml.Device, nvml.Return) {
			asked = append(asked, "index")
			if i != 3 {
				return nil, nvml.ERROR_INVALID_ARGUMENT
			}
			return byIndex, nvml.SUCCESS
		},
		DeviceGetHandleByUUIDFunc: func(uuid string) (nvml.Device, nvml.Return) {
			asked = append(asked, "uuid "+uuid)
			if uuid != "MIG-1" {
				return nil, nvml.ERROR_NOT_FOUND
			}
			return byUUID, nvml.SUCCESS
		},
	}
	for _, c := range []struct {
		id   string
		want string
		ret  nvml.Return
	}{
		{"3", "GPU-by-index", nvml.SUCCESS},
		{"MIG-1", "MIG-by-uuid", nvml.SUCCESS},
		{"7", "", nvml.ERROR_INVALID_ARGUMENT},
		{"GPU-x", "", nvml.ERROR_NOT_FOUND},
	} {
		dev, ret := nvmlseam.DeviceByID(lib, c.id)
		if ret != c.ret {
			t.Errorf("DeviceByID(%q): %v, want %v", c.id, ret, c.ret)
			continue
		}
		if ret != nvml.SUCCESS {
			continue
		}
		if uuid, _ := dev.GetUUID(); uuid != c.want {
			t.Errorf("DeviceByID(%q) = %s, want %s", c.id, uuid, c.want)
		}
	}
	if got := strings.Join(asked, "; "); got != "index; uuid MIG-1; index; uuid GPU-x" {
		t.Errorf("NVML calls: %s", got)
	}
}

func TestExplain(t *testing.T) {
	if got := nvmlseam.Explain(nvml.ERROR_LIBRARY_NOT_FOUND); got != "NVML library (libnvidia-ml.so.1) not found" {
		t.Errorf("library not found: %q", got)
	}
	if got, want := nvmlseam.Explain(nvml.ERROR_GPU_IS_LOST), nvml.ERROR_GPU_IS_LOST.Error(); got != want {
		t.Errorf("GPU lost: %q, want %q", got, want)
	}
}

func TestBusID(t *testing.T) {
	var pci nvml.PciInfo
	copy(pci.BusId[:], []int8{'0', '0', '0', '0', '0', '0', '0', '0', ':', '1', '8', ':', '0', '0', '.', '0', ' '})
	if got := nvmlseam.BusID(pci); got != "00000000:18:00.0" {
		t.Errorf("BusID = %q", got)
	}
	if got := nvmlseam.BusID(nvml.PciInfo{}); got != "" {
		t.Errorf("empty BusID = %q", got)
	}
}
