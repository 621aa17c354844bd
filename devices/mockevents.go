package devices

import (
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	hclog "github.com/hashicorp/go-hclog"
)

// FeedEvents turns lines appended to path into NVML events on the mock, so
// that demos and end-to-end tests can break a mock GPU the way a driver
// would report it. Each line is "<UUID> xid <N>" or "<UUID> ecc"; a MIG
// UUID targets its instance. Two more lines change the GPU's state instead
// of sending an event: "<UUID> lost" makes every query of it fail with
// GPU_IS_LOST, as a GPU that fell off the bus does, and "<UUID> reset"
// makes it answer again with nothing pending, as after a GPU reset (a MIG
// UUID acts on its parent). The file is polled twice a second from its
// current end until ctx ends; it need not exist yet.
func (m *MockNVML) FeedEvents(ctx context.Context, path string, log hclog.Logger) {
	var offset int64
	if fi, err := os.Stat(path); err == nil {
		offset = fi.Size()
	}
	var partial string
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		f, err := os.Open(path)
		if err != nil {
			continue
		}
		if fi, err := f.Stat(); err == nil && fi.Size() < offset {
			offset = 0 // truncated: start over
		}
		if _, err := f.Seek(offset, io.SeekStart); err != nil {
			_ = f.Close()
			continue
		}
		data, err := io.ReadAll(io.LimitReader(f, 1<<20))
		_ = f.Close()
		if err != nil {
			continue
		}
		offset += int64(len(data))
		text := partial + string(data)
		lines := strings.Split(text, "\n")
		partial = lines[len(lines)-1]
		for _, line := range lines[:len(lines)-1] {
			if strings.TrimSpace(line) == "" {
				continue
			}
			if g, f, ok := m.parseStateLine(line); ok {
				log.Info("changing mock GPU state", "line", strings.TrimSpace(line))
				g.Update(f)
				continue
			}
			ev, err := m.parseEventLine(line)
			if err != nil {
				log.Warn("ignoring mock event line", "file", path, "line", line, "error", err)
				continue
			}
			log.Info("injecting mock NVML event", "line", strings.TrimSpace(line))
			select {
			case m.events <- ev:
			case <-ctx.Done():
				return
			}
		}
	}
}

// parseStateLine reads "<UUID> lost" or "<UUID> reset".
func (m *MockNVML) parseStateLine(line string) (*MockGPU, func(*MockGPU), bool) {
	f := strings.Fields(line)
	if len(f) != 2 {
		return nil, nil, false
	}
	var change func(*MockGPU)
	switch strings.ToLower(f[1]) {
	case "lost":
		change = func(g *MockGPU) { g.Err = nvml.ERROR_GPU_IS_LOST }
	case "reset":
		change = func(g *MockGPU) {
			g.Err = nvml.SUCCESS
			g.RemapPending, g.RetirePending = false, false
			g.Recovery = nvml.GPU_RECOVERY_ACTION_NONE
		}
	default:
		return nil, nil, false
	}
	for _, g := range m.devices {
		if g.UUID == f[0] {
			return g, change, true
		}
		for _, mig := range g.MIG {
			if u, _ := mig.GetUUID(); u == f[0] {
				return g, change, true
			}
		}
	}
	return nil, nil, false
}

func (m *MockNVML) parseEventLine(line string) (nvml.EventData, error) {
	f := strings.Fields(line)
	if len(f) < 2 {
		return nvml.EventData{}, fmt.Errorf(`want "<UUID> xid <N>" or "<UUID> ecc"`)
	}
	ev := nvml.EventData{GpuInstanceId: allGIs}
	found := false
	for _, g := range m.devices {
		if g.UUID == f[0] {
			ev.Device, found = g, true
		}
		for _, mig := range g.MIG {
			if u, _ := mig.GetUUID(); u == f[0] {
				gi, _ := mig.GetGpuInstanceId()
				ev.Device, ev.GpuInstanceId, found = g, uint32(gi), true
			}
		}
	}
	if !found {
		return nvml.EventData{}, fmt.Errorf("no mock GPU has UUID %s", f[0])
	}
	switch strings.ToLower(f[1]) {
	case "xid":
		if len(f) < 3 {
			return nvml.EventData{}, fmt.Errorf("xid needs a number")
		}
		n, err := strconv.ParseUint(f[2], 10, 64)
		if err != nil {
			return nvml.EventData{}, fmt.Errorf("bad xid %q", f[2])
		}
		ev.EventType, ev.EventData = nvml.EventTypeXidCriticalError, n
	case "ecc":
		ev.EventType = nvml.EventTypeDoubleBitEccError
	default:
		return nvml.EventData{}, fmt.Errorf("unknown event %q (want xid or ecc)", f[1])
	}
	return ev, nil
}
