package e2e

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/llmgw/llmgw/e2e/nomadtest"
	"github.com/llmgw/llmgw/nomadplugin/plugintest"
)

// The driver's numbers in docs/perf.md come from these benchmarks. Each
// starts its own Nomad server and client (about 30 s), runs a fixed,
// bounded workload once and reports what it measured with ReportMetric;
// run them with -benchtime=1x. Nothing here asserts a time: a benchmark
// fails only when Nomad does not run the jobs.

// benchCluster starts one client with the device plugin (mock H200s), the
// llmgw driver and raw_exec, and returns it with the fake engine's path
// and the plugin dir.
func benchCluster(b *testing.B) (*nomadtest.Cluster, string, string) {
	b.Helper()
	nomadtest.Bin(b)
	engine := plugintest.Build(b, fakeEnginePkg)
	plugins := nomadtest.PluginDir(b, plugintest.Build(b, devicePkg), plugintest.Build(b, driverPkg), plugintest.Build(b, supervisorPkg))
	c := nomadtest.Start(b, nomadtest.ClientOptions{
		Name:      "bench-1",
		PluginDir: plugins,
		Plugins: map[string]string{
			"nomad-device-nvml": `
    mock {
      system = "dgxh200"
      seed   = "bench-1"
    }`,
			"nomad-driver-llmgw": driverPolicy(engine),
		},
	})
	return c, engine, plugins
}

// engineTask is one task running `fake-engine serve bench --host H --port
// P --tensor-parallel-size 1` in strict mode (fake-engine's flags extra in
// FAKE_ENGINE_FLAGS) on one GPU, through llmgw's vllm recipe or through
// raw_exec with the same command line.
func engineTask(driver, engine string, extra []string, ready map[string]any) *api.Task {
	t := &api.Task{
		Name:   "engine",
		Driver: driver,
		Resources: &api.Resources{
			CPU: ptr(100), MemoryMB: ptr(64),
			Devices: []*api.RequestedDevice{{Name: "nvidia/gpu", Count: ptr[uint64](1)}},
		},
		KillTimeout: ptr(5 * time.Second),
	}
	// fake-engine runs in strict mode for either driver; its own flags
	// (extra) go in the environment.
	flags := strings.Join(extra, " ")
	switch driver {
	case "llmgw":
		cfg := map[string]any{
			"engine": "vllm", "model": "bench", "command": engine, "port": "http",
			"env": map[string]string{"FAKE_ENGINE_STRICT": strictVLLM, "FAKE_ENGINE_FLAGS": flags},
		}
		if ready != nil {
			cfg["ready"] = []map[string]any{ready}
		}
		t.Config = cfg
	default:
		args := []string{"--strict", strictVLLM, "serve", "bench", "--host", "${NOMAD_IP_http}", "--port", "${NOMAD_PORT_http}",
			"--tensor-parallel-size", "1"}
		t.Config = map[string]any{"command": engine, "args": args}
		t.Env = map[string]string{"FAKE_ENGINE_FLAGS": flags}
	}
	return t
}

func engineJob(id string, count int, task *api.Task) *api.Job {
	return &api.Job{
		ID: ptr(id), Name: ptr(id), Type: ptr("service"), Datacenters: []string{"*"},
		TaskGroups: []*api.TaskGroup{{
			Name:          ptr("g"),
			Count:         ptr(count),
			Networks:      []*api.NetworkResource{{DynamicPorts: []api.Port{{Label: "http"}}}},
			RestartPolicy: &api.RestartPolicy{Attempts: ptr(0), Mode: ptr("fail")},
			Tasks:         []*api.Task{task},
		}},
	}
}

// runningAllocs waits until the job has want allocations whose engine task
// runs (and, with ready, has reported its Ready event), and returns them.
func runningAllocs(b *testing.B, c *nomadtest.Cluster, jobID string, want int, ready bool) []*api.Allocation {
	b.Helper()
	var out []*api.Allocation
	nomadtest.Eventually(b, 2*time.Minute, func() (bool, string) {
		stubs, _, err := c.API.Jobs().Allocations(jobID, false, nil)
		if err != nil {
			return false, err.Error()
		}
		out = out[:0]
		for _, s := range stubs {
			if s.ClientStatus == api.AllocClientStatusFailed {
				b.Fatalf("allocation %s failed: %s", s.ID, taskEvents(s.TaskStates["engine"]))
			}
			ts := s.TaskStates["engine"]
			if s.DesiredStatus != api.AllocDesiredStatusRun || ts == nil || ts.State != "running" {
				continue
			}
			if ready && !hasEvent(ts, "Ready after") {
				continue
			}
			a, _, err := c.API.Allocations().Info(s.ID, nil)
			if err != nil {
				return false, err.Error()
			}
			out = append(out, a)
		}
		return len(out) >= want, fmt.Sprintf("%d of %d allocations of %s running", len(out), want, jobID)
	})
	return out
}

