package driver

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	hclog "github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/llmgw/llmgw/driver/procfs"
	"github.com/llmgw/llmgw/driver/supervisor"
	"github.com/llmgw/llmgw/engine"
	"github.com/llmgw/llmgw/internal/atomicfile"
	"github.com/llmgw/llmgw/nomadplugin/pb/driverpb"
)

// handleVersion is TaskHandle.version for handles this driver writes;
// driver_state carries the same number.
const handleVersion = 1

// driverState is what Nomad persists for a task (TaskHandle.driver_state,
// JSON): enough to find the supervisor and the engine again after the
// plugin or the Nomad client restarts.
type driverState struct {
	Version        int           `json:"version"`
	StateDir       string        `json:"state_dir"`
	Supervisor     procfs.Ref    `json:"supervisor"`
	Engine         procfs.Ref    `json:"engine"`
	EngineName     string        `json:"engine_name"`
	Model          string        `json:"model"`
	Command        string        `json:"command"`
	GPUs           []string      `json:"gpus"`
	CUDAVisible    []string      `json:"cuda_visible_devices,omitempty"` // the engine's CUDA_VISIBLE_DEVICES entries
	TensorParallel int           `json:"tensor_parallel"`
	Host           string        `json:"host"`
	Port           int           `json:"port"`
	ReadyPath      string        `json:"ready_path"`
	ReadySkip      bool          `json:"ready_skip,omitempty"`
	ReadyInterval  time.Duration `json:"ready_interval"`
	ReadyTimeout   time.Duration `json:"ready_timeout"`
	StopTimeout    time.Duration `json:"stop_timeout"`
	StartedAt      time.Time     `json:"started_at"`
	Cgroup         string        `json:"cgroup,omitempty"`
	CgroupError    string        `json:"cgroup_error,omitempty"`
	OOMError       string        `json:"oom_error,omitempty"`
	// User is who the engine runs as; UID, GID and Groups its
	// credentials (unset when the driver does not run as root), which
	// exec uses.
	User   string   `json:"user,omitempty"`
	UID    *uint32  `json:"uid,omitempty"`
	GID    *uint32  `json:"gid,omitempty"`
	Groups []uint32 `json:"groups,omitempty"`
	// Limits are the resource limits in the engine's cgroup; Unenforced
	// those the host could not enforce (resource_limits = "best_effort").
	Limits     []string `json:"limits,omitempty"`
	Unenforced []string `json:"unenforced,omitempty"`
	// WeightsKey is the model the task leases in the node's store;
	// AdapterKeys the LoRA adapters it fetched there.
	WeightsKey  string   `json:"weights_key,omitempty"`
	AdapterKeys []string `json:"adapter_keys,omitempty"`
}

// Files the driver itself keeps in a task's state dir, beside the
// supervisor's.
const (
	readyFile = "ready.json"
	// stopFile records a stop the driver decided on (readiness timeout):
	// the reason and when SIGKILL is due, so that a plugin that restarts
	// in between still kills the engine on time.
	stopFile = "stop.json"
	// failureFile is where drivers before stop.json kept the reason
	// alone; still read, for state dirs they wrote.
	failureFile      = "failure.txt"
	eventsOffsetFile = "events.offset"
)

// stopRecord is stop.json.
type stopRecord struct {
	Reason string    `json:"reason"`
	TermAt time.Time `json:"term_at"`
	KillAt time.Time `json:"kill_at"`
}

// pollEvery is how often a task's owner goroutine looks for the exit
// record and new events.
const pollEvery = 200 * time.Millisecond

