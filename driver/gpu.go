package driver

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	hclog "github.com/hashicorp/go-hclog"

	"github.com/llmgw/llmgw/driver/procfs"
	"github.com/llmgw/llmgw/internal/nvmlseam"
)

// GPU memory per process. Nomad's driver protocol has no GPU field in
// TaskStats (TaskResourceUsage holds CPU and memory only, and Nomad fills
// an allocation's device stats from the device plugin, per GPU, not per
// process), so the driver reports the GPU memory its engine holds where an
// operator looks: InspectTask attributes, the "Ready after" event (what
// loading took), and an event when it later moves by a good margin.

// gpuMeter opens NVML on first use. Without the library (no NVIDIA driver
// on the host) it logs that once and reports nothing.
type gpuMeter struct {
	open func() nvmlseam.Lib
	log  hclog.Logger

	once   sync.Once
	mu     sync.RWMutex // Shutdown unloads the library: no call may be in flight
	lib    nvmlseam.Lib // nil when unavailable or closed
	why    string       // why lib is nil
	closed bool
}

func newGPUMeter(log hclog.Logger, open func() nvmlseam.Lib) *gpuMeter {
	return &gpuMeter{open: open, log: log}
}

func (g *gpuMeter) init() {
	g.once.Do(func() {
		lib := g.open()
		ret := lib.Init()
		g.mu.Lock()
		defer g.mu.Unlock()
		if ret != nvml.SUCCESS {
			if !g.closed {
				g.why = "unavailable: " + nvmlseam.Explain(ret)
			}
			g.log.Info("GPU memory per process will not be reported: NVML is unavailable", "error", nvmlseam.Explain(ret))
			return
		}
		if g.closed {
			_ = lib.Shutdown()
			return
		}
		g.lib = lib
	})
}

// available reports whether NVML is open, opening it if need be, and if
// not, why.
func (g *gpuMeter) available() (bool, string) {
	g.init()
	g.mu.RLock()
	defer g.mu.RUnlock()
	return g.lib != nil, g.why
}

// measure returns the GPU memory that the processes in pids hold on gpus
// (CUDA_VISIBLE_DEVICES entries: UUIDs, MIG UUIDs or indices). ok is false
// when NVML is unavailable; why then says so.
func (g *gpuMeter) measure(gpus []string, pids map[int]bool) (u gpuUsage, ok bool, why string) {
	g.init()
	g.mu.RLock()
	defer g.mu.RUnlock()
	if g.lib == nil {
		return gpuUsage{}, false, g.why
	}
	return measureGPUs(g.lib, gpus, pids), true, ""
}

// topology reads the host's GPU topology from NVML, opening it if need
// be; the error says why when NVML is unavailable.
func (g *gpuMeter) topology() (nvmlseam.Topology, error) {
	g.init()
	g.mu.RLock()
	defer g.mu.RUnlock()
	if g.lib == nil {
		return nvmlseam.Topology{}, fmt.Errorf("NVML %s", g.why)
	}
	return nvmlseam.ReadTopology(g.lib)
}

// close shuts NVML down (once no measurement is in flight).
func (g *gpuMeter) close() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.closed = true
	if g.lib != nil {
		_ = g.lib.Shutdown()
	}
	g.lib, g.why = nil, "unavailable: the plugin is shutting down"
}

// gpuUsage is the GPU memory held by one task's processes.
type gpuUsage struct {
	GPUs   []gpuMem  // in the order of CUDA_VISIBLE_DEVICES
	Procs  []gpuProc // the task's processes found on its GPUs, by pid then GPU
	Used   uint64    // bytes held by the task's processes, all its GPUs
	Others uint64    // bytes held on the task's GPUs by processes outside the task
}

type gpuMem struct {
	ID     string
	Used   uint64 // by the task's processes
	Others uint64 // by other processes
	Err    string // why this GPU could not be read
}

type gpuProc struct {
	Pid  int
	GPU  string
	Used uint64
}

// notAvailable is NVML_VALUE_NOT_AVAILABLE in ProcessInfo.UsedGpuMemory
// (some virtualised GPUs do not account memory per process).
const notAvailable = ^uint64(0)

// measureGPUs asks NVML for the compute processes on each GPU and sums the
// memory of those in pids. A GPU that cannot be read is listed with its
// error and counts nothing.
func measureGPUs(lib nvmlseam.Lib, gpus []string, pids map[int]bool) gpuUsage {
	var u gpuUsage
	for _, id := range gpus {
		m := gpuMem{ID: id}
		dev, ret := nvmlseam.DeviceByID(lib, id)
		if ret != nvml.SUCCESS {
			m.Err = "find device: " + nvmlseam.Explain(ret)
			u.GPUs = append(u.GPUs, m)
			continue
		}
		procs, ret := dev.GetComputeRunningProcesses()
		if ret != nvml.SUCCESS {
			m.Err = "list compute processes: " + nvmlseam.Explain(ret)
			u.GPUs = append(u.GPUs, m)
			continue
		}
		for _, p := range procs {
			used := p.UsedGpuMemory
			if used == notAvailable {
				used = 0
			}
			if pids[int(p.Pid)] {
				m.Used += used
				u.Procs = append(u.Procs, gpuProc{Pid: int(p.Pid), GPU: id, Used: used})
			} else {
				m.Others += used
			}
		}
		u.Used += m.Used
		u.Others += m.Others
		u.GPUs = append(u.GPUs, m)
	}
	sort.SliceStable(u.Procs, func(i, j int) bool { return u.Procs[i].Pid < u.Procs[j].Pid })
	return u
}

