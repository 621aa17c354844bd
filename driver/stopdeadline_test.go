package driver

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	hclog "github.com/hashicorp/go-hclog"

	"github.com/llmgw/llmgw/internal/testing/fakeclock"
	"github.com/llmgw/llmgw/internal/testing/wait"
	"github.com/llmgw/llmgw/nomadplugin/pb/driverpb"
	"github.com/llmgw/llmgw/nomadplugin/plugintest"
)

// waitReads waits until the clock was read n more times (so a task's
// owner goroutine went round its loop with the time last set), failing
// with why if broken() reports something first.
func waitReads(t *testing.T, c *fakeclock.Clock, n int, broken func() string) {
	t.Helper()
	want := c.Reads() + n
	wait.For(t, fmt.Sprintf("%d reads of the clock", want), func() (bool, string) {
		if why := broken(); why != "" {
			t.Fatal(why)
		}
		return c.Reads() >= want, fmt.Sprintf("read %d times", c.Reads())
	})
	if why := broken(); why != "" {
		t.Fatal(why)
	}
}

// TestReadinessKillDeadlineSurvivesRestart: an engine that ignores
// SIGTERM misses its readiness timeout; the plugin sends SIGTERM and
// then restarts (a new Plugin recovers the task from its handle) before
// stop_timeout has passed. The recovered task must not be killed before
// the original deadline and must be SIGKILLed once it has passed. Time
// is the injected clock's; nothing depends on how fast the machine is.
func TestReadinessKillDeadlineSurvivesRestart(t *testing.T) {
	sup := plugintest.Build(t, "github.com/llmgw/llmgw/cmd/llmgw-supervisor")
	t0 := time.Now()
	clock := fakeclock.New(t0)
	conf := DefaultConfig()
	conf.CgroupParent = ""
	conf.ResourceLimits = LimitsBestEffort
	conf.AllowAnyCommand = true
	conf.DefaultUser, conf.AllowRoot = "root", true
	conf.StopTimeout = time.Hour
	newPlugin := func() *Plugin {
		p := New(t.Context(), hclog.NewNullLogger(), "test", sup)
		p.now = clock.Now
		p.conf = conf
		return p
	}

	allocDir := t.TempDir()
	name := "engine"
	if err := os.MkdirAll(filepath.Join(allocDir, name), 0o755); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close() // nothing answers there: the engine never becomes ready
	// The engine says when it ignores SIGTERM; the test sends none before.
	trapped := filepath.Join(allocDir, name, "trapped")
	cfg := &driverpb.TaskConfig{
		Id: "aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee/engine/0000cafe", Name: name,
		AllocId: "aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee", AllocDir: allocDir,
		Env: map[string]string{"PATH": os.Getenv("PATH")},
		MsgpackDriverConfig: encode(t, TaskConfigSpec(), `
engine  = "command"
command = "/bin/sh"
args    = ["-c", "trap '' TERM; : > `+trapped+`; while :; do sleep 1; done"]
port    = "http"
ready {
  timeout  = "1m"
  interval = "100ms"
}
`),
		Resources: &driverpb.Resources{Ports: []*driverpb.PortMapping{{Label: "http", Value: int32(port), HostIp: "127.0.0.1"}}},
	}

	p1 := newPlugin()
	resp, err := p1.StartTask(t.Context(), &driverpb.StartTaskRequest{Task: cfg})
	if err != nil {
		t.Fatalf("StartTask: %v", err)
	}
	var st driverState
	if err := json.Unmarshal(resp.GetHandle().GetDriverState(), &st); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(-st.Engine.Pid, syscall.SIGKILL)
		wait.Until(t, "supervisor gone at the end", func() bool { return !st.Supervisor.Alive() })
	})

	// Past ready.timeout: SIGTERM, which the engine ignores.
	h1, err := p1.task(cfg.GetId())
	if err != nil {
		t.Fatal(err)
	}
	wait.Until(t, "engine ignoring SIGTERM", func() bool { _, err := os.Stat(trapped); return err == nil })
	clock.Set(t0.Add(2 * time.Minute))
	wait.Until(t, "readiness timeout noticed", func() bool {
		_, attrs := h1.status()
		return attrs["failure"] != ""
	})
	killAt := t0.Add(2 * time.Minute).Add(conf.StopTimeout)
	waitReads(t, clock, 3, func() string {
		if !st.Engine.Alive() {
			return "engine died of SIGTERM; the test needs one that ignores it"
		}
		return ""
	})

	// The plugin restarts before the SIGKILL is due.
	p1.Close()
	p2 := newPlugin()
	defer p2.Close()
	if _, err := p2.RecoverTask(t.Context(), &driverpb.RecoverTaskRequest{TaskId: cfg.GetId(), Handle: resp.GetHandle()}); err != nil {
		t.Fatalf("RecoverTask: %v", err)
	}
	h, err := p2.task(cfg.GetId())
	if err != nil {
		t.Fatal(err)
	}

	// Just before the deadline: the recovered task is stopping, and waits.
	clock.Set(killAt.Add(-time.Second))
	waitReads(t, clock, 5, func() string {
		if !st.Engine.Alive() || h.exited() {
			return "engine killed before the SIGKILL deadline set before the restart"
		}
		return ""
	})
	_, attrs := h.status()
	if !strings.Contains(attrs["failure"], "not ready after 1m0s") {
		t.Errorf("recovered failure %q, want the readiness timeout", attrs["failure"])
	}

	// Past it: SIGKILL.
	clock.Set(killAt.Add(time.Second))
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	w, err := p2.WaitTask(ctx, &driverpb.WaitTaskRequest{TaskId: cfg.GetId()})
	if err != nil {
		t.Fatalf("WaitTask after the deadline: %v (the recovered task never sent SIGKILL)", err)
	}
	if w.GetResult().GetSignal() != int32(syscall.SIGKILL) {
		t.Errorf("result %v, want killed by SIGKILL", w.GetResult())
	}
	if !strings.Contains(w.GetErr(), "not ready after 1m0s") {
		t.Errorf("WaitTask err %q, want the readiness timeout", w.GetErr())
	}
}

