package controller

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/model"

	"github.com/llmgw/llmgw/controller/config"
	"github.com/llmgw/llmgw/controller/observe"
	"github.com/llmgw/llmgw/devicesapi"
	"github.com/llmgw/llmgw/internal/testing/ctlharness"
)

func TestVectorDraws(t *testing.T) {
	s := func(uuid string, w float64) *model.Sample {
		m := model.Metric{"__name__": "x"}
		if uuid != "" {
			m["UUID"] = model.LabelValue(uuid)
		}
		return &model.Sample{Metric: m, Value: model.SampleValue(w)}
	}
	got := vectorDraws(model.Vector{
		s("GPU-a", 301.5), s("GPU-b", 120), s("GPU-b", 140), // two series of one GPU: the larger
		s("", 500),                                                            // no UUID
		s("GPU-nan", math.NaN()), s("GPU-inf", math.Inf(1)), s("GPU-neg", -1), // not draws
		s("GPU-zero", 0),
	}, "UUID")
	want := map[string]float64{"GPU-a": 301.5, "GPU-b": 140, "GPU-zero": 0}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("vectorDraws = %v, want %v", got, want)
	}
}

func TestWithDraws(t *testing.T) {
	st := nodeStats{gpus: []observe.GPUReading{
		{ID: "GPU-a", Model: "H200", Watts: 100, EnforcedW: 650, DefaultW: 700, MinW: 200, MaxW: 700, CapState: "default", From: fromClientStats},
		{ID: "GPU-b", Model: "H200", Watts: 100, EnforcedW: 700, DefaultW: 700, MinW: 200, MaxW: 700, CapState: "default", From: fromClientStats},
	}}
	gs, p, ok := withDraws(st, map[string]float64{"GPU-a": 300, "GPU-b": 310, "GPU-c": 1})
	if !ok || p != (observe.Power{GPUWatts: 610, Devices: 2}) {
		t.Fatalf("withDraws = %v %+v, want 610 W of 2 GPUs", ok, p)
	}
	if gs[0].Watts != 300 || gs[0].From != fromPrometheus || gs[0].EnforcedW != 650 || gs[0].CapState != "default" || gs[1].Watts != 310 {
		t.Errorf("readings %+v: want the draws from Prometheus, the limits and state from client stats", gs)
	}
	if st.gpus[0].Watts != 100 {
		t.Errorf("withDraws changed the node's client-stats read: %+v", st.gpus[0])
	}
	if _, _, ok := withDraws(st, map[string]float64{"GPU-a": 300}); ok {
		t.Error("a node with a GPU Prometheus lacks counts as covered")
	}
	if _, _, ok := withDraws(nodeStats{}, map[string]float64{"GPU-a": 300}); ok {
		t.Error("a node never read counts as covered")
	}
}

func TestPlanPowerReads(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	ids := []string{"a", "b", "c", "d", "e"}
	stats := map[string]nodeStats{
		"a": {at: now.Add(-time.Minute)},
		"b": {at: now.Add(-20 * time.Minute)},
		"c": {at: now.Add(-30 * time.Minute)},
		"d": {at: now.Add(-time.Second)},
	}
	for _, tc := range []struct {
		name    string
		covered map[string]bool
		written map[string]bool
		budget  int
		read    []string
		why     map[string]string
	}{
		{"no source", nil, nil, 0, ids, map[string]string{"a": readNoSource, "b": readNoSource, "c": readNoSource, "d": readNoSource, "e": readNoSource}},
		{"four covered, two due, the oldest first", map[string]bool{"a": true, "b": true, "c": true, "d": true}, nil, 10,
			[]string{"e", "c", "b"}, map[string]string{"b": readRefresh, "c": readRefresh, "e": readMissing}},
		{"the budget takes the oldest", map[string]bool{"a": true, "b": true, "c": true, "d": true}, nil, 1,
			[]string{"e", "c"}, map[string]string{"c": readRefresh, "e": readMissing}},
		{"written first, then the oldest", map[string]bool{"a": true, "b": true, "c": true, "d": true}, map[string]bool{"d": true}, 2,
			[]string{"e", "d", "c"}, map[string]string{"d": readWritten, "c": readRefresh, "e": readMissing}},
		{"missing nodes are read whatever the budget", map[string]bool{"a": true, "b": true, "c": true}, nil, 1,
			[]string{"d", "e", "c"}, map[string]string{"d": readMissing, "e": readMissing, "c": readRefresh}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pl := planPowerReads(ids, tc.covered, stats, tc.written, now, 10*time.Minute, tc.budget)
			if !slices.Equal(pl.read, tc.read) || fmt.Sprint(pl.why) != fmt.Sprint(tc.why) {
				t.Errorf("plan = %v %v, want %v %v", pl.read, pl.why, tc.read, tc.why)
			}
		})
	}
}

