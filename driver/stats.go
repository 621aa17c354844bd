package driver

import (
	"os"
	"strconv"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/llmgw/llmgw/driver/procfs"
	"github.com/llmgw/llmgw/nomadplugin/pb/driverpb"
)

// defaultStatsInterval is used when the client asks for no interval.
const defaultStatsInterval = time.Second

// TaskStats implements Driver: CPU and memory of the engine's process
// tree (the engine, its descendants and its process group), one sample at
// once and then one per interval, until the task exits. After each sample
// it reads the engine's metrics (enginestats.go), which TaskStats has no
// field for, within the interval.
func (p *Plugin) TaskStats(req *driverpb.TaskStatsRequest, stream driverpb.Driver_TaskStatsServer) error {
	h, err := p.task(req.GetTaskId())
	if err != nil {
		return err
	}
	if h.exited() {
		return status.Errorf(codes.FailedPrecondition, "task %s has exited", req.GetTaskId())
	}
	interval := req.GetCollectionInterval().AsDuration()
	if interval <= 0 {
		interval = defaultStatsInterval
	}
	tick := time.NewTicker(interval)
	defer tick.Stop()
	s := &sampler{prev: map[procfs.Ref]uint64{}}
	for {
		st, err := s.sample(h)
		if err != nil {
			h.log.Warn("sample task stats", "error", err)
		} else if err := stream.Send(&driverpb.TaskStatsResponse{Stats: st}); err != nil {
			return err
		}
		h.scrapeEngineMetrics(stream.Context(), metricsTimeout(interval))
		select {
		case <-stream.Context().Done():
			return nil
		case <-p.ctx.Done():
			return nil
		case <-h.done:
			return nil
		case <-tick.C:
		}
	}
}

// sampler turns successive /proc readings into CPU percentages.
type sampler struct {
	prev   map[procfs.Ref]uint64 // CPU ticks by process at prevAt
	prevAt time.Time
}

var (
	cpuMeasured = []driverpb.CPUUsage_Fields{driverpb.CPUUsage_SYSTEM_MODE, driverpb.CPUUsage_USER_MODE, driverpb.CPUUsage_PERCENT}
	memMeasured = []driverpb.MemoryUsage_Fields{driverpb.MemoryUsage_RSS}
)

func (s *sampler) sample(h *taskHandle) (*driverpb.TaskStats, error) {
	now := time.Now()
	out := &driverpb.TaskStats{
		Id:                 h.id,
		Timestamp:          timestamppb.New(now),
		ResourceUsageByPid: map[string]*driverpb.TaskResourceUsage{},
	}
	agg := &usage{}
	if h.st.Engine.Alive() {
		all, err := procfs.All()
		if err != nil {
			return nil, err
		}
		boot, err := bootTime()
		if err != nil {
			return nil, err
		}
		page := uint64(os.Getpagesize())
		next := map[procfs.Ref]uint64{}
		for _, p := range procfs.Tree(all, h.st.Engine.Pid, h.st.Engine.Pid) {
			ref := procfs.Ref{Pid: p.Pid, StartTime: p.StartTime}
			ticks := p.UTime + p.STime
			next[ref] = ticks
			var u usage
			u.rss = uint64(max(p.RSSPages, 0)) * page
			// Since the last sample when the process was in it, else over
			// the process's life.
			since := now.Sub(s.prevAt)
			base, seen := s.prev[ref]
			if !seen || s.prevAt.IsZero() {
				base = 0
				started := boot.Add(time.Duration(p.StartTime) * time.Second / procfs.TicksPerSecond)
				since = now.Sub(started)
			}
			if since > 0 && ticks >= base {
				frac := float64(ticks-base) / procfs.TicksPerSecond / since.Seconds()
				u.percent = frac * 100
				if ticks > 0 {
					userShare := float64(p.UTime) / float64(ticks)
					u.user = u.percent * userShare
					u.system = u.percent - u.user
				}
			}
			out.ResourceUsageByPid[strconv.Itoa(p.Pid)] = u.proto()
			agg.add(u)
		}
		s.prev, s.prevAt = next, now
	}
	out.AggResourceUsage = agg.proto()
	return out, nil
}

type usage struct {
	percent, user, system float64
	rss                   uint64
}

func (u *usage) add(o usage) {
	u.percent += o.percent
	u.user += o.user
	u.system += o.system
	u.rss += o.rss
}

func (u usage) proto() *driverpb.TaskResourceUsage {
	return &driverpb.TaskResourceUsage{
		Cpu: &driverpb.CPUUsage{
			Percent: u.percent, UserMode: u.user, SystemMode: u.system,
			MeasuredFields: cpuMeasured,
		},
		Memory: &driverpb.MemoryUsage{Rss: u.rss, MeasuredFields: memMeasured},
	}
}

// bootTime is when the system booted, read once: process start times
// count from it.
var bootTime = sync.OnceValues(procfs.BootTime)
