package controller

import (
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/llmgw/llmgw/gateway"
)

// The Grafana dashboard in docs/grafana queries only series llmgw exports:
// the controller's registry (its own metrics, the engines' as it reads them,
// the domains' power from the device plugin's stats), the gateway's, and the
// two Nomad client series that carry the llmgw driver's TaskStats. The
// device plugin and the driver have no Prometheus registry of their own:
// what they report reaches Prometheus through Nomad (TaskStats) or the
// controller (device stats, engine metrics).

const dashboardPath = "../docs/grafana/llmgw.json"

// nomadDriverSeries are the series Nomad's client publishes from a task
// driver's TaskStats (with telemetry { publish_allocation_metrics = true }),
// as Nomad names them in Prometheus: read at v2.0.5 in
// client/allocrunner/taskrunner/task_runner.go (setGaugeForCPU,
// setGaugeForMemory: "client.allocs.cpu.total_percent",
// "client.allocs.memory.rss"). The llmgw driver fills both (driver/stats.go).
var nomadDriverSeries = []string{"nomad_client_allocs_cpu_total_percent", "nomad_client_allocs_memory_rss"}

// exported is what a dashboard may query: plain series, and histograms
// (whose _bucket, _sum and _count series exist).
type exported struct {
	plain, histograms map[string]string // name -> who exports it
}

func (e exported) add(who string, c prometheus.Collector) {
	hist := false
	switch c.(type) {
	case prometheus.Histogram, *prometheus.HistogramVec:
		hist = true
	}
	ch := make(chan *prometheus.Desc, 64)
	go func() {
		c.Describe(ch)
		close(ch)
	}()
	for d := range ch {
		name := descName(d)
		if hist {
			e.histograms[name] = who
		} else {
			e.plain[name] = who
		}
	}
}

var fqName = regexp.MustCompile(`fqName: "([^"]+)"`)

// descName is a Desc's metric name (client_golang has no accessor; its
// String has the name as fqName).
func descName(d *prometheus.Desc) string {
	m := fqName.FindStringSubmatch(d.String())
	if m == nil {
		return ""
	}
	return m[1]
}

// known reports whether a queried series name is exported, and by whom.
func (e exported) known(name string) (string, bool) {
	if who, ok := e.plain[name]; ok {
		return who, true
	}
	for _, suf := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suf); ok {
			if who, ok := e.histograms[base]; ok {
				return who, true
			}
		}
	}
	return "", false
}

// recorder is a Registerer that keeps what is registered on it.
type recorder struct {
	who string
	e   exported
}

func (r recorder) Register(c prometheus.Collector) error { r.e.add(r.who, c); return nil }
func (r recorder) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		r.e.add(r.who, c)
	}
}
func (r recorder) Unregister(prometheus.Collector) bool { return false }

func llmgwExported(t *testing.T) exported {
	t.Helper()
	e := exported{plain: map[string]string{}, histograms: map[string]string{}}
	for _, c := range newMetrics().collectors {
		e.add("controller", c)
	}
	gateway.New(gateway.Options{Registerer: recorder{"gateway", e}})
	for _, n := range nomadDriverSeries {
		e.plain[n] = "Nomad, from the llmgw driver's TaskStats"
	}
	if len(e.plain)+len(e.histograms) < 30 {
		t.Fatalf("only %d series collected from the registries: %v %v", len(e.plain)+len(e.histograms), e.plain, e.histograms)
	}
	return e
}

