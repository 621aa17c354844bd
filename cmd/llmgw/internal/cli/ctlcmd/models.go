package ctlcmd

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/llmgw/llmgw/controllerapi"
)

func (c *ctl) modelsCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "models",
		Short: "List the models: replicas serving of wanted, min and max, the autoscaler's signals and last decision",
		Long: `List the catalog's models with their counts.

REPLICAS is serving of wanted: a fixed model's replicas, or the count the
controller's last pass asked for an autoscaled one (the autoscaler's, or a
pin's from llmgw ctl scale, within MIN and MAX). The signals are the
autoscaler's last reading, summed over the gateways (OUT: requests in flight
or held, QUEUED: held for want of a replica, ARR/S: arriving per second,
TTFT: time to first token, p90) and over the serving replicas' engines
(WAIT: requests waiting, KV: mean KV-cache use); "-" is a missing reading,
which never counts as zero: the model then holds its count. DECISION is the
autoscaler's rule and the change it asked for (up, panic, down, wake, idle,
min, max; hold, wait; stale and no_signal when a signal is missing), or pin.

Below the table, each autoscaled model's count in a line ("wants 6, has 4:
why not more") and the reason for it. llmgw ctl explain MODEL has the rest.`,
		Args: args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			var models []controllerapi.ModelView
			raw, err := cl.get(cmd.Context(), "/v1/models", nil, &models)
			var e *Error
			if errors.As(err, &e) && e.Code == ExitNotFound {
				return c.catalogTable(cmd, cl) // a controller without /v1/models
			}
			if err != nil {
				return err
			}
			if c.json() {
				return printJSON(cmd, raw)
			}
			now := c.opts.Now()
			t := newTable("MODEL", "REPLICAS", "MIN", "MAX", "OUT", "QUEUED", "ARR/S", "TTFT", "WAIT", "KV", "DECISION")
			var notes bytes.Buffer
			for _, m := range models {
				if !m.Autoscale {
					t.row(append([]string{m.Name, fmt.Sprintf("%d/%d", m.Serving, m.Wanted), "-", "-"}, dashes(6, "fixed")...)...)
					continue
				}
				t.row(append([]string{m.Name, fmt.Sprintf("%d/%d", m.Serving, m.Wanted), fmt.Sprint(m.Min), fmt.Sprint(m.Max)},
					append(signalCells(m.Signals), decisionCell(m, now))...)...)
				fmt.Fprintf(&notes, "%s: %s\n  %s\n", m.Name, dash(m.Explain), dash(m.Reason))
			}
			out := t.bytes()
			if notes.Len() > 0 {
				out = append(append(out, '\n'), notes.Bytes()...)
			}
			return write(cmd.OutOrStdout(), out)
		},
	}
}

func dashes(n int, last string) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = "-"
	}
	return append(out, last)
}

// signalCells are the OUT, QUEUED, ARR/S, TTFT, WAIT and KV cells.
func signalCells(s *controllerapi.ModelSignals) []string {
	if s == nil {
		return dashes(5, "-")
	}
	num := func(v controllerapi.SignalView, format string, scale float64) string {
		if v.Value == nil {
			return "-"
		}
		return fmt.Sprintf(format, *v.Value*scale)
	}
	return []string{num(s.Outstanding, "%.0f", 1), num(s.Queued, "%.0f", 1), num(s.Arrivals, "%.2f", 1),
		num(s.TTFTP90, "%.2fs", 1), num(s.Waiting, "%.0f", 1), num(s.KVCache, "%.0f%%", 100)}
}

// decisionCell is the autoscaler's rule and the change it asks for, or
// the pin in force.
func decisionCell(m controllerapi.ModelView, now time.Time) string {
	if m.Pin != nil {
		return fmt.Sprintf("pin %d (%s left)", m.Pin.Replicas, left(m.Pin.Until, now))
	}
	d := m.Decision
	if d == nil {
		return "-"
	}
	if d.Want != d.Current {
		return fmt.Sprintf("%s %d→%d", d.Rule, d.Current, d.Want)
	}
	return d.Rule
}

