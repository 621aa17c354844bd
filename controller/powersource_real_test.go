package controller

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/common/model"

	"github.com/llmgw/llmgw/controller/config"
	"github.com/llmgw/llmgw/controllerapi"
	"github.com/llmgw/llmgw/devicesapi"
	"github.com/llmgw/llmgw/internal/testing/ctlharness"
	"github.com/llmgw/llmgw/internal/testing/syncbuf"
	"github.com/llmgw/llmgw/internal/testing/wait"
)

// dcgmExporter serves the draw series as NVIDIA's dcgm-exporter writes
// them (DCGM_FI_DEV_POWER_USAGE, W, with its GPU labels: gpu, UUID,
// pci_bus_id, device, modelName, Hostname; github.com/NVIDIA/dcgm-exporter
// at d5e5f510a1b6b393f39a43293ccd9dc985defc79, etc/default-counters.csv and
// internal/pkg/rendermetrics/render_metrics.go), from client_golang's
// registry.
type dcgmExporter struct {
	draw *prometheus.GaugeVec
	srv  *httptest.Server
}

func newDCGMExporter(t testing.TB) *dcgmExporter {
	reg := prometheus.NewRegistry()
	d := &dcgmExporter{draw: prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "DCGM_FI_DEV_POWER_USAGE", Help: "Power draw (in W).",
	}, []string{"gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname"})}
	reg.MustRegister(d.draw)
	d.srv = httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	t.Cleanup(d.srv.Close)
	return d
}

func (d *dcgmExporter) labels(node string, i int) prometheus.Labels {
	return prometheus.Labels{"gpu": fmt.Sprint(i), "UUID": fmt.Sprintf("%s-gpu%d", node, i), "pci_bus_id": fmt.Sprintf("00000000:%02X:00.0", 0x18+i),
		"device": fmt.Sprintf("nvidia%d", i), "modelName": ctlharness.GPU, "Hostname": node}
}

func (d *dcgmExporter) set(node string, i int, w float64) { d.draw.With(d.labels(node, i)).Set(w) }
func (d *dcgmExporter) drop(node string, i int)           { d.draw.Delete(d.labels(node, i)) }

// realPrometheus runs the Prometheus server at bin on a free loopback
// port, scraping target every scrape, and returns its URL and the
// command (the test kills it to take Prometheus down).
func realPrometheus(t testing.TB, bin, target string, scrape time.Duration) (string, *exec.Cmd) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(`global:
  scrape_interval: %s
  scrape_timeout: %s
scrape_configs:
  - job_name: dcgm
    static_configs:
      - targets: [%q]
`, model.Duration(scrape), model.Duration(scrape), target)), 0o644); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	var out syncbuf.Buffer
	cmd := exec.Command(bin, "--config.file="+cfg, "--storage.tsdb.path="+filepath.Join(dir, "data"), "--web.listen-address="+addr)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("prometheus output:\n%s", out.String())
		}
	})
	url := "http://" + addr
	wait.For(t, "Prometheus ready", func() (bool, string) {
		resp, err := http.Get(url + "/-/ready")
		if err != nil {
			return false, err.Error()
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK, resp.Status
	})
	return url, cmd
}