// taskHandle tracks one task. Its run goroutine owns the watching
// (exit, readiness, events); it ends when the exit is known, or when the
// plugin shuts down or destroys the task.
type taskHandle struct {
	id   string
	cfg  *driverpb.TaskConfig
	st   driverState
	log  hclog.Logger
	emit eventFunc
	// now is the clock the readiness deadline and the SIGKILL deadline
	// are measured by.
	now func() time.Time

	// reaped is closed when this plugin process reaped the supervisor (nil
	// for recovered tasks, whose supervisor another process reaps).
	reaped <-chan struct{}
	// gpu measures the engine's GPU memory (nil: not measured). gpuRep
	// and nextGPU belong to the run goroutine.
	gpu     *gpuMeter
	gpuRep  gpuReport
	nextGPU time.Time

	mu          sync.Mutex
	result      *driverpb.ExitResult
	resultErr   string
	completedAt time.Time
	ready       bool
	readyAt     time.Time
	stopping    bool
	failure     string
	killAt      time.Time // readiness-timeout stop: SIGKILL after this (also in stop.json)
	evOffset    int64
	oomDetect   string

	// engineStats is the engine's latest metrics (enginestats.go).
	engineStats engineStats

	done    chan struct{} // closed once result is set
	cancel  context.CancelFunc
	stopped chan struct{} // closed when run returns
}

func newHandle(id string, cfg *driverpb.TaskConfig, st driverState, log hclog.Logger,
	emit eventFunc, reaped <-chan struct{}) *taskHandle {
	return &taskHandle{
		id: id, cfg: cfg, st: st, log: log, emit: emit, reaped: reaped, now: time.Now,
		done: make(chan struct{}), stopped: make(chan struct{}),
	}
}

// restore loads what the driver recorded in the state dir before a
// restart: readiness, a stop it decided on (the reason, and when SIGKILL
// is due), how far events were reported.
func (h *taskHandle) restore() {
	var r struct {
		At time.Time `json:"at"`
	}
	if b, err := os.ReadFile(filepath.Join(h.st.StateDir, readyFile)); err == nil && json.Unmarshal(b, &r) == nil {
		h.ready, h.readyAt = true, r.At
	}
	var sr stopRecord
	if b, err := os.ReadFile(filepath.Join(h.st.StateDir, stopFile)); err == nil {
		if err := json.Unmarshal(b, &sr); err != nil {
			h.log.Warn("read stop record; killing the engine now", "task_id", h.id, "error", err)
			sr = stopRecord{Reason: "engine stopped by the driver (stop record unreadable)", KillAt: h.now()}
		}
		h.failure, h.stopping, h.killAt = sr.Reason, true, sr.KillAt
	} else if fi, err := os.Stat(filepath.Join(h.st.StateDir, failureFile)); err == nil {
		// Written by a driver before stop.json, when it sent SIGTERM.
		b, _ := os.ReadFile(filepath.Join(h.st.StateDir, failureFile))
		h.failure, h.stopping, h.killAt = string(b), true, fi.ModTime().Add(h.st.StopTimeout)
	}
	if b, err := os.ReadFile(filepath.Join(h.st.StateDir, eventsOffsetFile)); err == nil {
		if n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err == nil {
			h.evOffset = n
		}
	}
}

// start runs the owner goroutine.
func (h *taskHandle) start(parent context.Context) {
	ctx, cancel := context.WithCancel(parent)
	h.cancel = cancel
	go h.run(ctx)
}

// shutdown ends the owner goroutine and waits for it.
func (h *taskHandle) shutdown() {
	if h.cancel != nil {
		h.cancel()
		<-h.stopped
	}
}