// stopJob deregisters the job and waits until its allocations are done.
func stopJob(b *testing.B, c *nomadtest.Cluster, jobID string) {
	b.Helper()
	if _, _, err := c.API.Jobs().Deregister(jobID, false, nil); err != nil {
		b.Fatalf("stop %s: %v", jobID, err)
	}
	nomadtest.Eventually(b, time.Minute, func() (bool, string) {
		stubs, _, err := c.API.Jobs().Allocations(jobID, false, nil)
		if err != nil {
			return false, err.Error()
		}
		for _, s := range stubs {
			if s.ClientStatus == api.AllocClientStatusRunning || s.ClientStatus == api.AllocClientStatusPending {
				return false, "allocation " + s.ID + " " + s.ClientStatus
			}
		}
		return true, ""
	})
}

func eventTime(ts *api.TaskState, typ, substr string) (time.Time, bool) {
	for _, e := range ts.Events {
		if e.Type == typ && strings.Contains(e.DisplayMessage+" "+e.DriverMessage, substr) {
			return time.Unix(0, e.Time), true
		}
	}
	return time.Time{}, false
}

// BenchmarkStartLatency registers the same fake engine (one mock GPU, no
// load time) as an llmgw task and as a raw_exec task, alternately, rounds
// times each (LLMGW_BENCH_ROUNDS, default 10), one job at a time on one
// client. For each it takes Nomad's own timestamps: the job's SubmitTime
// (set by the server when it accepts the registration), the allocation's
// CreateTime (the scheduler placed it) and the task's Started event (the
// client's task runner, once the driver's StartTask returned). It reports
// the median and mean of registration → Started for both drivers, their
// ratio, and the client-side part (allocation created → Started), which
// is where the drivers differ.
func BenchmarkStartLatency(b *testing.B) {
	rounds := benchRounds(b, 10)
	c, engine, _ := benchCluster(b)
	drivers := []string{"llmgw", "raw_exec"}
	total := map[string][]time.Duration{}
	client := map[string][]time.Duration{}
	b.ResetTimer()
	for range b.N {
		for i := range rounds {
			for _, d := range alternate(drivers, i) {
				id := fmt.Sprintf("lat-%s-%d", strings.ReplaceAll(d, "_", ""), i)
				if _, _, err := c.API.Jobs().Register(engineJob(id, 1, engineTask(d, engine, []string{"--load-seconds", "0"}, nil)), nil); err != nil {
					b.Fatalf("register %s: %v", id, err)
				}
				a := runningAllocs(b, c, id, 1, false)[0]
				job, _, err := c.API.Jobs().Info(id, nil)
				if err != nil {
					b.Fatal(err)
				}
				started, ok := eventTime(a.TaskStates["engine"], api.TaskStarted, "")
				if !ok {
					b.Fatalf("%s: no Started event: %s", id, taskEvents(a.TaskStates["engine"]))
				}
				submit := time.Unix(0, *job.SubmitTime)
				created := time.Unix(0, a.CreateTime)
				total[d] = append(total[d], started.Sub(submit))
				client[d] = append(client[d], started.Sub(created))
				b.Logf("%-8s round %2d: registered → started %6.1f ms (registered → placed %6.1f ms, placed → started %6.1f ms)",
					d, i, ms(started.Sub(submit)), ms(created.Sub(submit)), ms(started.Sub(created)))
				stopJob(b, c, id)
			}
		}
	}
	b.StopTimer()
	for _, d := range drivers {
		b.ReportMetric(ms(median(total[d])), d+"-p50-ms")
		b.ReportMetric(ms(mean(total[d])), d+"-mean-ms")
		b.ReportMetric(ms(median(client[d])), d+"-client-p50-ms")
	}
	b.ReportMetric(ms(median(total["llmgw"]))/ms(median(total["raw_exec"])), "ratio-p50")
	b.ReportMetric(ms(mean(total["llmgw"]))/ms(mean(total["raw_exec"])), "ratio-mean")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkReadinessLag measures how long after the engine becomes ready
// the driver notices. For each probe interval (250ms, 1s) it runs the fake
// engine with a load time of 2 s plus a fraction of the interval (so that
// the engine's readiness falls at different points between two probes),
// watches /health itself every 2 ms from outside, and compares the moment
// /health first answered 200 with the time of the driver's "Ready after"
// event (the driver's own timestamp, which Nomad records as the event's
// time). It reports the mean and maximum lag per interval, and the maximum
// as a fraction of the interval (≤ 1 means noticed within one interval).
func BenchmarkReadinessLag(b *testing.B) {
	const runs = 5
	c, engine, _ := benchCluster(b)
	b.ResetTimer()
	for range b.N {
		for _, interval := range []time.Duration{250 * time.Millisecond, time.Second} {
			var lags []time.Duration
			for i := range runs {
				load := 2*time.Second + interval*time.Duration(i)/runs
				id := fmt.Sprintf("ready-%s-%d", interval, i)
				task := engineTask("llmgw", engine, []string{"--load-seconds", load.String()},
					map[string]any{"interval": interval.String(), "timeout": "1m"})
				if _, _, err := c.API.Jobs().Register(engineJob(id, 1, task), nil); err != nil {
					b.Fatalf("register %s: %v", id, err)
				}
				a := runningAllocs(b, c, id, 1, false)[0]
				readyAt, err := watchHealth(allocAddr(b, a), 30*time.Second)
				if err != nil {
					b.Fatalf("%s: %v", id, err)
				}
				a = runningAllocs(b, c, id, 1, true)[0]
				ev, _ := eventTime(a.TaskStates["engine"], "Driver", "Ready after")
				lag := ev.Sub(readyAt)
				lags = append(lags, lag)
				b.Logf("interval %-5s load %-6s: /health 200 at %s, Ready event at %s: lag %6.1f ms",
					interval, load, readyAt.Format("15:04:05.000"), ev.Format("15:04:05.000"), ms(lag))
				stopJob(b, c, id)
			}
			name := interval.String()
			b.ReportMetric(ms(mean(lags)), "lag-mean-ms@"+name)
			b.ReportMetric(ms(slices.Max(lags)), "lag-max-ms@"+name)
			b.ReportMetric(float64(slices.Max(lags))/float64(interval), "lag-max/interval@"+name)
		}
	}
	b.StopTimer()
	b.ReportMetric(0, "ns/op")
}

// watchHealth polls http://addr/health every 2 ms and returns when the
// request that first got a 200 was sent.
func watchHealth(addr string, timeout time.Duration) (time.Time, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	client := &http.Client{Timeout: time.Second}
	defer client.CloseIdleConnections()
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for {
		sent := time.Now()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/health", nil)
		if err != nil {
			return time.Time{}, err
		}
		if resp, err := client.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return sent, nil
			}
		}
		select {
		case <-ctx.Done():
			return time.Time{}, fmt.Errorf("/health at %s not 200 within %s", addr, timeout)
		case <-tick.C:
		}
	}
}

