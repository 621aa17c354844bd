package driver_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/llmgw/llmgw/enginemetrics"
	"github.com/llmgw/llmgw/internal/testing/wait"
	"github.com/llmgw/llmgw/nomadplugin/pb/driverpb"
)

// TestEngineMetricsThroughTaskStats runs fake-engine as SGLang (the
// recipe passes --enable-metrics; fake-engine takes SGLang's command line
// and serves SGLang's metric names) with one batch slot, opens a TaskStats
// stream as a Nomad client does, puts three requests on it, and reads the
// engine's load back from InspectTask: one running, two waiting, then the
// tokens per second and the time to first token once they are done.
func TestEngineMetricsThroughTaskStats(t *testing.T) {
	p := startPlugin(t, pluginBody)
	tk := newTask(t, taskOpts{body: `
engine  = "sglang"
model   = "meta-llama/Llama-3.1-8B-Instruct"
command = "%ENGINE%"
port    = "%PORT%"
args    = ["--max-running-requests", "1", "--tokens-per-second", "20"]
`})
	p.start(t, tk)
	id := tk.cfg.GetId()
	p.events.wait(t, id, "Ready after", 30*time.Second)
	attrs := inspect(t, p, id)
	if !strings.HasPrefix(attrs["engine_metrics"], "not read yet") {
		t.Errorf("before any stats: engine_metrics %q", attrs["engine_metrics"])
	}

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	stats, err := p.Driver.TaskStats(ctx, &driverpb.TaskStatsRequest{TaskId: id, CollectionInterval: durationpb.New(time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	statsDone := make(chan struct{})
	go func() {
		defer close(statsDone)
		for {
			if _, err := stats.Recv(); err != nil {
				return
			}
		}
	}()
	defer func() { cancel(); <-statsDone }()
	p.events.wait(t, id, "Engine metrics read from /metrics", 10*time.Second)
	idle := waitAttrs(t, p, id, "an idle engine read", func(a map[string]string) bool {
		return a["engine_metrics"] == "ok" && a["engine_requests_running"] == "0"
	})
	if idle["engine_requests_waiting"] != "0" || idle["engine_kv_cache_usage"] != "0" {
		t.Errorf("idle: %v", idle)
	}

	// Three requests of 60 tokens at 20 tokens a second: 3s each, one at a
	// time; each reading covers the second since the one before.
	url := "http://127.0.0.1:" + strconv.Itoa(tk.port) + "/v1/completions"
	var wg sync.WaitGroup
	for i := range 3 {
		wg.Go(func() {
			body := fmt.Sprintf(`{"prompt":"request %d","max_tokens":60}`, i)
			resp, err := http.Post(url, "application/json", strings.NewReader(body))
			if err != nil {
				t.Errorf("completion: %v", err)
				return
			}
			_ = resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Errorf("completion: %s", resp.Status)
			}
		})
	}
	waitAttrs(t, p, id, "one running and two waiting", func(a map[string]string) bool {
		return a["engine_requests_running"] == "1" && a["engine_requests_waiting"] == "2"
	})
	// A second in which a request got its first token.
	waitAttrs(t, p, id, "a reading with a time to first token", func(a map[string]string) bool {
		return a["engine_ttft_mean_seconds"] != "-" && a["engine_ttft_p90_seconds"] != "-"
	})
	wg.Wait()
	after := waitAttrs(t, p, id, "all three done", func(a map[string]string) bool {
		return a["engine_requests_running"] == "0" && a["engine_requests_waiting"] == "0"
	})
	var r enginemetrics.Reading
	if err := json.Unmarshal([]byte(after["engine_metrics_json"]), &r); err != nil {
		t.Fatalf("engine_metrics_json %q: %v", after["engine_metrics_json"], err)
	}
	if !r.TokensPerSecond.Known || r.Since.IsZero() || !r.At.After(r.Since) {
		t.Errorf("reading has no rate: %+v", r)
	}
	if after["engine_metrics_absent"] != "" {
		t.Errorf("SGLang reported absent %q", after["engine_metrics_absent"])
	}
}

// TestEngineMetricsUnreadable: llama.cpp serves /metrics only with
// --metrics; a task that turns it off again gets an event naming why, and
// InspectTask says so.
func TestEngineMetricsUnreadable(t *testing.T) {
	p := startPlugin(t, pluginBody)
	model := filepath.Join(t.TempDir(), "tiny.gguf") // llama.cpp's model is a file that must be there
	writeFile(t, model, "GGUF")
	tk := newTask(t, taskOpts{body: `
engine  = "llamacpp"
model   = "` + model + `"
command = "%ENGINE%"
port    = "%PORT%"
args    = ["--metrics=false"]
`})
	p.start(t, tk)
	id := tk.cfg.GetId()
	p.events.wait(t, id, "Ready after", 30*time.Second)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	stats, err := p.Driver.TaskStats(ctx, &driverpb.TaskStatsRequest{TaskId: id, CollectionInterval: durationpb.New(200 * time.Millisecond)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stats.Recv(); err != nil {
		t.Fatal(err)
	}
	ev := p.events.wait(t, id, "Engine metrics unreadable", 10*time.Second)
	if !strings.Contains(ev.GetMessage(), "501") || !strings.Contains(ev.GetMessage(), "--metrics") {
		t.Errorf("event %q does not say why", ev.GetMessage())
	}
	a := inspect(t, p, id)
	if !strings.HasPrefix(a["engine_metrics"], "unreadable: ") || !strings.Contains(a["engine_metrics"], "Start it with") {
		t.Errorf("engine_metrics %q", a["engine_metrics"])
	}
	if _, ok := a["engine_requests_waiting"]; ok {
		t.Errorf("values without a reading: %v", a)
	}
}

func inspect(t *testing.T, p *plugin, id string) map[string]string {
	t.Helper()
	insp, err := p.Driver.InspectTask(ctxT(t, 5*time.Second), &driverpb.InspectTaskRequest{TaskId: id})
	if err != nil {
		t.Fatal(err)
	}
	return insp.GetDriver().GetAttributes()
}

// waitAttrs polls InspectTask until ok holds.
func waitAttrs(t *testing.T, p *plugin, id, what string, ok func(map[string]string) bool) map[string]string {
	t.Helper()
	var a map[string]string
	wait.For(t, what, func() (bool, string) {
		a = inspect(t, p, id)
		keep := map[string]string{}
		for k, v := range a {
			if strings.HasPrefix(k, "engine_") {
				keep[k] = v
			}
		}
		return ok(a), fmt.Sprintf("engine attributes: %v", keep)
	}, wait.Every(50*time.Millisecond))
	return a
}