func (h *taskHandle) run(ctx context.Context) {
	defer close(h.stopped)
	wake := time.NewTimer(0)
	defer wake.Stop()
	client := &http.Client{Timeout: probeTimeout(h.st.ReadyInterval)}
	defer client.CloseIdleConnections()
	var nextProbe time.Time
	reaped := h.reaped
	for {
		h.pumpEvents()
		if h.checkExit() {
			return
		}
		now := h.now()
		h.mu.Lock()
		ready, stopping, killAt := h.ready, h.stopping, h.killAt
		h.mu.Unlock()
		switch {
		case !killAt.IsZero() && now.After(killAt):
			h.log.Warn("engine still running after SIGTERM; killing its process group", "task_id", h.id)
			_ = h.signalGroup(syscall.SIGKILL)
			h.mu.Lock()
			h.killAt = time.Time{}
			h.mu.Unlock()
		case !ready && !stopping && h.st.ReadySkip:
			h.markReadyUnprobed(now)
		case !ready && !stopping && now.Sub(h.st.StartedAt) > h.st.ReadyTimeout:
			h.readinessTimedOut()
		case !ready && !stopping && !now.Before(nextProbe):
			// Probes keep to a fixed rate: one every ready.interval from
			// the first, however long each took.
			nextProbe = nextProbe.Add(h.st.ReadyInterval)
			if nextProbe.Before(now) {
				nextProbe = now.Add(h.st.ReadyInterval)
			}
			if h.probe(ctx, client) {
				h.markReady(h.now())
			}
		case ready && !stopping && !now.Before(h.nextGPU):
			h.nextGPU = now.Add(gpuSampleEvery)
			h.sampleGPU(now)
		}
		wake.Reset(h.nextWake(nextProbe))
		select {
		case <-ctx.Done():
			return
		case <-wake.C:
		case <-reaped:
			reaped = nil
		}
	}
}

// nextWake is how long the owner goroutine sleeps: pollEvery, or less
// when the next readiness probe is due sooner, so that probes keep to
// ready.interval exactly rather than to the next multiple of pollEvery.
func (h *taskHandle) nextWake(nextProbe time.Time) time.Duration {
	h.mu.Lock()
	probing := !h.ready && !h.stopping
	h.mu.Unlock()
	if !probing {
		return pollEvery
	}
	return max(min(nextProbe.Sub(h.now()), pollEvery), 0)
}

func probeTimeout(interval time.Duration) time.Duration {
	return min(max(interval, 500*time.Millisecond), 5*time.Second)
}

// url is where the engine serves.
func (h *taskHandle) url() string {
	return "http://" + net.JoinHostPort(h.st.Host, strconv.Itoa(h.st.Port))
}

func (h *taskHandle) probe(ctx context.Context, client *http.Client) bool {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, h.url()+h.st.ReadyPath, nil)
	if err != nil {
		return false
	}
	resp, err := client.Do(req)
	if err != nil {
		return false
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	_ = resp.Body.Close()
	return resp.StatusCode >= 200 && resp.StatusCode < 300
}

// markReadyUnprobed records readiness of a task whose ready block says
// skip: it counts as ready once its engine runs.
func (h *taskHandle) markReadyUnprobed(at time.Time) {
	now := at.UTC()
	h.mu.Lock()
	h.ready, h.readyAt = true, now
	h.mu.Unlock()
	if err := atomicfile.WriteJSON(filepath.Join(h.st.StateDir, readyFile), map[string]time.Time{"at": now}); err != nil {
		h.log.Warn("record readiness", "task_id", h.id, "error", err)
	}
	h.log.Info("engine running; readiness probe skipped (ready.skip)", "task_id", h.id)
	h.emit(now, "Running; readiness probe skipped (ready.skip)", map[string]string{"ready_skipped": "true"})
}

// markReady records readiness; at is when the probe got its 2xx, and is
// the Ready event's time.
func (h *taskHandle) markReady(at time.Time) {
	h.pumpEvents() // what the engine logged before it served (load progress) comes first
	now := at.UTC()
	took := now.Sub(h.st.StartedAt)
	h.mu.Lock()
	h.ready, h.readyAt = true, now
	h.mu.Unlock()
	if err := atomicfile.WriteJSON(filepath.Join(h.st.StateDir, readyFile), map[string]time.Time{"at": now}); err != nil {
		h.log.Warn("record readiness", "task_id", h.id, "error", err)
	}
	h.log.Info("engine ready", "task_id", h.id, "after", took.String(), "url", h.url()+h.st.ReadyPath)
	msg := "Ready after " + roundDuration(took)
	ann := map[string]string{
		"ready_seconds": strconv.FormatFloat(took.Seconds(), 'f', 3, 64),
		"url":           h.url(),
	}
	// What loading took on the GPUs; this sample also primes the change
	// reports.
	if u, ok := h.measureGPU(); ok {
		h.gpuRep.observe(now, u)
		h.nextGPU = time.Now().Add(gpuSampleEvery)
		msg += ", holding " + u.summary()
		ann["gpu_memory_used_bytes"] = strconv.FormatUint(u.Used, 10)
		ann["gpu_memory_by_gpu"] = u.attributes()["gpu_memory_by_gpu"]
	}
	h.emit(now, msg, ann)
}

