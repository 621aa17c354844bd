package devices

import (
	"strings"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"google.golang.org/protobuf/types/known/timestamppb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/llmgw/llmgw/devicesapi"
	"github.com/llmgw/llmgw/internal/nvmlseam"
	"github.com/llmgw/llmgw/nomadplugin/pb/devicepb"
	"github.com/llmgw/llmgw/nomadplugin/pb/structspb"
)

// Stats reads one sample of every device. Whole GPUs summarise as power
// draw against the enforced limit; MIG instances, which share their parent's
// power, summarise as memory used.
func (m *Manager) Stats() []*devicepb.DeviceGroupStats {
	m.mu.Lock()
	gpus := append([]GPU(nil), m.gpus...)
	m.mu.Unlock()
	now := timestamppb.New(time.Now())
	groups := map[string]*devicepb.DeviceGroupStats{}
	var order []string
	for _, g := range gpus {
		if g.dev == nil || g.Group == "" {
			continue
		}
		grp, ok := groups[g.Group]
		if !ok {
			grp = &devicepb.DeviceGroupStats{Vendor: Vendor, Type: DeviceType, Name: g.Group, InstanceStats: map[string]*devicepb.DeviceStats{}}
			groups[g.Group] = grp
			order = append(order, g.Group)
		}
		grp.InstanceStats[g.UUID] = deviceStats(g, now, m.caps)
	}
	out := make([]*devicepb.DeviceGroupStats, 0, len(order))
	for _, n := range order {
		out = append(out, groups[n])
	}
	return out
}

func deviceStats(g GPU, now *timestamppb.Timestamp, caps *capper) *devicepb.DeviceStats {
	board := g.dev
	if g.parent != nil {
		board = g.parent
	}
	attrs := map[string]*structspb.StatValue{}
	powerLimits(attrs, g.board(), board, caps)
	var power, memory *structspb.StatValue
	if mw, ret := board.GetPowerUsage(); ret == nvml.SUCCESS {
		power = &structspb.StatValue{FloatNumeratorVal: wrapperspb.Double(float64(mw) / 1000), Unit: "W", Desc: "Power draw"}
		if lim, ret := board.GetEnforcedPowerLimit(); ret == nvml.SUCCESS && lim > 0 {
			power.FloatDenominatorVal = wrapperspb.Double(float64(lim) / 1000)
			power.Desc = "Power draw of enforced power limit"
		}
		attrs[devicesapi.StatPowerDraw] = power
	}
	if t, ret := board.GetTemperature(nvml.TEMPERATURE_GPU); ret == nvml.SUCCESS {
		attrs["temperature"] = intStat(int64(t), "C", "GPU temperature")
	}
	if g.parent == nil {
		if u, ret := g.dev.GetUtilizationRates(); ret == nvml.SUCCESS {
			attrs["gpu_utilization"] = intStat(int64(u.Gpu), "%", "GPU utilisation")
			attrs["memory_utilization"] = intStat(int64(u.Memory), "%", "Memory bandwidth utilisation")
		}
	}
	if mem, ret := g.dev.GetMemoryInfo(); ret == nvml.SUCCESS {
		memory = &structspb.StatValue{
			IntNumeratorVal:   wrapperspb.Int64(int64(mem.Used >> 20)),
			IntDenominatorVal: wrapperspb.Int64(int64(mem.Total >> 20)),
			Unit:              "MiB",
			Desc:              "Memory used of total",
		}
		attrs["memory"] = memory
	}
	if c, ret := board.GetTotalEccErrors(nvml.MEMORY_ERROR_TYPE_CORRECTED, nvml.VOLATILE_ECC); ret == nvml.SUCCESS {
		attrs["ecc_errors_corrected"] = intStat(int64(c), "", "Corrected ECC errors since driver load")
	}
	if c, ret := board.GetTotalEccErrors(nvml.MEMORY_ERROR_TYPE_UNCORRECTED, nvml.VOLATILE_ECC); ret == nvml.SUCCESS {
		attrs["ecc_errors_uncorrected"] = intStat(int64(c), "", "Uncorrected ECC errors since driver load")
	}
	if e, ret := board.GetTotalEnergyConsumption(); ret == nvml.SUCCESS {
		attrs["energy"] = intStat(int64(e), "mJ", "Energy since driver load")
	}
	if g.Parent != "" {
		// MIG instances report their parent's power; name the parent so that
		// a consumer summing a node's draw counts each board once.
		attrs[devicesapi.StatParent] = &structspb.StatValue{StringVal: wrapperspb.String(g.Parent), Desc: "Parent GPU of this MIG instance"}
	}
	summary := power
	if g.parent != nil || summary == nil {
		summary = memory
	}
	return &devicepb.DeviceStats{
		Summary:   summary,
		Stats:     &structspb.StatObject{Attributes: attrs},
		Timestamp: now,
	}
}

// powerLimits adds the board's power limits (W) and its cap state: what the
// controller reads back to see its caps in place.
func powerLimits(attrs map[string]*structspb.StatValue, uuid string, board nvmlseam.Device, caps *capper) {
	enforced, ret := board.GetEnforcedPowerLimit()
	if ret != nvml.SUCCESS {
		return
	}
	attrs[devicesapi.StatEnforcedLimit] = wattStat(enforced, "Enforced power limit")
	def, ret := board.GetPowerManagementDefaultLimit()
	if ret == nvml.SUCCESS {
		attrs[devicesapi.StatDefaultLimit] = wattStat(def, "Default power limit")
	}
	if lo, hi, ret := board.GetPowerManagementLimitConstraints(); ret == nvml.SUCCESS {
		attrs[devicesapi.StatMinLimit] = wattStat(lo, "Lowest power limit the GPU accepts")
		attrs[devicesapi.StatMaxLimit] = wattStat(hi, "Highest power limit the GPU accepts")
	}
	var st CapState
	ok := false
	if caps != nil {
		st, ok = caps.State(uuid)
	}
	if !ok || (!strings.HasPrefix(st.State, "error:") && st.EnforcedW != watts(enforced)) {
		// No capper, or the limit moved since it looked: say what NVML
		// says.
		st = (&capGPU{enforcedMW: enforced, defaultMW: def}).state()
	}
	attrs[devicesapi.StatPowerCap] = &structspb.StatValue{StringVal: wrapperspb.String(st.State), Desc: "Power cap: who set the enforced limit"}
}

func wattStat(mw uint32, desc string) *structspb.StatValue {
	return &structspb.StatValue{FloatNumeratorVal: wrapperspb.Double(watts(mw)), Unit: "W", Desc: desc}
}

func intStat(v int64, unit, desc string) *structspb.StatValue {
	return &structspb.StatValue{IntNumeratorVal: wrapperspb.Int64(v), Unit: unit, Desc: desc}
}