func TestStatsBudget(t *testing.T) {
	for _, tc := range []struct {
		interval time.Duration
		want     int
	}{{30 * time.Second, 300}, {time.Second, 10}, {100 * time.Millisecond, 1}, {10 * time.Minute, 6000}} {
		if got := statsBudget(tc.interval); got != tc.want {
			t.Errorf("statsBudget(%s) = %d, want %d", tc.interval, got, tc.want)
		}
	}
}

// promAPI is a stand-in for Prometheus's HTTP API (/api/v1/query) that
// answers each query with the vector answer() returns, encoded by
// prometheus/common's model types, or with status when not 200. It
// records the queries.
type promAPI struct {
	mu      sync.Mutex
	status  int
	vector  model.Vector
	queries []string
}

func (p *promAPI) set(status int, draws map[string]float64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.status = status
	p.vector = nil
	for _, id := range sortedKeys(draws) {
		p.vector = append(p.vector, &model.Sample{Metric: model.Metric{"UUID": model.LabelValue(id)}, Value: model.SampleValue(draws[id]), Timestamp: model.Now()})
	}
}

func (p *promAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if r.URL.Path != "/api/v1/query" {
		http.NotFound(w, r)
		return
	}
	_ = r.ParseForm()
	p.queries = append(p.queries, r.Form.Get("query"))
	w.Header().Set("Content-Type", "application/json")
	if p.status != http.StatusOK {
		w.WriteHeader(p.status)
		_, _ = io.WriteString(w, `{"status":"error","errorType":"unavailable","error":"down for the test"}`)
		return
	}
	res, _ := json.Marshal(p.vector)
	fmt.Fprintf(w, `{"status":"success","data":{"resultType":"vector","result":%s}}`, res)
}