// measureGPU samples the GPU memory of the engine's process tree; ok is
// false when the task has no GPU, NVML is unavailable, or the engine is
// gone.
func (h *taskHandle) measureGPU() (gpuUsage, bool) {
	if h.gpu == nil || len(h.st.GPUs) == 0 {
		return gpuUsage{}, false
	}
	if ok, _ := h.gpu.available(); !ok {
		return gpuUsage{}, false
	}
	pids, err := treePids(h.st.Engine)
	if err != nil || pids == nil {
		return gpuUsage{}, false
	}
	u, ok, _ := h.gpu.measure(h.st.GPUs, pids)
	return u, ok
}

// sampleGPU reports a lasting change in the engine's GPU memory.
func (h *taskHandle) sampleGPU(now time.Time) {
	u, ok := h.measureGPU()
	if !ok {
		return
	}
	if msg, due := h.gpuRep.observe(now, u); due {
		h.emit(time.Time{}, msg, map[string]string{
			"gpu_memory_used_bytes": strconv.FormatUint(u.Used, 10),
			"gpu_memory_by_gpu":     u.attributes()["gpu_memory_by_gpu"],
		})
	}
}

// gpuAttributes are InspectTask's GPU memory attributes.
func (h *taskHandle) gpuAttributes() map[string]string {
	switch {
	case len(h.st.GPUs) == 0:
		return map[string]string{"gpu_stats": "no GPU allocated"}
	case h.gpu == nil:
		return map[string]string{"gpu_stats": "disabled"}
	}
	if ok, why := h.gpu.available(); !ok {
		return map[string]string{"gpu_stats": why}
	}
	pids, err := treePids(h.st.Engine)
	if err != nil {
		return map[string]string{"gpu_stats": "unavailable: " + err.Error()}
	}
	if pids == nil {
		return map[string]string{"gpu_stats": "engine not running"}
	}
	u, ok, why := h.gpu.measure(h.st.GPUs, pids)
	if !ok {
		return map[string]string{"gpu_stats": why}
	}
	a := u.attributes()
	a["gpu_stats"] = "nvml"
	return a
}

// roundDuration renders how long loading took: whole seconds from 10s up,
// tenths below.
func roundDuration(d time.Duration) string {
	if d >= 10*time.Second {
		return d.Round(time.Second).String()
	}
	return d.Round(100 * time.Millisecond).String()
}

func (h *taskHandle) readinessTimedOut() {
	reason := fmt.Sprintf("engine not ready after %s (ready.timeout): no 2xx from %s%s", h.st.ReadyTimeout, h.url(), h.st.ReadyPath)
	now := h.now()
	rec := stopRecord{Reason: reason, TermAt: now.UTC(), KillAt: now.Add(h.st.StopTimeout).UTC()}
	h.mu.Lock()
	h.stopping = true
	h.failure = reason
	h.killAt = rec.KillAt
	h.mu.Unlock()
	// Recorded before SIGTERM goes out: a plugin that restarts after it
	// must still send SIGKILL at the same deadline.
	if err := atomicfile.WriteJSON(filepath.Join(h.st.StateDir, stopFile), rec); err != nil {
		h.log.Warn("record readiness failure", "task_id", h.id, "error", err)
	}
	h.log.Error("readiness timeout; stopping the engine", "task_id", h.id, "reason", reason)
	h.emit(time.Time{}, fmt.Sprintf("Not ready after %s: stopping the engine", h.st.ReadyTimeout), map[string]string{"reason": reason})
	_ = h.signalGroup(syscall.SIGTERM)
}

