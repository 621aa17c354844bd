package driver

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/llmgw/llmgw/engine"
	"github.com/llmgw/llmgw/enginemetrics"
)

// Engine metrics. On each TaskStats tick, once the engine is ready, the
// driver scrapes the engine's Prometheus metrics on its own address and
// keeps the reading (enginemetrics: waiting and running requests, KV-cache
// use, time to first token and tokens per second over the interval since
// the previous scrape). Nomad's TaskStats message has CPU and memory
// fields only, so the reading is not in what `nomad alloc status -stats`
// shows; the driver reports it in InspectTask's attributes, says in a task
// event when the metrics become readable or stop being so, and the
// controller and the gateway read the same endpoint themselves
// (docs/driver.md, "Engine metrics").

// metricsMinGap is the least time between two scrapes of one engine, when
// Nomad asks for stats more often or more than one stream is open.
const metricsMinGap = time.Second

// metricsEventEvery bounds the task events about the metrics' state: Nomad
// keeps a task's last ten events, and an engine whose endpoint flaps must
// not push the rest out.
const metricsEventEvery = 10 * time.Minute

// metricsTimeout bounds one scrape: the stats interval, within 500ms–5s.
func metricsTimeout(interval time.Duration) time.Duration {
	return min(max(interval, 500*time.Millisecond), enginemetrics.DefaultTimeout)
}

// metricsClient scrapes engines: loopback or the node's own address,
// never through a proxy, one kept-alive connection per engine.
var metricsClient = &http.Client{Transport: &http.Transport{
	Proxy:               nil,
	MaxIdleConnsPerHost: 1,
	IdleConnTimeout:     time.Minute,
	DisableCompression:  true,
}}

// engineStats is a task's latest engine metrics.
type engineStats struct {
	mu      sync.Mutex
	tracker enginemetrics.Tracker
	reading *enginemetrics.Reading // last good reading
	err     string                 // the last scrape's error, "" after a good one
	errAt   time.Time
	began   time.Time // the last scrape's start
	// readable is the state the last event reported (nil: none yet);
	// eventAt is when.
	readable *bool
	eventAt  time.Time
}

// scrapeEngineMetrics reads the engine's metrics once, within timeout,
// unless the engine is not ready (it may not listen yet), serves no HTTP
// (ready.skip), has no known metrics, or was scraped less than
// metricsMinGap ago. It runs on the TaskStats stream's goroutine and
// returns when the scrape is done or ctx ends.
func (h *taskHandle) scrapeEngineMetrics(ctx context.Context, timeout time.Duration) {
	names, ok := engine.MetricsOf(h.st.EngineName)
	if !ok || !names.Known() || h.st.ReadySkip {
		return
	}
	h.mu.Lock()
	ready, stopping := h.ready, h.stopping
	h.mu.Unlock()
	if !ready || stopping {
		return
	}
	es := &h.engineStats
	now := time.Now()
	es.mu.Lock()
	if !es.began.IsZero() && now.Sub(es.began) < metricsMinGap {
		es.mu.Unlock()
		return
	}
	es.began = now
	es.mu.Unlock()

	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	s, err := enginemetrics.Scrape(cctx, metricsClient, h.url(), names, time.Now)
	if err != nil && ctx.Err() != nil {
		return // the stream ended, not the engine
	}
	es.mu.Lock()
	if err != nil {
		es.err, es.errAt = err.Error(), time.Now()
	} else {
		r := es.tracker.Observe(s)
		es.reading, es.err = &r, ""
	}
	readable := err == nil
	report := es.readable == nil || *es.readable != readable
	if report && es.readable != nil && time.Since(es.eventAt) < metricsEventEvery {
		report = false
	}
	if report {
		es.readable, es.eventAt = &readable, time.Now()
	}
	var r enginemetrics.Reading
	if es.reading != nil {
		r = *es.reading
	}
	es.mu.Unlock()
	if !report {
		return
	}
	if err != nil {
		h.log.Warn("engine metrics unreadable", "task_id", h.id, "error", err)
		h.emit(time.Time{}, "Engine metrics unreadable: "+err.Error(), map[string]string{"engine_metrics": "unreadable"})
		return
	}
	msg := "Engine metrics read from " + names.Path
	if len(r.Absent) > 0 {
		msg += "; " + h.st.EngineName + " exports no " + strings.Join(r.Absent, ", ")
	}
	if len(r.Missing) > 0 {
		msg += "; not in this scrape: " + strings.Join(r.Missing, ", ")
	}
	h.log.Info("engine metrics readable", "task_id", h.id, "path", names.Path, "absent", r.Absent, "missing", r.Missing)
	h.emit(time.Time{}, msg, map[string]string{"engine_metrics": "readable"})
}

// engineMetricsAttributes are InspectTask's engine_* attributes: the last
// reading, as numbers ("-" when unknown) and as JSON, and the state of the
// scrape.
func (h *taskHandle) engineMetricsAttributes() map[string]string {
	names, ok := engine.MetricsOf(h.st.EngineName)
	switch {
	case !ok || !names.Known():
		return map[string]string{"engine_metrics": "none known for engine " + h.st.EngineName}
	case h.st.ReadySkip:
		return map[string]string{"engine_metrics": "not read: ready.skip (the task serves no HTTP)"}
	}
	es := &h.engineStats
	es.mu.Lock()
	defer es.mu.Unlock()
	a := map[string]string{}
	switch {
	case es.err != "":
		a["engine_metrics"] = "unreadable: " + es.err
		a["engine_metrics_error_at"] = es.errAt.Format(time.RFC3339Nano)
	case es.reading == nil:
		a["engine_metrics"] = "not read yet (read on the task stats ticks once the engine is ready)"
	default:
		a["engine_metrics"] = "ok"
	}
	a["engine_metrics_url"] = h.url() + names.Path
	if es.reading == nil {
		return a
	}
	r := *es.reading
	a["engine_metrics_at"] = r.At.Format(time.RFC3339Nano)
	a["engine_requests_waiting"] = r.RequestsWaiting.String()
	a["engine_requests_running"] = r.RequestsRunning.String()
	a["engine_kv_cache_usage"] = r.KVCacheUsage.String()
	a["engine_ttft_p50_seconds"] = r.TTFT.P50.String()
	a["engine_ttft_p90_seconds"] = r.TTFT.P90.String()
	a["engine_ttft_mean_seconds"] = r.TTFT.Mean.String()
	a["engine_tokens_per_second"] = r.TokensPerSecond.String()
	if len(r.Absent) > 0 {
		a["engine_metrics_absent"] = strings.Join(r.Absent, ",")
	}
	if len(r.Missing) > 0 {
		a["engine_metrics_missing"] = strings.Join(r.Missing, ",")
	}
	if b, err := json.Marshal(r); err == nil {
		a["engine_metrics_json"] = string(b)
	}
	return a
}