// TestPowerRoundSources runs the power poll's rounds (powerRound) on two
// nodes of two GPUs each against the Nomad fake, whose client stats give
// every GPU 100 W with its limits, and a stand-in Prometheus API giving
// other draws: which nodes are read through client stats, and what each
// GPU's reading holds, round by round.
func TestPowerRoundSources(t *testing.T) {
	e := ctlharness.New(t, ctlharness.Spec{Nodes: []ctlharness.Node{{Name: "n1", Rack: "r1", PDU: "p1", GPUs: 2}, {Name: "n2", Rack: "r1", PDU: "p1", GPUs: 2}}})
	f := func(v float64) *api.StatValue { return &api.StatValue{FloatNumeratorVal: &v, Unit: "W"} }
	for _, n := range []string{"n1", "n2"} {
		for i := range 2 {
			id := fmt.Sprintf("%s-gpu%d", n, i)
			state := "default"
			if err := e.Fake.SetPowerDraw(e.NodeIDs[n], id, 100); err != nil {
				t.Fatal(err)
			}
			if err := e.Fake.SetDeviceStats(e.NodeIDs[n], id, map[string]*api.StatValue{
				devicesapi.StatEnforcedLimit: f(650), devicesapi.StatDefaultLimit: f(700), devicesapi.StatMinLimit: f(200),
				devicesapi.StatMaxLimit: f(700), devicesapi.StatPowerCap: {StringVal: &state},
			}); err != nil {
				t.Fatal(err)
			}
		}
	}
	prom := &promAPI{}
	ps := httptest.NewServer(prom)
	t.Cleanup(ps.Close)
	pp, err := newPromPower(config.PowerPrometheus{Address: ps.URL, Selector: config.DefaultPowerSelector, UUIDLabel: "UUID", MaxAge: time.Minute, ClientStatsInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	o := newObserver()
	o.nomad, o.log, o.metrics, o.promPower = e.API, slog.New(slog.DiscardHandler), newMetrics(), pp
	o.powerInterval = 30 * time.Second
	for name, id := range e.NodeIDs {
		o.snap.nodes[id] = e.Fake.Node(id)
		if o.snap.nodes[id] == nil {
			t.Fatalf("no node %s", name)
		}
	}
	// statsReads are the nodes whose client stats were read since the
	// first from, by name, sorted, and how many reads there were in all.
	statsReads := func(from int) ([]string, int) {
		var out []string
		n := 0
		for _, r := range e.Fake.Requests() {
			if r.Path != "/v1/client/stats" {
				continue
			}
			if n++; n <= from {
				continue
			}
			for name, id := range e.NodeIDs {
				if r.Query.Get("node_id") == id {
					out = append(out, name)
				}
			}
		}
		sort.Strings(out)
		return out, n
	}
	seen := 0
	// round runs one round and checks the nodes it read through client
	// stats and each GPU's draw and source.
	round := func(name string, read []string, want map[string]string) {
		t.Helper()
		_, gpus := o.powerRound(t.Context())
		got, n := statsReads(seen)
		if !slices.Equal(got, read) {
			t.Errorf("%s: client stats read of %v, want %v", name, got, read)
		}
		seen = n
		readings := map[string]string{}
		for id, gs := range gpus {
			for _, g := range gs {
				if g.EnforcedW != 650 || g.DefaultW != 700 || g.CapState != "default" {
					t.Errorf("%s: %s on %s has limits %+v, want client stats'", name, g.ID, id, g)
				}
				readings[g.ID] = fmt.Sprintf("%g %s", g.Watts, g.From)
			}
		}
		if fmt.Sprint(readings) != fmt.Sprint(want) {
			t.Errorf("%s: readings %v, want %v", name, readings, want)
		}
	}
	every := map[string]float64{"n1-gpu0": 301, "n1-gpu1": 302, "n2-gpu0": 401, "n2-gpu1": 402}
	prom.set(http.StatusOK, every)
	round("first round (no node read yet)", []string{"n1", "n2"}, map[string]string{
		"n1-gpu0": "100 client_stats", "n1-gpu1": "100 client_stats", "n2-gpu0": "100 client_stats", "n2-gpu1": "100 client_stats"})
	fromProm := map[string]string{"n1-gpu0": "301 prometheus", "n1-gpu1": "302 prometheus", "n2-gpu0": "401 prometheus", "n2-gpu1": "402 prometheus"}
	round("every GPU in Prometheus", nil, fromProm)
	if want := "max by (UUID) (last_over_time(DCGM_FI_DEV_POWER_USAGE[1m]))"; prom.queries[len(prom.queries)-1] != want {
		t.Errorf("query %q, want %q", prom.queries[len(prom.queries)-1], want)
	}
	if got := testutil.ToFloat64(o.metrics.powerGPUDraws.WithLabelValues(fromPrometheus)); got != 4 {
		t.Errorf("llmgw_power_gpu_draws{source=prometheus} = %g, want 4", got)
	}

	prom.set(http.StatusOK, map[string]float64{"n1-gpu0": 311, "n1-gpu1": 312, "n2-gpu0": 411})
	round("a GPU missing from Prometheus", []string{"n2"}, map[string]string{
		"n1-gpu0": "311 prometheus", "n1-gpu1": "312 prometheus", "n2-gpu0": "100 client_stats", "n2-gpu1": "100 client_stats"})

	prom.set(http.StatusServiceUnavailable, nil)
	round("Prometheus down", []string{"n1", "n2"}, map[string]string{
		"n1-gpu0": "100 client_stats", "n1-gpu1": "100 client_stats", "n2-gpu0": "100 client_stats", "n2-gpu1": "100 client_stats"})
	if got := testutil.ToFloat64(o.metrics.powerSourceFailures); got != 1 {
		t.Errorf("llmgw_power_source_failures_total = %g, want 1", got)
	}

	prom.set(http.StatusOK, every)
	o.capsWrittenTo([]string{"n1"})
	round("n1's caps written", []string{"n1"}, map[string]string{
		"n1-gpu0": "100 client_stats", "n1-gpu1": "100 client_stats", "n2-gpu0": "401 prometheus", "n2-gpu1": "402 prometheus"})
	round("back to Prometheus", nil, fromProm)

	// client_stats_interval passed for both; a power_interval of 100 ms
	// allows one refresh a round: the oldest read (n2's) first.
	o.promPower.statsEvery, o.powerInterval = time.Nanosecond, 100*time.Millisecond
	round("refresh, one a round", []string{"n2"}, map[string]string{
		"n1-gpu0": "301 prometheus", "n1-gpu1": "302 prometheus", "n2-gpu0": "100 client_stats", "n2-gpu1": "100 client_stats"})
	round("refresh, the next", []string{"n1"}, map[string]string{
		"n1-gpu0": "100 client_stats", "n1-gpu1": "100 client_stats", "n2-gpu0": "401 prometheus", "n2-gpu1": "402 prometheus"})

	// Both nodes' caps written, one read a round: the older read (n2's)
	// first, n1's at the next round.
	o.promPower.statsEvery = time.Hour
	o.capsWrittenTo([]string{"n1", "n2"})
	round("both written, one a round", []string{"n2"}, map[string]string{
		"n1-gpu0": "301 prometheus", "n1-gpu1": "302 prometheus", "n2-gpu0": "100 client_stats", "n2-gpu1": "100 client_stats"})
	round("the other written", []string{"n1"}, map[string]string{
		"n1-gpu0": "100 client_stats", "n1-gpu1": "100 client_stats", "n2-gpu0": "401 prometheus", "n2-gpu1": "402 prometheus"})
	round("none left", nil, fromProm)

	for reason, want := range map[string]float64{readMissing: 3, readNoSource: 2, readWritten: 3, readRefresh: 2} {
		if got := testutil.ToFloat64(o.metrics.powerStatsReads.WithLabelValues(reason)); got != want {
			t.Errorf("llmgw_power_client_stats_reads_total{reason=%q} = %g, want %g", reason, got, want)
		}
	}
	if n := len(prom.queries); n != 11 {
		t.Errorf("%d queries to Prometheus, want one a round (11)", n)
	}
}