// checkExit looks for the exit record and reports whether the task has
// exited (and its result is set).
func (h *taskHandle) checkExit() bool {
	select {
	case <-h.done:
		return true
	default:
	}
	ex, ok, err := supervisor.ReadExit(h.st.StateDir)
	if err != nil {
		h.log.Warn("read exit record", "task_id", h.id, "error", err)
	}
	if ok {
		h.finish(ex)
		return true
	}
	if h.st.Supervisor.Alive() {
		return false
	}
	// The supervisor is gone; it may have written the record just before.
	if ex, ok, _ := supervisor.ReadExit(h.st.StateDir); ok {
		h.finish(ex)
		return true
	}
	msg := fmt.Sprintf("supervisor (pid %d) ended without recording the engine's exit", h.st.Supervisor.Pid)
	// The engine itself died with it (its parent-death signal), but its
	// workers did not, and they hold GPU memory.
	killed, err := h.cleanup()
	switch {
	case err != nil:
		msg += fmt.Sprintf("; killing what the engine left: %v", err)
	case len(killed) > 0:
		msg += fmt.Sprintf("; killed %d processes the engine left (pids %s)", len(killed), joinInts(killed))
	}
	h.log.Error("lost the engine's supervisor", "task_id", h.id, "error", msg)
	h.setResult(&driverpb.ExitResult{ExitCode: -1}, msg, "unknown")
	h.emit(time.Time{}, "Engine lost: "+msg, nil)
	return true
}

// cleanup kills what is left of the engine's processes (its session, its
// process group, its cgroup) and removes its cgroup: for a supervisor
// that was killed before it could. A cgroup path in the handle that is
// not the one this task's id makes is left alone.
func (h *taskHandle) cleanup() ([]int, error) {
	rem := supervisor.Remains{Supervisor: h.st.Supervisor, Engine: h.st.Engine}
	if h.st.Cgroup != "" {
		if filepath.Base(h.st.Cgroup) == cgroupName(h.id) {
			rem.Cgroup = h.st.Cgroup
		} else {
			h.log.Warn("not touching a cgroup that is not this task's", "task_id", h.id, "cgroup", h.st.Cgroup, "want_name", cgroupName(h.id))
		}
	}
	killed, err := supervisor.Cleanup(rem, supervisor.RemainsTimeout)
	if len(killed) > 0 {
		h.log.Warn("killed processes the engine left", "task_id", h.id, "pids", joinInts(killed))
	}
	return killed, err
}

func joinInts(xs []int) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ",")
}

func (h *taskHandle) finish(ex supervisor.Exit) {
	h.pumpEvents() // what the supervisor noted before the exit comes first
	h.mu.Lock()
	stopping, ready, failure := h.stopping, h.ready, h.failure
	h.mu.Unlock()
	res := &driverpb.ExitResult{ExitCode: int32(ex.ExitCode), Signal: int32(ex.Signal), OomKilled: ex.OOMKilled}
	h.log.Info("engine exited", "task_id", h.id, "exit_code", ex.ExitCode, "signal", ex.Signal, "oom_killed", ex.OOMKilled)
	switch {
	case !stopping || ex.OOMKilled:
		msg, ann := exitMessage(ex, ready)
		h.emit(time.Time{}, msg, ann)
	case failure == "":
		// A stop Nomad asked for: said as such, whatever the status (an
		// engine told twice exits 1, one killed at the timeout by SIGKILL).
		h.emit(time.Time{}, stoppedMessage(ex), map[string]string{"exit_code": strconv.Itoa(ex.ExitCode)})
	}
	errStr := failure
	if errStr == "" && ex.OOMKilled {
		errStr = "engine was OOM-killed"
	}
	h.completedAtSet(ex.At)
	h.setResult(res, errStr, ex.OOMDetection)
}

func (h *taskHandle) completedAtSet(t time.Time) {
	h.mu.Lock()
	h.completedAt = t
	h.mu.Unlock()
}