// TestRestoreStopRecords: restore takes the stop reason and SIGKILL
// deadline from stop.json, and from a failure.txt an older driver wrote
// (the deadline is then its time of writing plus stop_timeout).
func TestRestoreStopRecords(t *testing.T) {
	dir := t.TempDir()
	h := newHandle("id", &driverpb.TaskConfig{}, driverState{StateDir: dir, StopTimeout: time.Minute}, hclog.NewNullLogger(), nil, nil)
	h.restore()
	if h.stopping || !h.killAt.IsZero() {
		t.Fatalf("restore with no records: stopping %v killAt %v", h.stopping, h.killAt)
	}
	written := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	if err := os.WriteFile(filepath.Join(dir, failureFile), []byte("old reason"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(filepath.Join(dir, failureFile), written, written); err != nil {
		t.Fatal(err)
	}
	h.restore()
	if !h.stopping || h.failure != "old reason" || !h.killAt.Equal(written.Add(time.Minute)) {
		t.Errorf("restore from failure.txt: stopping %v failure %q killAt %v, want true, old reason, %v", h.stopping, h.failure, h.killAt, written.Add(time.Minute))
	}
	killAt := written.Add(time.Hour)
	b, _ := json.Marshal(stopRecord{Reason: "new reason", TermAt: written, KillAt: killAt})
	if err := os.WriteFile(filepath.Join(dir, stopFile), b, 0o600); err != nil {
		t.Fatal(err)
	}
	h.restore()
	if h.failure != "new reason" || !h.killAt.Equal(killAt) {
		t.Errorf("restore from stop.json: failure %q killAt %v, want new reason, %v", h.failure, h.killAt, killAt)
	}
}