func allocAddr(b testing.TB, a *api.Allocation) string {
	b.Helper()
	for _, p := range a.AllocatedResources.Shared.Ports {
		if p.Label == "http" {
			return net.JoinHostPort(p.HostIP, strconv.Itoa(p.Value))
		}
	}
	b.Fatalf("allocation %s has no http port", a.ID)
	return ""
}

// BenchmarkDriverMemory runs one llmgw task, then two, four and eight
// (one per mock GPU), each time lets Nomad poll stats and events for 15 s,
// and reads the memory of the driver plugin process and of every task's
// supervisor from /proc/<pid>/status (VmRSS, RssAnon, VmHWM) and
// /proc/<pid>/smaps_rollup (Pss). Pss divides the pages shared by the processes that map them (the
// driver binary's code and read-only data, mapped by the plugin and every
// supervisor) among them; the increase of the summed Pss of the plugin and
// all supervisors from one task to eight, divided by seven, is what one
// more task costs.
func BenchmarkDriverMemory(b *testing.B) {
	const soak = 15 * time.Second
	c, engine, plugins := benchCluster(b)
	exe := filepath.Join(plugins, "nomad-driver-llmgw")
	job := engineJob("mem", 1, engineTask("llmgw", engine, []string{"--load-seconds", "0"}, nil))
	b.ResetTimer()
	for range b.N {
		var sums []float64
		for _, n := range []int{1, 2, 4, 8} {
			job.TaskGroups[0].Count = ptr(n)
			if _, _, err := c.API.Jobs().Register(job, nil); err != nil {
				b.Fatal(err)
			}
			runningAllocs(b, c, "mem", n, true)
			time.Sleep(soak) // a measurement window, not a wait for a condition
			plugin, sups := driverProcs(b, exe)
			if len(sups) != n {
				b.Fatalf("found %d supervisors, want %d", len(sups), n)
			}
			p := readMem(b, plugin)
			sum := p.pss
			var sv memInfo
			for _, s := range sups {
				m := readMem(b, s)
				sum += m.pss
				sv.rss += m.rss / float64(n)
				sv.anon += m.anon / float64(n)
				sv.pss += m.pss / float64(n)
				sv.hwm = max(sv.hwm, m.hwm)
			}
			sums = append(sums, sum)
			b.Logf("%d task(s): plugin pid %d VmRSS %.1f MiB, RssAnon %.1f MiB, Pss %.1f MiB, VmHWM %.1f MiB; "+
				"supervisor (mean of %d) VmRSS %.1f MiB, RssAnon %.1f MiB, Pss %.1f MiB, VmHWM (max) %.1f MiB; Σ Pss %.1f MiB",
				n, plugin, p.rss, p.anon, p.pss, p.hwm, n, sv.rss, sv.anon, sv.pss, sv.hwm, sum)
			suffix := fmt.Sprintf("@%dtasks", n)
			b.ReportMetric(p.rss, "driver-VmRSS-MiB"+suffix)
			b.ReportMetric(p.anon, "driver-RssAnon-MiB"+suffix)
			b.ReportMetric(p.pss, "driver-Pss-MiB"+suffix)
			b.ReportMetric(p.hwm, "driver-VmHWM-MiB"+suffix)
			b.ReportMetric(sv.rss, "sup-VmRSS-MiB"+suffix)
			b.ReportMetric(sv.anon, "sup-RssAnon-MiB"+suffix)
			b.ReportMetric(sv.pss, "sup-Pss-MiB"+suffix)
		}
		b.ReportMetric((sums[len(sums)-1]-sums[0])/7, "marginal-Pss-MiB/task")
		stopJob(b, c, "mem")
	}
	b.StopTimer()
	b.ReportMetric(0, "ns/op")
}