func (h *taskHandle) setResult(res *driverpb.ExitResult, errStr, oom string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.result != nil {
		return
	}
	if h.completedAt.IsZero() {
		h.completedAt = time.Now().UTC()
	}
	h.result, h.resultErr, h.oomDetect = res, errStr, oom
	close(h.done)
}

// tailInMessage is how many output lines an exit event's message shows;
// the annotations hold all the supervisor kept.
const tailInMessage = 3

func exitMessage(ex supervisor.Exit, ready bool) (string, map[string]string) {
	var msg string
	switch {
	case ex.OOMKilled:
		msg = fmt.Sprintf("Engine was OOM-killed (exit code %d)", ex.ExitCode)
	case ex.Signal != 0:
		msg = fmt.Sprintf("Engine was killed by signal %d (%s)", ex.Signal, syscall.Signal(ex.Signal))
	default:
		msg = fmt.Sprintf("Engine exited with code %d", ex.ExitCode)
	}
	if !ready {
		msg += " before it was ready"
	}
	ann := map[string]string{"exit_code": strconv.Itoa(ex.ExitCode)}
	if len(ex.Tail) > 0 {
		last := ex.Tail
		if len(last) > tailInMessage {
			last = last[len(last)-tailInMessage:]
		}
		msg += ": " + strings.Join(last, " | ")
		ann["output_tail"] = strings.Join(ex.Tail, "\n")
	}
	return msg, ann
}

// stoppedMessage is the event of an engine that exited after a stop that
// was asked for.
func stoppedMessage(ex supervisor.Exit) string {
	if ex.Signal != 0 {
		return fmt.Sprintf("Engine stopped on request (killed by signal %d, %s)", ex.Signal, syscall.Signal(ex.Signal))
	}
	return fmt.Sprintf("Engine stopped on request (exit code %d)", ex.ExitCode)
}

// pumpEvents reports new events the supervisor recorded.
func (h *taskHandle) pumpEvents() {
	f, err := os.Open(filepath.Join(h.st.StateDir, supervisor.EventsFile))
	if err != nil {
		return
	}
	defer f.Close() //nolint:errcheck // read only
	h.mu.Lock()
	off := h.evOffset
	h.mu.Unlock()
	if _, err := f.Seek(off, io.SeekStart); err != nil {
		return
	}
	r := bufio.NewReader(f)
	moved := false
	for {
		line, err := r.ReadBytes('\n')
		if err != nil {
			break // a partial last line is read again next time
		}
		off += int64(len(line))
		moved = true
		var ev supervisor.Event
		if json.Unmarshal(line, &ev) != nil {
			continue
		}
		h.emitAt(ev.At, ev.Message, ev.Annotations)
	}
	if !moved {
		return
	}
	h.mu.Lock()
	h.evOffset = off
	h.mu.Unlock()
	if err := os.WriteFile(filepath.Join(h.st.StateDir, eventsOffsetFile), []byte(strconv.FormatInt(off, 10)), 0o600); err != nil {
		h.log.Warn("record event offset", "task_id", h.id, "error", err)
	}
}

func (h *taskHandle) emitAt(_ time.Time, msg string, ann map[string]string) {
	h.emit(time.Time{}, msg, ann)
}

// exited reports whether the result is known.
func (h *taskHandle) exited() bool {
	select {
	case <-h.done:
		return true
	default:
		return false
	}
}

// alive reports whether the engine's process group can still be
// signalled safely: the supervisor (which ends only after the group) or
// the engine itself still runs under the pid and start time recorded.
func (h *taskHandle) alive() bool {
	return !h.exited() && (h.st.Supervisor.Alive() || h.st.Engine.Alive())
}

// signalGroup sends sig to the engine's process group.
func (h *taskHandle) signalGroup(sig syscall.Signal) error {
	if !h.alive() {
		return nil
	}
	if err := syscall.Kill(-h.st.Engine.Pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("signal %v to process group %d: %w", sig, h.st.Engine.Pid, err)
	}
	return nil
}