var (
	labelValues = regexp.MustCompile(`label_values\(\s*([^,()]*(?:\{[^}]*\})?)\s*,\s*[A-Za-z_][A-Za-z0-9_]*\s*\)`)
	stringLit   = regexp.MustCompile("\"(?:[^\"\\\\]|\\\\.)*\"|'(?:[^'\\\\]|\\\\.)*'|`[^`]*`")
	matchers    = regexp.MustCompile(`\{[^}]*\}`)
	ranges      = regexp.MustCompile(`\[[^\]]*\]`)
	grouping    = regexp.MustCompile(`\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	variables   = regexp.MustCompile(`\$\{[^}]*\}|\$[A-Za-z0-9_]+`)
	durations   = regexp.MustCompile(`\b\d+(ms|s|m|h|d|w|y)\b`)
	numbers     = regexp.MustCompile(`\b\d+(\.\d+)?([eE][+-]?\d+)?\b`)
	ident       = regexp.MustCompile(`[A-Za-z_:][A-Za-z0-9_:]*`)
	keywords    = []string{"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring", "group_left", "group_right", "inf", "nan", "Inf", "NaN"}
)

// seriesNames returns the metric names a PromQL expression (or a Grafana
// label_values query) selects: its identifiers that are not functions,
// keywords, labels, durations or numbers.
func seriesNames(expr string) []string {
	s := labelValues.ReplaceAllString(expr, " $1 ")
	for _, re := range []*regexp.Regexp{stringLit, matchers, ranges, grouping, variables, durations, numbers} {
		s = re.ReplaceAllString(s, " ")
	}
	var out []string
	for _, loc := range ident.FindAllStringIndex(s, -1) {
		name := s[loc[0]:loc[1]]
		if slices.Contains(keywords, name) {
			continue
		}
		if rest := strings.TrimLeft(s[loc[1]:], " \t\n"); strings.HasPrefix(rest, "(") {
			continue // a function or an aggregation
		}
		if !slices.Contains(out, name) {
			out = append(out, name)
		}
	}
	return out
}

// dashboardQueries walks a Grafana dashboard's JSON for every query: each
// "expr" (panel targets), and each templating variable's "query" and
// "definition".
func dashboardQueries(t *testing.T, raw []byte) []string {
	t.Helper()
	var doc any
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatalf("%s: %v", dashboardPath, err)
	}
	var out []string
	var walk func(v any, inTemplating bool)
	walk = func(v any, inTemplating bool) {
		switch x := v.(type) {
		case map[string]any:
			isDatasourceVar := x["type"] == "datasource"
			for k, c := range x {
				switch {
				case k == "expr":
					if s, ok := c.(string); ok {
						out = append(out, s)
					}
				case inTemplating && !isDatasourceVar && (k == "query" || k == "definition"):
					if s, ok := c.(string); ok {
						out = append(out, s)
						continue
					}
					walk(c, true)
				default:
					walk(c, inTemplating || k == "templating")
				}
			}
		case []any:
			for _, c := range x {
				walk(c, inTemplating)
			}
		}
	}
	walk(doc, false)
	return out
}

// unknownSeries lists, for each query, the series it selects that no one
// exports.
func unknownSeries(e exported, queries []string) (unknown []string, used map[string]bool) {
	used = map[string]bool{}
	for _, q := range queries {
		for _, n := range seriesNames(q) {
			if _, ok := e.known(n); !ok {
				unknown = append(unknown, n+" (in "+q+")")
				continue
			}
			used[n] = true
		}
	}
	return unknown, used
}

func TestDashboardQueriesOnlyExportedSeries(t *testing.T) {
	raw, err := os.ReadFile(dashboardPath)
	if err != nil {
		t.Fatal(err)
	}
	e := llmgwExported(t)
	queries := dashboardQueries(t, raw)
	if len(queries) < 40 {
		t.Fatalf("%s: only %d queries found", dashboardPath, len(queries))
	}
	// Every panel but a row has a query and a place.
	var dash struct {
		Panels []struct {
			Type    string          `json:"type"`
			Title   string          `json:"title"`
			GridPos *map[string]int `json:"gridPos"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatal(err)
	}
	for _, p := range dash.Panels {
		if p.GridPos == nil {
			t.Errorf("panel %q has no gridPos", p.Title)
		}
		if p.Type == "row" {
			continue
		}
		if len(p.Targets) == 0 || slices.ContainsFunc(p.Targets, func(x struct {
			Expr string `json:"expr"`
		}) bool {
			return x.Expr == ""
		}) {
			t.Errorf("panel %q has a target without a query", p.Title)
		}
	}
	unknown, used := unknownSeries(e, queries)
	for _, u := range unknown {
		t.Errorf("%s queries %s, which neither the controller, the gateway nor Nomad (for the driver) exports", dashboardPath, u)
	}
	// The dashboard shows each part.
	var who []string
	for n := range used {
		w, _ := e.known(n)
		if !slices.Contains(who, w) {
			who = append(who, w)
		}
	}
	sort.Strings(who)
	if len(who) != 3 {
		t.Errorf("the dashboard's series come from %v; want the controller, the gateway and Nomad's driver series", who)
	}
	var unused []string
	for n := range e.plain {
		base := n
		if !used[base] {
			unused = append(unused, n)
		}
	}
	for n := range e.histograms {
		if !used[n+"_bucket"] && !used[n+"_sum"] && !used[n+"_count"] {
			unused = append(unused, n)
		}
	}
	sort.Strings(unused)
	t.Logf("%d queries over %d series; exported but not on the dashboard: %v", len(queries), len(used), unused)
}

// The check fails for what nobody exports: a made-up name, a histogram's
// series of a plain metric, a label or function taken for a series.
func TestDashboardCheckCatchesUnknownSeries(t *testing.T) {
	e := llmgwExported(t)
	for _, tc := range []struct {
		expr string
		want []string // unknown names
	}{
		{`sum(rate(llmgw_nope_total[5m]))`, []string{"llmgw_nope_total"}},
		{`llmgw_leader_bucket`, []string{"llmgw_leader_bucket"}},
		{`histogram_quantile(0.9, sum by (le, model) (rate(llmgw_gateway_hold_seconds_bucket{model=~"$model"}[$__rate_interval])))`, nil},
		{`label_values(llmgw_model_replicas_desired, model)`, nil},
		{`label_values(llmgw_models_wanted{x="y"}, model)`, []string{"llmgw_models_wanted"}},
		{`min by (domain) (llmgw_domain_cap_watts - llmgw_domain_draw_watts) > bool 0 offset 5m`, nil},
		{`sum(nomad_client_allocs_cpu_total_percent{task="engine"}) or vector(0)`, nil},
		{`nomad_client_allocs_memory_cache`, []string{"nomad_client_allocs_memory_cache"}},
	} {
		got, _ := unknownSeries(e, []string{tc.expr})
		for i := range got {
			got[i], _, _ = strings.Cut(got[i], " (in ")
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: unknown %v, want %v (names %v)", tc.expr, got, tc.want, seriesNames(tc.expr))
		}
	}
}
