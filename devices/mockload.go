package devices

import (
	"strings"
	"sync"
	"time"

	"github.com/prometheus/procfs"

	"github.com/llmgw/llmgw/internal/nvmlseam"
)

// procRoot is where the mock's load sampler reads processes.
const procRoot = procfs.DefaultMountPoint

// ticksPerSecond is USER_HZ, the unit of utime and stime in
// /proc/<pid>/stat: Linux fixes it at 100 for that interface.
const ticksPerSecond = 100

// loadMinGap is the least time between two readings of /proc: readings
// closer than that answer the last one's utilisation. At 100 ticks a
// second, half a second resolves utilisation to 2%.
const loadMinGap = 500 * time.Millisecond

// procKey names one process for its whole life: a pid is reused, a pid
// with its start time is not.
type procKey struct {
	pid   int
	start uint64
}

// loadSampler maps the CPU use of the processes bound to each mock GPU to
// that GPU's utilisation, so the mock's draw follows the load of the engine
// using it: a process is bound to the GPUs whose UUIDs its environment
// names in LLMGW_GPU_UUIDS (else NVIDIA_VISIBLE_DEVICES), as the plugin's
// Reserve sets them; its utime+stime since the last reading, over the time
// since, is its utilisation, one busy CPU being 100%, and a GPU's is the sum
// over its processes, at most 1. A real engine (llama-server on CPU) burns
// CPU while it prefills and decodes and little while idle, so its GPU's
// draw rises under load and falls when idle. A process whose environment
// cannot be read (another user's, without privilege) counts as bound to
// nothing.
type loadSampler struct {
	root string

	mu    sync.Mutex
	fs    procfs.FS
	fsErr error
	at    time.Time
	// bound caches each process's GPUs (its environment does not change
	// after exec); ticks is its CPU time at the last reading.
	bound map[procKey][]string
	ticks map[procKey]uint64
	util  map[string]float64
}

func newLoadSampler(root string) *loadSampler {
	fs, err := procfs.NewFS(root)
	return &loadSampler{root: root, fs: fs, fsErr: err, bound: map[procKey][]string{}, ticks: map[procKey]uint64{}, util: map[string]float64{}}
}

// Util is the GPU's utilisation in [0, 1] from the latest reading, taking
// a new one when the last is older than loadMinGap.
func (s *loadSampler) Util(uuid string) float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	if s.at.IsZero() || now.Sub(s.at) >= loadMinGap {
		s.readLocked(now)
	}
	return s.util[uuid]
}

// readLocked takes one reading of every process in /proc.
func (s *loadSampler) readLocked(now time.Time) {
	if s.fsErr != nil {
		return // no /proc: every GPU idles
	}
	procs, err := s.fs.AllProcs()
	if err != nil {
		return
	}
	elapsed := now.Sub(s.at).Seconds()
	first := s.at.IsZero()
	busy := map[string]float64{}
	seen := make(map[procKey]bool, len(procs))
	for _, p := range procs {
		st, err := p.Stat()
		if err != nil {
			continue // it ended while we read
		}
		k := procKey{p.PID, st.Starttime}
		seen[k] = true
		gpus, ok := s.bound[k]
		if !ok {
			gpus = boundGPUs(p)
			s.bound[k] = gpus
		}
		if len(gpus) == 0 {
			continue
		}
		t := uint64(st.UTime + st.STime)
		prev, had := s.ticks[k]
		s.ticks[k] = t
		if !had || first || t < prev {
			continue // a new process: its CPU time before now is not this interval's
		}
		for _, g := range gpus {
			busy[g] += float64(t-prev) / ticksPerSecond
		}
	}
	for k := range s.bound {
		if !seen[k] {
			delete(s.bound, k)
			delete(s.ticks, k)
		}
	}
	s.util = map[string]float64{}
	if !first && elapsed > 0 {
		for g, sec := range busy {
			s.util[g] = min(max(sec/elapsed, 0), 1)
		}
	}
	s.at = now
}

// boundGPUs is the GPU UUIDs a process's environment binds it to.
func boundGPUs(p procfs.Proc) []string {
	env, err := p.Environ()
	if err != nil {
		return nil
	}
	var llmgw, nvidia string
	for _, kv := range env {
		switch {
		case strings.HasPrefix(kv, nvmlseam.EnvUUIDs+"="):
			llmgw = strings.TrimPrefix(kv, nvmlseam.EnvUUIDs+"=")
		case strings.HasPrefix(kv, nvmlseam.EnvNVIDIAVisible+"="):
			nvidia = strings.TrimPrefix(kv, nvmlseam.EnvNVIDIAVisible+"=")
		}
	}
	list := llmgw
	if list == "" {
		list = nvidia
	}
	var out []string
	for _, u := range strings.Split(list, ",") {
		if u = strings.TrimSpace(u); u != "" {
			out = append(out, u)
		}
	}
	return out
}