// left writes the time from now to until, as age does.
func left(until, now time.Time) string {
	if !until.After(now) {
		return "0s"
	}
	return age(now, until)
}

// catalogTable is the models table of a controller older than /v1/models.
func (c *ctl) catalogTable(cmd *cobra.Command, cl *client) error {
	var cat controllerapi.CatalogView
	raw, err := cl.get(cmd.Context(), "/v1/catalog", nil, &cat)
	if err != nil {
		return err
	}
	if c.json() {
		return printJSON(cmd, raw)
	}
	var reps []controllerapi.ReplicaView
	if _, err := cl.get(cmd.Context(), "/v1/replicas", nil, &reps); err != nil {
		return err
	}
	serving := map[string]int{}
	for _, r := range reps {
		if r.State == "serving" {
			serving[r.Model]++
		}
	}
	t := newTable("MODEL", "REPLICAS", "PROFILES", "SOURCE")
	for _, m := range cat.Models {
		var profiles []string
		for _, p := range m.Profiles {
			profiles = append(profiles, p.Name)
		}
		t.row(m.Name, fmt.Sprintf("%d/%d", serving[m.Name], m.Replicas), strings.Join(profiles, ","), m.Source)
	}
	if err := write(cmd.OutOrStdout(), t.bytes()); err != nil {
		return err
	}
	if cat.Error != "" {
		_, _ = fmt.Fprintf(cmd.ErrOrStderr(), "llmgw: warning: the last catalog reload was refused; the catalog above stays in force:\nllmgw: %s\n", cat.Error)
	}
	return nil
}

func (c *ctl) scaleCmd() *cobra.Command {
	var req controllerapi.PinRequest
	var release bool
	cmd := &cobra.Command{
		Use:   "scale MODEL N [--for 1h] [--reason R] | scale MODEL --release",
		Short: "Pin an autoscaled model's replica count for a while, over the autoscaler",
		Long: `Pin an autoscaled model at N replicas: the controller asks for N instead of
what the autoscaler wants until the pin expires (--for, 1h by default, 1m to
168h), then the autoscaler decides again. N must be within the model's
autoscale min and max; the budgets still apply (llmgw ctl explain MODEL says
when they give less). The pin is kept in Nomad Variables (llmgw/pins), so it
survives a restart of the controller. --release ends it early.

  llmgw ctl scale llama-70b 6 --for 2h --reason "launch day"
  llmgw ctl scale llama-70b --release`,
		Args:              args(cobra.RangeArgs(1, 2)),
		ValidArgsFunction: c.completeFirst(autoscaledNames),
		RunE: func(cmd *cobra.Command, a []string) error {
			if release {
				if len(a) != 1 {
					return &Error{Code: ExitUsage, Msg: "--release takes the model alone", Hint: "usage: " + cmd.UseLine()}
				}
				cl, err := c.client()
				if err != nil {
					return err
				}
				raw, err := cl.do(cmd.Context(), "DELETE", "/v1/models/"+a[0]+"/pin", nil, nil, nil)
				if err != nil {
					return err
				}
				warnWrite(cmd, raw)
				if c.json() {
					return printJSON(cmd, raw)
				}
				return write(cmd.OutOrStdout(), []byte(a[0]+": pin released; the autoscaler decides\n"))
			}
			if len(a) != 2 {
				return &Error{Code: ExitUsage, Msg: "scale needs MODEL and N (or --release)", Hint: "usage: " + cmd.UseLine()}
			}
			var n int
			if _, err := fmt.Sscan(a[1], &n); err != nil || fmt.Sprint(n) != a[1] || n < 0 {
				return &Error{Code: ExitUsage, Msg: fmt.Sprintf("N %q: want a whole number of replicas, 0 or more", a[1])}
			}
			req.Replicas = n
			cl, err := c.client()
			if err != nil {
				return err
			}
			var p struct {
				Replicas int       `json:"replicas"`
				Until    time.Time `json:"until"`
			}
			raw, err := cl.do(cmd.Context(), "PUT", "/v1/models/"+a[0]+"/pin", nil, req, &p)
			if err != nil {
				return err
			}
			warnWrite(cmd, raw)
			if c.json() {
				return printJSON(cmd, raw)
			}
			return write(cmd.OutOrStdout(), fmt.Appendf(nil, "%s pinned at %d until %s\n", a[0], p.Replicas, p.Until.UTC().Format(time.RFC3339)))
		},
	}
	cmd.Flags().StringVar(&req.For, "for", "1h", "how long the pin holds (1m to 168h)")
	cmd.Flags().StringVar(&req.Reason, "reason", "", "why, shown in explain and the models list")
	cmd.Flags().BoolVar(&release, "release", false, "end the model's pin now")
	return cmd
}