// driverProcs finds the driver plugin process (exe without arguments) and
// the supervisors (llmgw-supervisor beside it, or exe itself, with
// arguments supervise <dir>) by their command lines.
func driverProcs(b *testing.B, exe string) (plugin int, sups []int) {
	b.Helper()
	dirs, err := os.ReadDir("/proc")
	if err != nil {
		b.Fatal(err)
	}
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		raw, err := os.ReadFile(filepath.Join("/proc", d.Name(), "cmdline"))
		if err != nil || len(raw) == 0 {
			continue
		}
		args := strings.Split(strings.TrimRight(string(raw), "\x00"), "\x00")
		lean := filepath.Join(filepath.Dir(exe), "llmgw-supervisor")
		switch {
		case (args[0] == exe || args[0] == lean) && len(args) > 1 && args[1] == "supervise":
			sups = append(sups, pid)
		case args[0] == exe && len(args) == 1:
			plugin = pid
		}
	}
	if plugin == 0 {
		b.Fatalf("no driver plugin process running %s", exe)
	}
	return plugin, sups
}

// memInfo is in MiB.
type memInfo struct{ rss, anon, hwm, pss float64 }

func readMem(b *testing.B, pid int) memInfo {
	b.Helper()
	field := func(file, name string) float64 {
		data, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), file))
		if err != nil {
			b.Fatal(err)
		}
		for line := range strings.SplitSeq(string(data), "\n") {
			if v, ok := strings.CutPrefix(line, name+":"); ok {
				f := strings.Fields(v)
				kib, _ := strconv.ParseFloat(f[0], 64)
				return kib / 1024
			}
		}
		b.Fatalf("no %s in /proc/%d/%s", name, pid, file)
		return 0
	}
	return memInfo{
		rss:  field("status", "VmRSS"),
		anon: field("status", "RssAnon"),
		hwm:  field("status", "VmHWM"),
		pss:  field("smaps_rollup", "Pss"),
	}
}

// benchRounds is LLMGW_BENCH_ROUNDS (1 to 100), else def.
func benchRounds(b *testing.B, def int) int {
	b.Helper()
	v := os.Getenv("LLMGW_BENCH_ROUNDS")
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > 100 {
		b.Fatalf("LLMGW_BENCH_ROUNDS=%q: want 1..100", v)
	}
	return n
}

