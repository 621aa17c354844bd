package controller

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/hashicorp/nomad/api"
	promapi "github.com/prometheus/client_golang/api"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"

	"github.com/llmgw/llmgw/controller/config"
	"github.com/llmgw/llmgw/controller/observe"
)

// The Prometheus source of GPU draw (power_source { prometheus { … } },
// docs/power.md, "Where the draw is read"). Operators of GPU fleets run
// NVIDIA's dcgm-exporter, scraped by Prometheus; its draw series is
// DCGM_FI_DEV_POWER_USAGE, a gauge in W (etc/default-counters.csv of
// github.com/NVIDIA/dcgm-exporter at d5e5f510a1b6b393f39a43293ccd9dc985defc79:
// "DCGM_FI_DEV_POWER_USAGE, gauge, Power draw (in W)."), one series per GPU
// with its UUID in the label UUID ("uuid" with --use-old-namespace:
// internal/pkg/collector/gpu_collector.go, toMetric; the labels are written
// by internal/pkg/rendermetrics/render_metrics.go, gpuMetricsFormat: gpu,
// UUID, pci_bus_id, device, modelName, GPU_I_PROFILE and GPU_I_ID for a MIG
// instance, whose UUID is its parent GPU's, and the host's name, "Hostname"
// before that commit and "hostname" from it on). The UUID is NVML's, the
// same the device plugin offers as the GPU's device ID (devices/scan.go)
// and names its readings by (observe.GPUReadings).
//
// Every power round runs one instant query, through client_golang's
// api/prometheus/v1 client:
//
//	max by (<uuid_label>) (last_over_time(<selector>[<max_age>]))
//
// which answers each GPU's newest sample no older than max_age, once per
// UUID (a MIG instance's series and a GPU scraped twice fold into one, at
// the larger). A GPU with no such sample has no Prometheus reading.

// promPower runs the draw query.
type promPower struct {
	api     promv1.API
	address string
	query   string
	label   model.LabelName
	// statsEvery is client_stats_interval: how old a covered node's client
	// stats may grow before they are read again.
	statsEvery time.Duration
}

func newPromPower(p config.PowerPrometheus) (*promPower, error) {
	client, err := promapi.NewClient(promapi.Config{
		Address:      p.Address,
		RoundTripper: &http.Transport{Proxy: http.ProxyFromEnvironment, MaxIdleConnsPerHost: 2, IdleConnTimeout: time.Minute},
	})
	if err != nil {
		return nil, fmt.Errorf("power_source prometheus %s: %w", p.Address, err)
	}
	q := fmt.Sprintf("max by (%s) (last_over_time(%s[%s]))", p.UUIDLabel, strings.TrimSpace(p.Selector), model.Duration(p.MaxAge))
	return &promPower{api: promv1.NewAPI(client), address: p.Address, query: q, label: model.LabelName(p.UUIDLabel), statsEvery: p.ClientStatsInterval}, nil
}

// draws runs the query at the wall clock's now (Prometheus holds real
// time), within callTimeout, and returns each GPU's draw in W by UUID. A
// query that fails, or answers anything but an instant vector, is an
// error: the round reads client stats. A sample without the UUID label,
// or whose value is not a draw (NaN, infinite, negative), is left out.
func (p *promPower) draws(ctx context.Context) (map[string]float64, error) {
	qctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	v, _, _, err := p.api.Query(qctx, p.query, time.Now(), promv1.WithTimeout(callTimeout))
	if err != nil {
		return nil, fmt.Errorf("prometheus %s: query %q: %s", p.address, p.query, oneLine(err.Error()))
	}
	vec, ok := v.(model.Vector)
	if !ok {
		return nil, fmt.Errorf("prometheus %s: query %q answered a %s, want an instant vector", p.address, p.query, v.Type())
	}
	return vectorDraws(vec, p.label), nil
}

// vectorDraws maps a vector's samples to GPU UUIDs by label: the larger
// where two name one GPU.
func vectorDraws(vec model.Vector, label model.LabelName) map[string]float64 {
	out := make(map[string]float64, len(vec))
	for _, s := range vec {
		id, w := string(s.Metric[label]), float64(s.Value)
		if id == "" || math.IsNaN(w) || math.IsInf(w, 0) || w < 0 {
			continue
		}
		if old, seen := out[id]; !seen || w > old {
			out[id] = w
		}
	}
	return out
}