// signalEngine sends sig to the engine's main process.
func (h *taskHandle) signalEngine(sig syscall.Signal) error {
	if h.exited() || !h.st.Engine.Alive() {
		return fmt.Errorf("signal %v: %w", sig, errNotRunning)
	}
	if err := syscall.Kill(h.st.Engine.Pid, sig); err != nil {
		return fmt.Errorf("signal %v to pid %d: %w", sig, h.st.Engine.Pid, err)
	}
	return nil
}

// stop sends sig to the process group, and SIGKILL after timeout; it
// returns once the exit is recorded (or gives up after killTimeout more).
func (h *taskHandle) stop(ctx context.Context, timeout time.Duration, sig syscall.Signal) error {
	if h.exited() {
		return nil
	}
	h.mu.Lock()
	h.stopping = true
	h.mu.Unlock()
	if err := h.signalGroup(sig); err != nil {
		return err
	}
	signalled := time.Now()
	t := time.NewTimer(timeout)
	defer t.Stop()
	// An engine that closes its port at the signal but waits for its
	// clients before it exits is told again once it has stopped serving
	// for stopRepeatAfter; one that still serves long after the signal has
	// lost it, and is told again too (engine.StopRule). Once.
	var probe <-chan time.Time
	rule := engineStopRule(h.st.EngineName)
	if rule.RepeatWhenUnserved || rule.RepeatWhenStillServing > 0 {
		tick := time.NewTicker(stopProbeEvery)
		defer tick.Stop()
		probe = tick.C
	}
	var unserved time.Time
wait:
	for {
		select {
		case <-h.done:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
			break wait
		case now := <-probe:
			msg, why, ok := h.repeatStop(ctx, rule, sig, signalled, &unserved, now)
			if !ok {
				continue
			}
			probe = nil
			h.log.Info("engine has not exited; repeating the stop signal", "task_id", h.id, "signal", unix.SignalName(sig), "why", msg)
			h.emit(time.Time{}, msg, map[string]string{"reason": why})
			if err := h.signalEngine(sig); err != nil && !errors.Is(err, errNotRunning) {
				h.log.Warn("repeat the stop signal", "task_id", h.id, "error", err)
			}
		}
	}
	h.log.Info("engine did not stop in time; killing its process group", "task_id", h.id, "timeout", timeout.String())
	if err := h.signalGroup(syscall.SIGKILL); err != nil {
		return err
	}
	k := time.NewTimer(killTimeout)
	defer k.Stop()
	select {
	case <-h.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-k.C:
		return fmt.Errorf("engine (pid %d) still not exited %s after SIGKILL", h.st.Engine.Pid, killTimeout)
	}
}

// repeatStop decides, at a probe at now, whether a stopping engine
// signalled at signalled is sent the signal again under rule: it has
// refused connections since *unserved for stopRepeatAfter, or it still
// accepts them rule.RepeatWhenStillServing after the signal. It returns
// the task event and its reason when so.
func (h *taskHandle) repeatStop(ctx context.Context, rule engine.StopRule, sig syscall.Signal, signalled time.Time, unserved *time.Time, now time.Time) (msg, why string, ok bool) {
	if h.serving(ctx) {
		*unserved = time.Time{}
		if rule.RepeatWhenStillServing <= 0 || now.Sub(signalled) < rule.RepeatWhenStillServing {
			return "", "", false
		}
		return fmt.Sprintf("Engine still serving %s after %s: sending it again", roundDuration(now.Sub(signalled)), unix.SignalName(sig)),
			rule.StillServingWhy, true
	}
	if !rule.RepeatWhenUnserved {
		return "", "", false
	}
	if unserved.IsZero() {
		*unserved = now
		return "", "", false
	}
	if now.Sub(*unserved) < stopRepeatAfter {
		return "", "", false
	}
	return fmt.Sprintf("Engine stopped serving but had not exited %s later: sending %s again", roundDuration(now.Sub(*unserved)), unix.SignalName(sig)),
		rule.Why, true
}