// attributes are the InspectTask attributes for u.
func (u gpuUsage) attributes() map[string]string {
	a := map[string]string{
		"gpu_memory_used":       formatBytes(u.Used),
		"gpu_memory_used_bytes": strconv.FormatUint(u.Used, 10),
	}
	var byGPU, errs []string
	for _, g := range u.GPUs {
		if g.Err != "" {
			errs = append(errs, g.ID+": "+g.Err)
			continue
		}
		byGPU = append(byGPU, g.ID+" "+formatBytes(g.Used))
	}
	a["gpu_memory_by_gpu"] = strings.Join(byGPU, ", ")
	byPid := map[int]uint64{}
	var order []int
	for _, p := range u.Procs {
		if _, ok := byPid[p.Pid]; !ok {
			order = append(order, p.Pid)
		}
		byPid[p.Pid] += p.Used
	}
	parts := make([]string, 0, len(order))
	for _, pid := range order {
		parts = append(parts, strconv.Itoa(pid)+" "+formatBytes(byPid[pid]))
	}
	a["gpu_memory_by_pid"] = strings.Join(parts, ", ")
	if u.Others > 0 {
		a["gpu_memory_others"] = formatBytes(u.Others)
	}
	if len(errs) > 0 {
		a["gpu_memory_errors"] = strings.Join(errs, "; ")
	}
	return a
}

// summary is the phrase events use: "35.2 GiB of GPU memory on 2 GPUs".
func (u gpuUsage) summary() string {
	n := 0
	for _, g := range u.GPUs {
		if g.Err == "" {
			n++
		}
	}
	s := fmt.Sprintf("%s of GPU memory on %d GPU", formatBytes(u.Used), n)
	if n != 1 {
		s += "s"
	}
	return s
}

// formatBytes renders a size in binary units with one decimal.
func formatBytes(b uint64) string {
	const (
		kib = 1 << 10
		mib = 1 << 20
		gib = 1 << 30
	)
	switch {
	case b >= gib:
		return strconv.FormatFloat(float64(b)/gib, 'f', 1, 64) + " GiB"
	case b >= mib:
		return strconv.FormatFloat(float64(b)/mib, 'f', 1, 64) + " MiB"
	case b >= kib:
		return strconv.FormatFloat(float64(b)/kib, 'f', 1, 64) + " KiB"
	default:
		return strconv.FormatUint(b, 10) + " B"
	}
}

// GPU memory change events: after readiness the driver samples the
// engine's GPU memory every gpuSampleEvery and reports a change of at
// least gpuChangeFraction of the last reported figure (and gpuChangeMin),
// at most once per gpuEventGap: Nomad keeps only a task's last ten events,
// and an engine's memory is mostly fixed once it has loaded.
const (
	gpuSampleEvery    = time.Minute
	gpuChangeFraction = 0.10
	gpuChangeMin      = 1 << 30
	gpuEventGap       = 10 * time.Minute
)

// gpuReport decides when a change in GPU memory is worth an event.
type gpuReport struct {
	last   uint64 // the figure last reported (or first seen)
	at     time.Time
	primed bool
}

// observe takes a sample; it returns the event message when one is due.
func (r *gpuReport) observe(now time.Time, u gpuUsage) (string, bool) {
	if !r.primed {
		r.last, r.at, r.primed = u.Used, now, true
		return "", false
	}
	diff := max(u.Used, r.last) - min(u.Used, r.last)
	if diff < gpuChangeMin || float64(diff) < gpuChangeFraction*float64(r.last) || now.Sub(r.at) < gpuEventGap {
		return "", false
	}
	msg := fmt.Sprintf("Now holding %s (was %s)", u.summary(), formatBytes(r.last))
	r.last, r.at = u.Used, now
	return msg, true
}

// treePids returns the pids of the engine's process tree (the engine, its
// descendants and its process group), or nil when it is not running.
func treePids(engine procfs.Ref) (map[int]bool, error) {
	if !engine.Alive() {
		return nil, nil
	}
	all, err := procfs.All()
	if err != nil {
		return nil, err
	}
	pids := map[int]bool{}
	for _, p := range procfs.Tree(all, engine.Pid, engine.Pid) {
		pids[p.Pid] = true
	}
	return pids, nil
}