// Where a round's readings come from (observe.GPUReading.From, and the
// reasons of llmgw_power_client_stats_reads_total).
const (
	fromPrometheus  = "prometheus"
	fromClientStats = "client_stats"

	// A node's client stats are read because: no Prometheus source is
	// configured, or its query failed this round;
	readNoSource = "no_source"
	// Prometheus has no sample within max_age for one of the node's GPUs,
	// or the node has not been read yet (its limits are not known), or its
	// GPUs changed since;
	readMissing = "missing"
	// its last read is older than client_stats_interval;
	readRefresh = "refresh"
	// the controller wrote its caps variable since its last read (its cap
	// state and limits move).
	readWritten = "written"
)

// nodeStats is a node's last client-stats read, for the rounds whose draw
// Prometheus gives: its GPUs' limits and cap state, which only client
// stats give.
type nodeStats struct {
	at   time.Time // wall clock
	devs string    // the node's GPU device IDs then (gpuDevices)
	gpus []observe.GPUReading
}

// gpuDevices names a node's NVIDIA GPU device instances, sorted: a change
// (a GPU added, removed, a MIG layout) makes its client stats be read
// again.
func gpuDevices(n *api.Node) string {
	if n.NodeResources == nil {
		return ""
	}
	var ids []string
	for _, d := range n.NodeResources.Devices {
		if d.Vendor != "nvidia" || d.Type != "gpu" {
			continue
		}
		for _, in := range d.Instances {
			if in != nil {
				ids = append(ids, in.ID)
			}
		}
	}
	sort.Strings(ids)
	return strings.Join(ids, ",")
}

// withDraws is a node's last client-stats read with every GPU's draw from
// draws (by UUID), and the node's power from them; false when a GPU of it
// has none.
func withDraws(s nodeStats, draws map[string]float64) ([]observe.GPUReading, observe.Power, bool) {
	if len(s.gpus) == 0 {
		return nil, observe.Power{}, false
	}
	out := make([]observe.GPUReading, len(s.gpus))
	var p observe.Power
	for i, g := range s.gpus {
		w, ok := draws[g.ID]
		if !ok {
			return nil, observe.Power{}, false
		}
		g.Watts, g.From = w, fromPrometheus
		out[i] = g
		p.GPUWatts += w
		p.Devices++
	}
	return out, p, true
}

// powerPlan is what one round reads through client stats: every node
// Prometheus does not cover (why[id] says why), then at most budget of the
// covered ones, those whose caps were written first, then the oldest
// read, among those due (written, or read longer than statsEvery ago).
type powerPlan struct {
	read []string
	why  map[string]string
}

// planPowerReads plans a round over the GPU nodes ids (sorted), with
// covered the nodes whose draws Prometheus gave for every GPU (nil: no
// source, or it failed), stats the nodes' last reads, written the nodes
// whose caps were written since (by ID).
func planPowerReads(ids []string, covered map[string]bool, stats map[string]nodeStats, written map[string]bool, now time.Time, statsEvery time.Duration, budget int) powerPlan {
	pl := powerPlan{why: map[string]string{}}
	var due []string
	for _, id := range ids {
		switch {
		case covered == nil:
			pl.why[id] = readNoSource
		case !covered[id]:
			pl.why[id] = readMissing
		case written[id]:
			pl.why[id] = readWritten
			due = append(due, id)
			continue
		case now.Sub(stats[id].at) >= statsEvery:
			pl.why[id] = readRefresh
			due = append(due, id)
			continue
		default:
			continue
		}
		pl.read = append(pl.read, id)
	}
	sort.SliceStable(due, func(i, j int) bool {
		a, b := due[i], due[j]
		if written[a] != written[b] {
			return written[a]
		}
		return stats[a].at.Before(stats[b].at)
	})
	for i, id := range due {
		if i >= budget {
			delete(pl.why, id)
			continue
		}
		pl.read = append(pl.read, id)
	}
	return pl
}