// stopProbeEvery is how often a stopping engine's port is tried, and
// stopRepeatAfter how long it must have refused connections before the
// stop signal is repeated: longer than an idle llama-server takes to exit
// after its port closes (about 1 s), so that an engine with nothing in
// flight exits on the first signal.
const (
	stopProbeEvery  = 200 * time.Millisecond
	stopRepeatAfter = 2 * time.Second
)

// engineStopRule is the stop rule of the engine a task runs.
func engineStopRule(name string) engine.StopRule {
	if d, ok := engine.Lookup(name); ok {
		return d.Stop
	}
	return engine.StopRule{}
}

// serving reports whether the engine still accepts connections on its
// port.
func (h *taskHandle) serving(ctx context.Context) bool {
	d := net.Dialer{Timeout: stopProbeEvery}
	c, err := d.DialContext(ctx, "tcp", net.JoinHostPort(h.st.Host, strconv.Itoa(h.st.Port)))
	if err != nil {
		return false
	}
	_ = c.Close()
	return true
}

// killTimeout bounds the wait for an exit record after SIGKILL.
const killTimeout = 30 * time.Second

// wait blocks until the task exits or ctx ends.
func (h *taskHandle) wait(ctx context.Context) (*driverpb.WaitTaskResponse, error) {
	select {
	case <-h.done:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return &driverpb.WaitTaskResponse{Result: h.result, Err: h.resultErr}, nil
}

// status is the task's state for InspectTask.
func (h *taskHandle) status() (*driverpb.TaskStatus, map[string]string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	ts := &driverpb.TaskStatus{
		Id:        h.id,
		Name:      h.cfg.GetName(),
		State:     driverpb.TaskState_RUNNING,
		StartedAt: timestamppb.New(h.st.StartedAt),
	}
	if h.result != nil {
		ts.State = driverpb.TaskState_EXITED
		ts.CompletedAt = timestamppb.New(h.completedAt)
		ts.Result = h.result
	}
	attrs := map[string]string{
		"engine":               h.st.EngineName,
		"model":                h.st.Model,
		"command":              h.st.Command,
		"url":                  h.url(),
		"ready":                strconv.FormatBool(h.ready),
		"ready_path":           h.st.ReadyPath,
		"gpus":                 strings.Join(h.st.GPUs, ","),
		"cuda_visible_devices": strings.Join(h.st.CUDAVisible, ","),
		"tensor_parallel":      strconv.Itoa(h.st.TensorParallel),
		"engine_pid":           strconv.Itoa(h.st.Engine.Pid),
		"supervisor_pid":       strconv.Itoa(h.st.Supervisor.Pid),
		"state_dir":            h.st.StateDir,
	}
	if h.ready {
		attrs["ready_at"] = h.readyAt.Format(time.RFC3339Nano)
		attrs["ready_after"] = roundDuration(h.readyAt.Sub(h.st.StartedAt))
	}
	switch {
	case h.st.Cgroup != "" && h.st.OOMError != "":
		attrs["oom_detection"] = "unavailable: " + h.st.OOMError
	case h.st.Cgroup != "":
		attrs["oom_detection"] = "cgroup v2 memory.events (" + h.st.Cgroup + ")"
	case h.st.CgroupError != "":
		attrs["oom_detection"] = "unavailable: " + h.st.CgroupError
	default:
		attrs["oom_detection"] = "disabled"
	}
	if h.st.User != "" {
		attrs["user"] = h.st.User
	}
	switch {
	case len(h.st.Unenforced) > 0:
		attrs["resource_limits"] = "not enforced: " + strings.Join(h.st.Unenforced, "; ")
		if len(h.st.Limits) > 0 {
			attrs["resource_limits"] += "; enforced: " + strings.Join(h.st.Limits, ", ")
		}
	case len(h.st.Limits) > 0:
		attrs["resource_limits"] = strings.Join(h.st.Limits, ", ") + " (" + h.st.Cgroup + ")"
	}
	if h.failure != "" {
		attrs["failure"] = h.failure
	}
	return ts, attrs
}
