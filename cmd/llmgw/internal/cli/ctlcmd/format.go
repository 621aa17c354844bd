package ctlcmd

import (
	"bytes"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/llmgw/llmgw/controllerapi"
	"github.com/llmgw/llmgw/enginemetrics"
	"github.com/llmgw/llmgw/facility"
)

// table is an aligned table, two spaces between columns, as the nomad CLI
// prints them.
type table struct {
	rows [][]string
}

func newTable(header ...string) *table {
	t := &table{}
	if len(header) > 0 {
		t.rows = append(t.rows, header)
	}
	return t
}

func (t *table) row(cells ...string) { t.rows = append(t.rows, cells) }

func (t *table) bytes() []byte {
	var b bytes.Buffer
	w := tabwriter.NewWriter(&b, 0, 8, 2, ' ', 0)
	for _, r := range t.rows {
		for i, c := range r {
			// A tab or newline in a value would break the columns.
			r[i] = strings.NewReplacer("\t", " ", "\n", " ").Replace(c)
		}
		_, _ = fmt.Fprintln(w, strings.Join(r, "\t"))
	}
	_ = w.Flush()
	// tabwriter pads the last column of rows that are shorter than others;
	// trailing spaces are noise.
	lines := strings.Split(b.String(), "\n")
	for i, l := range lines {
		lines[i] = strings.TrimRight(l, " ")
	}
	return []byte(strings.Join(lines, "\n"))
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// engineLoad is the WAIT, RUN, KV, TOK/S and TTFT-P90 cells of a
// replica: "-" where unknown, "error" when the last scrape failed.
func engineLoad(m *controllerapi.EngineMetrics) []string {
	switch {
	case m == nil || (m.Reading == nil && m.Error == ""):
		return []string{"-", "-", "-", "-", "-"}
	case m.Error != "":
		return []string{"error", "-", "-", "-", "-"}
	}
	r := m.Reading
	num := func(v enginemetrics.Value, format string, scale float64) string {
		x, ok := v.Get()
		if !ok {
			return "-"
		}
		return fmt.Sprintf(format, x*scale)
	}
	return []string{num(r.RequestsWaiting, "%.0f", 1), num(r.RequestsRunning, "%.0f", 1), num(r.KVCacheUsage, "%.0f%%", 100),
		num(r.TokensPerSecond, "%.0f", 1), num(r.TTFT.P90, "%.2fs", 1)}
}

// adapterCell is the ADAPTERS cell of a replica: how many of its model's
// LoRA adapters its engine serves, and those it does not ("1/2, not
// loaded: chat"); "-" for a replica without adapter states.
func adapterCell(m *controllerapi.EngineMetrics) string {
	if m == nil || len(m.Adapters) == 0 {
		return "-"
	}
	var out []string
	n := 0
	for _, a := range m.Adapters {
		if a.Loaded {
			n++
		} else {
			out = append(out, a.Name)
		}
	}
	cell := fmt.Sprintf("%d/%d", n, len(m.Adapters))
	switch {
	case m.AdaptersError != "":
		cell += ", unverified"
	case len(out) > 0:
		cell += ", not loaded: " + strings.Join(out, ",")
	}
	return cell
}

// kW writes watts as kilowatts with one decimal.
func kW(w float64) string { return fmt.Sprintf("%.1f kW", w/1000) }

// power writes measured/committed draw; "-" for measured before any
// reading.
func power(measured, committed float64) string {
	m := "-"
	if measured > 0 {
		m = fmt.Sprintf("%.1f", measured/1000)
	}
	return fmt.Sprintf("%s/%.1f kW", m, committed/1000)
}

// location writes a node's location as site/room/row/rack/pdu.
func location(loc map[string]string) string {
	if len(loc) == 0 {
		return "-"
	}
	parts := make([]string, 0, facility.NumLevels)
	for _, l := range facility.Levels() {
		parts = append(parts, dash(loc[l.String()]))
	}
	return strings.Join(parts, "/")
}

// age writes how long ago since was, in the nomad CLI's style: 45s, 5m3s,
// 2h5m, 3d4h.
func age(since, now time.Time) string {
	if since.IsZero() {
		return "-"
	}
	d := max(now.Sub(since), 0).Truncate(time.Second)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm%ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 24*time.Hour:
		return fmt.Sprintf("%dh%dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd%dh", int(d.Hours())/24, int(d.Hours())%24)
}