// alternate is the two drivers in round i's order: as given in even
// rounds, reversed in odd ones, so neither always goes first.
func alternate(drivers []string, i int) []string {
	if i%2 == 1 {
		return []string{drivers[1], drivers[0]}
	}
	return drivers
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	n := len(s)
	if n == 0 {
		return 0
	}
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

func mean(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	var sum time.Duration
	for _, d := range ds {
		sum += d
	}
	return sum / time.Duration(len(ds))
}

// BenchmarkRealEngineReady registers llama.cpp's real server with the tiny
// model (one mock GPU) as an llmgw task and as a raw_exec task running the
// same command line, alternately, rounds times each (LLMGW_BENCH_ROUNDS,
// default 5). For each it finds the allocation's port as soon as the
// scheduler has placed it and polls /health every 2 ms from outside; it
// reports registration (the job's SubmitTime) → the first 200, for both
// drivers, and for llmgw also → the driver's Ready event.
func BenchmarkRealEngineReady(b *testing.B) {
	rounds := benchRounds(b, 5)
	in := installRealEngineB(b)
	nomadtest.Bin(b)
	plugins := nomadtest.PluginDir(b, plugintest.Build(b, devicePkg), plugintest.Build(b, driverPkg), plugintest.Build(b, supervisorPkg))
	c := nomadtest.Start(b, nomadtest.ClientOptions{
		Name: "bench-1", PluginDir: plugins,
		Plugins: map[string]string{
			"nomad-device-nvml":  "\n    mock {\n      system = \"dgxh200\"\n      seed   = \"bench-1\"\n    }",
			"nomad-driver-llmgw": driverPolicy(in.Binary),
		},
	})
	args := []string{"-np", "1", "-c", "1024"}
	task := func(driver string) *api.Task {
		t := &api.Task{
			Name: "engine", Driver: driver,
			Resources: &api.Resources{
				CPU: ptr(100), MemoryMB: ptr(256),
				Devices: []*api.RequestedDevice{{Name: "nvidia/gpu", Count: ptr[uint64](1)}},
			},
			KillTimeout: ptr(5 * time.Second),
		}
		if driver == "llmgw" {
			t.Config = map[string]any{"engine": "llamacpp", "model": in.Model, "command": in.Binary, "port": "http", "args": args}
		} else {
			// What the llmgw recipe renders for the same task.
			t.Config = map[string]any{"command": in.Binary, "args": append([]string{"-m", in.Model,
				"--host", "${NOMAD_IP_http}", "--port", "${NOMAD_PORT_http}", "--metrics", "-ngl", "all"}, args...)}
		}
		return t
	}
	drivers := []string{"llmgw", "raw_exec"}
	toHealth := map[string][]time.Duration{}
	var toReady []time.Duration
	b.ResetTimer()
	for range b.N {
		for i := range rounds {
			for _, d := range alternate(drivers, i) {
				id := fmt.Sprintf("real-%s-%d", strings.ReplaceAll(d, "_", ""), i)
				if _, _, err := c.API.Jobs().Register(engineJob(id, 1, task(d)), nil); err != nil {
					b.Fatalf("register %s: %v", id, err)
				}
				addr := placedAddr(b, c, id)
				healthy, err := watchHealth(addr, time.Minute)
				if err != nil {
					b.Fatalf("%s: %v", id, err)
				}
				job, _, err := c.API.Jobs().Info(id, nil)
				if err != nil {
					b.Fatal(err)
				}
				submit := time.Unix(0, *job.SubmitTime)
				toHealth[d] = append(toHealth[d], healthy.Sub(submit))
				line := fmt.Sprintf("%-8s round %d: registered → /health 200 %6.1f ms", d, i, ms(healthy.Sub(submit)))
				if d == "llmgw" {
					a := runningAllocs(b, c, id, 1, true)[0]
					ev, _ := eventTime(a.TaskStates["engine"], "Driver", "Ready after")
					toReady = append(toReady, ev.Sub(submit))
					line += fmt.Sprintf(", → Ready event %6.1f ms", ms(ev.Sub(submit)))
				}
				b.Log(line)
				stopJob(b, c, id)
			}
		}
	}
	b.StopTimer()
	for _, d := range drivers {
		b.ReportMetric(ms(median(toHealth[d])), d+"-health-p50-ms")
	}
	b.ReportMetric(ms(median(toReady)), "llmgw-ready-p50-ms")
	b.ReportMetric(0, "ns/op")
}

// placedAddr polls Nomad every 5 ms until the scheduler has placed the
// job's allocation and returns its http address (the engine may not listen
// yet), so that watching its /health starts before the engine can answer.
func placedAddr(b *testing.B, c *nomadtest.Cluster, jobID string) string {
	b.Helper()
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		stubs, _, err := c.API.Jobs().Allocations(jobID, false, nil)
		if err == nil && len(stubs) > 0 {
			a, _, err := c.API.Allocations().Info(stubs[0].ID, nil)
			if err == nil {
				return allocAddr(b, a)
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	b.Fatalf("%s not placed within a minute", jobID)
	return ""
}