// TestPowerFromRealPrometheus runs the Prometheus source against a real
// Prometheus server (LLMGW_PROMETHEUS_BIN: `GOBIN=/tmp/prombin go install
// github.com/prometheus/prometheus/cmd/prometheus@v0.316.0`) scraping a
// dcgm-exporter's series for the fleet's GPUs, every second: n1's four
// GPUs in full, n2's with one missing. The Nomad fake's client stats give
// every GPU 100 W and its limits. The controller's GET /v1/power shows
// n1's draws from Prometheus with client stats' limits and n2's from client
// stats; n1's client stats are no longer read round after round while
// n2's are; a GPU whose series goes stale (past max_age) sends its node
// back to client stats, and so does Prometheus down (counted in
// llmgw_power_source_failures_total).
func TestPowerFromRealPrometheus(t *testing.T) {
	bin := os.Getenv("LLMGW_PROMETHEUS_BIN")
	if bin == "" {
		t.Skip("LLMGW_PROMETHEUS_BIN is not set: this test needs a Prometheus server binary " +
			"(GOBIN=/tmp/prombin go install github.com/prometheus/prometheus/cmd/prometheus@v0.316.0, then LLMGW_PROMETHEUS_BIN=/tmp/prombin/prometheus)")
	}
	e := newEnv(t, []ctlharness.Node{{Name: "n1", Rack: "r1", PDU: "p1", GPUs: 4}, {Name: "n2", Rack: "r1", PDU: "p1", GPUs: 4}},
		"", "headroom = 0\nbudget \"pdu=p1\" {\n  watts = 100000\n}\n")
	f := func(v float64) *api.StatValue { return &api.StatValue{FloatNumeratorVal: &v, Unit: "W"} }
	state := "default"
	for _, n := range []string{"n1", "n2"} {
		for i := range 4 {
			id := fmt.Sprintf("%s-gpu%d", n, i)
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
	exp := newDCGMExporter(t)
	for i := range 4 {
		exp.set("n1", i, float64(301+i))
		if i < 3 {
			exp.set("n2", i, float64(401+i))
		}
	}
	promURL, prom := realPrometheus(t, bin, strings.TrimPrefix(exp.srv.URL, "http://"), time.Second)

	source := config.PowerPrometheus{
		Address: promURL, Selector: config.DefaultPowerSelector, UUIDLabel: config.DefaultPowerUUIDLabel,
		MaxAge: 3 * time.Second, ClientStatsInterval: time.Hour,
	}
	pp, err := newPromPower(source)
	if err != nil {
		t.Fatal(err)
	}
	wait.For(t, "Prometheus holding the exporter's 7 series", func() (bool, string) {
		d, err := pp.draws(t.Context())
		if err != nil {
			return false, err.Error()
		}
		return len(d) == 7, fmt.Sprint(d)
	})

	c := e.start("ctl", func(o *Options) {
		o.PowerInterval = 300 * time.Millisecond
		o.Config.PowerSource = &config.PowerSource{Prometheus: &source}
	})
	// gpus is GET /v1/power's GPUs: "<draw> <from>" by UUID, and whether
	// each has client stats' enforced limit.
	gpus := func() (map[string]string, bool) {
		var pv controllerapi.PowerView
		ctlharness.Call(t, http.MethodGet, c.URL+"/v1/power", "", nil, &pv)
		out := map[string]string{}
		limits := len(pv.GPUs) == 8
		for _, g := range pv.GPUs {
			out[g.UUID] = fmt.Sprintf("%g %s", g.DrawWatts, g.DrawFrom)
			limits = limits && g.EnforcedWatts == 650 && g.State == "default"
		}
		return out, limits
	}
	view := func(want map[string]string) func() (bool, string) {
		return func() (bool, string) {
			got, limits := gpus()
			return limits && fmt.Sprint(got) == fmt.Sprint(want), fmt.Sprintf("%v (limits from client stats: %v)", got, limits)
		}
	}
	n2Stats := map[string]string{"n2-gpu0": "100 client_stats", "n2-gpu1": "100 client_stats", "n2-gpu2": "100 client_stats", "n2-gpu3": "100 client_stats"}
	with := func(a, b map[string]string) map[string]string {
		out := map[string]string{}
		for k, v := range a {
			out[k] = v
		}
		for k, v := range b {
			out[k] = v
		}
		return out
	}
	n1Prom := map[string]string{"n1-gpu0": "301 prometheus", "n1-gpu1": "302 prometheus", "n1-gpu2": "303 prometheus", "n1-gpu3": "304 prometheus"}
	n1Stats := map[string]string{"n1-gpu0": "100 client_stats", "n1-gpu1": "100 client_stats", "n1-gpu2": "100 client_stats", "n1-gpu3": "100 client_stats"}
	wait.For(t, "n1's draws from Prometheus, n2's (a GPU missing there) from client stats", view(with(n1Prom, n2Stats)))

	// Client-stats reads: n2's go on every round, n1's stop.
	reads := func() (n1, n2 int) {
		for _, r := range e.Fake.Requests() {
			if r.Path == "/v1/client/stats" {
				switch r.Query.Get("node_id") {
				case e.NodeIDs["n1"]:
					n1++
				case e.NodeIDs["n2"]:
					n2++
				}
			}
		}
		return n1, n2
	}
	n1Before, n2Before := reads()
	wait.For(t, "ten more rounds' reads of n2's client stats", func() (bool, string) {
		_, n2 := reads()
		return n2 >= n2Before+10, fmt.Sprint(n2)
	})
	n1After, n2After := reads()
	if n1After != n1Before {
		t.Errorf("n1's client stats read %d times while n2's were read %d times, want none (Prometheus gives its draw)", n1After-n1Before, n2After-n2Before)
	}
	t.Logf("client-stats reads: n1 %d in all, n2 %d", n1After, n2After)

	exp.set("n1", 0, 350)
	wait.For(t, "n1-gpu0's new draw", view(with(with(n1Prom, map[string]string{"n1-gpu0": "350 prometheus"}), n2Stats)))
	exp.set("n1", 0, 301)

	// A GPU's series stops: once its last sample is older than max_age
	// (3 s), n1 is read through client stats again.
	exp.drop("n1", 3)
	wait.For(t, "n1 back on client stats, a GPU's sample past max_age", view(with(n1Stats, n2Stats)))
	exp.set("n1", 3, 304)
	wait.For(t, "n1 on Prometheus again", view(with(n1Prom, n2Stats)))

	// Prometheus down: every node's client stats, and the failure counted.
	if err := prom.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	wait.For(t, "every GPU on client stats with Prometheus down", view(with(n1Stats, n2Stats)))
	wait.For(t, "the failure counted", func() (bool, string) {
		_, body := ctlharness.Call(t, http.MethodGet, c.URL+"/metrics", "", nil, nil)
		for _, l := range strings.Split(body, "\n") {
			if strings.HasPrefix(l, "llmgw_power_source_failures_total ") {
				return l != "llmgw_power_source_failures_total 0", l
			}
		}
		return false, "no llmgw_power_source_failures_total"
	})
}
