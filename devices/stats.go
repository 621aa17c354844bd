package devices

import (
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"google.golang.org/protobuf/types/known/timestamppb"
	"google.golang.org/protobuf/types/known/wrapperspb"

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
		grp.InstanceStats[g.UUID] = deviceStats(g, now)
	}
	out := make([]*devicepb.DeviceGroupStats, 0, len(order))
	for _, n := range order {
		out = append(out, groups[n])
	}
	return out
}

func deviceStats(g GPU, now *timestamppb.Timestamp) *devicepb.DeviceStats {
	board := g.dev
	if g.parent != nil {
		board = g.parent
	}
	attrs := map[string]*structspb.StatValue{}
	var power, memory *structspb.StatValue
	if mw, ret := board.GetPowerUsage(); ret == nvml.SUCCESS {
		power = &structspb.StatValue{FloatNumeratorVal: wrapperspb.Double(float64(mw) / 1000), Unit: "W", Desc: "Power draw"}
		if lim, ret := board.GetEnforcedPowerLimit(); ret == nvml.SUCCESS && lim > 0 {
			power.FloatDenominatorVal = wrapperspb.Double(float64(lim) / 1000)
			power.Desc = "Power draw of enforced power limit"
		}
		attrs["power_draw"] = power
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
		attrs["parent"] = &structspb.StatValue{StringVal: wrapperspb.String(g.Parent), Desc: "Parent GPU of this MIG instance"}
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

func intStat(v int64, unit, desc string) *structspb.StatValue {
	return &structspb.StatValue{IntNumeratorVal: wrapperspb.Int64(v), Unit: unit, Desc: desc}
}