func autoscaledNames(ctx context.Context, cl *client) ([]string, error) {
	return fetchNames(ctx, cl, "/v1/models", func(ms []controllerapi.ModelView) (out []string) {
		for _, m := range ms {
			if m.Autoscale {
				out = append(out, m.Name)
			}
		}
		return out
	})
}

// renderModel is explain for a model.
func renderModel(m controllerapi.ModelView, now time.Time) []byte {
	var b bytes.Buffer
	kv := newTable()
	kv.row("Model:", m.Name)
	kv.row("Priority:", fmt.Sprint(m.Priority))
	for _, w := range m.Warnings {
		kv.row("Warning:", w)
	}
	if !m.Autoscale {
		kv.row("Replicas:", fmt.Sprintf("%d fixed; %d with a job, %d serving", m.Wanted, m.Has, m.Serving))
		b.Write(kv.bytes())
		return b.Bytes()
	}
	kv.row("Autoscale:", fmt.Sprintf("min %d, max %d, target %s", m.Min, m.Max, m.Target))
	kv.row("Replicas:", fmt.Sprintf("wants %d, has %d, %d serving", m.Wanted, m.Has, m.Serving))
	if _, short, ok := strings.Cut(m.Explain, ": "); ok {
		kv.row("Why not more:", short)
	}
	kv.row("Reason:", dash(m.Reason))
	if d := m.Decision; d != nil {
		kv.row("Autoscaler:", fmt.Sprintf("%s at %s: %s", d.Rule, d.At.UTC().Format(time.RFC3339), d.Reason))
	}
	if p := m.Pin; p != nil {
		who := ""
		if p.SetBy != "" {
			who = " by " + p.SetBy
		}
		why := ""
		if p.Reason != "" {
			why = ": " + p.Reason
		}
		kv.row("Pin:", fmt.Sprintf("%d until %s (%s left), set%s%s", p.Replicas, p.Until.UTC().Format(time.RFC3339), left(p.Until, now), who, why))
	}
	if e := m.LastChange; e != nil {
		kv.row("Last change:", fmt.Sprintf("%d→%d at %s (%s): %s", e.From, e.To, e.At.UTC().Format(time.RFC3339), e.Reason, e.Detail))
	}
	for _, x := range []struct {
		what  string
		slots []string
	}{{"Added:", m.Added}, {"Stopped:", m.Stopped}, {"Yielded:", m.Yielded}} {
		if len(x.slots) > 0 {
			kv.row(x.what, strings.Join(x.slots, ", "))
		}
	}
	b.Write(kv.bytes())
	if s := m.Signals; s != nil {
		fmt.Fprintf(&b, "\nSignals at %s\n", s.At.UTC().Format(time.RFC3339))
		t := newTable("SIGNAL", "VALUE", "SOURCE", "WHY MISSING")
		for _, x := range []struct {
			name string
			v    controllerapi.SignalView
			unit string
		}{
			{controllerapi.SignalOutstanding, s.Outstanding, ""}, {controllerapi.SignalQueued, s.Queued, ""}, {controllerapi.SignalArrivals, s.Arrivals, "/s"},
			{controllerapi.SignalTTFT, s.TTFTP90, "s"}, {controllerapi.SignalWaiting, s.Waiting, ""}, {controllerapi.SignalKVCache, s.KVCache, ""},
		} {
			val := "-"
			if x.v.Value != nil {
				val = fmt.Sprintf("%.4g%s", *x.v.Value, x.unit)
			}
			t.row(x.name, val, x.v.Source, dash(x.v.Error))
		}
		b.Write(t.bytes())
	}
	return b.Bytes()
}
