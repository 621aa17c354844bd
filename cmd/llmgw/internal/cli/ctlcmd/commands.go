package ctlcmd

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/llmgw/llmgw/controllerapi"
	"github.com/llmgw/llmgw/facility"
	"github.com/llmgw/llmgw/internal/suggest"
)

// labelNames are the node labels the API sets, in the order help lists them.
var labelNames = []string{"site", "room", "row", "rack", "pdu", "fabric", "hcas", "base_watts"}

// explainView is GET /v1/replicas/{id} as this command reads it.
type explainView struct {
	controllerapi.ReplicaView
	Explain *struct {
		Placed     bool                 `json:"placed"`
		Profile    string               `json:"profile"`
		Domain     map[string]string    `json:"domain"`
		Nodes      []string             `json:"nodes"`
		Watts      float64              `json:"watts"`
		Rejections []facility.Rejection `json:"rejections"`
		Readiness  []string             `json:"readiness"`
		At         time.Time            `json:"at"`
	} `json:"explain"`
	Nomad []controllerapi.NomadReason `json:"nomad"`
	Scale *controllerapi.ModelScale   `json:"scale"`
}

// printJSON writes an API answer as indented JSON.
func printJSON(cmd *cobra.Command, raw []byte) error {
	var b bytes.Buffer
	if err := json.Indent(&b, bytes.TrimSpace(raw), "", "  "); err != nil {
		return &Error{Code: ExitError, Msg: "the controller's answer is not JSON: " + err.Error()}
	}
	b.WriteByte('\n')
	return write(cmd.OutOrStdout(), b.Bytes())
}

func (c *ctl) replicasCmd() *cobra.Command {
	var model string
	cmd := &cobra.Command{
		Use:   "replicas [--model M]",
		Short: "List every replica slot: model, profile, state, domain, nodes, age, engine load",
		Long: `List every replica slot: model, profile, state, domain, nodes and age,
and for a serving replica its engine's load as the controller last read it
from the engine's /metrics: requests waiting and running, KV-cache use, tokens
per second and the 90th percentile time to first token over the interval
between the controller's last two scrapes. "-" is unknown (the engine does not
export it, or nothing to measure yet); "error" means the last scrape failed
(-o json has the error and the last good reading).`,
		Args: args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			q := url.Values{}
			if model != "" {
				q.Set("model", model)
			}
			var reps []controllerapi.ReplicaView
			raw, err := cl.get(cmd.Context(), "/v1/replicas", q, &reps)
			if err != nil {
				return err
			}
			if len(reps) == 0 && model != "" {
				if err := c.checkModel(cmd.Context(), cl, model); err != nil {
					return err
				}
			}
			if c.json() {
				return printJSON(cmd, raw)
			}
			now := c.opts.Now()
			cols := []string{"REPLICA", "MODEL", "PROFILE", "STATE", "DOMAIN", "NODES", "AGE", "WAIT", "RUN", "KV", "TOK/S", "TTFT-P90"}
			// The ADAPTERS column only where a replica's model has
			// LoRA adapters.
			withAdapters := slices.ContainsFunc(reps, func(r controllerapi.ReplicaView) bool { return r.Engine != nil && len(r.Engine.Adapters) > 0 })
			if withAdapters {
				cols = append(cols, "ADAPTERS")
			}
			t := newTable(cols...)
			for _, r := range reps {
				state := r.State
				if len(r.Jobs) > 1 {
					state += fmt.Sprintf(" (%d jobs)", len(r.Jobs))
				}
				if r.Engine != nil && r.Engine.Asleep != nil && *r.Engine.Asleep {
					state += ", asleep"
				}
				row := append([]string{r.ID, r.Model, dash(r.Profile), state, dash(r.Domain), dash(strings.Join(r.Nodes, ",")), age(r.Since, now)},
					engineLoad(r.Engine)...)
				if withAdapters {
					row = append(row, adapterCell(r.Engine))
				}
				t.row(row...)
			}
			return write(cmd.OutOrStdout(), t.bytes())
		},
	}
	cmd.Flags().StringVar(&model, "model", "", "only the replicas of this model")
	_ = cmd.RegisterFlagCompletionFunc("model", c.complete(modelNames))
	return cmd
}

// checkModel returns a not-found error when model is not in the catalog.
func (c *ctl) checkModel(ctx context.Context, cl *client, model string) error {
	var cat controllerapi.CatalogView
	if _, err := cl.get(ctx, "/v1/catalog", nil, &cat); err != nil {
		return err
	}
	var names []string
	for _, m := range cat.Models {
		if m.Name == model {
			return nil
		}
		names = append(names, m.Name)
	}
	return &Error{Code: ExitNotFound, Msg: fmt.Sprintf("no model %q in the catalog", model), Hint: suggest.Hint(model, names)}
}

func (c *ctl) explainCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "explain REPLICA|MODEL",
		Short: "Show why a replica sits where it does, or why a model has the replicas it has",
		Long: `Show a replica's last placement decision: the domain and nodes chosen and
their draw, or that none was found; every place refused and why (held,
over budget, too few free GPUs, spread, ...); and, when Nomad could not
place the replica's job, Nomad's own reason (constraints filtered,
dimensions exhausted). For a replica of an autoscaled model, also the
model's count and why.

Given a model's name, show its count: what it wants, has and serves, why
not more ("wants 6, has 4: pdu=p3 would draw 17.6 kW of 17.3 kW; llama-70b
(priority 80) holds the rest"), the autoscaler's last decision and reason,
a pin, the last change, and each signal with its source or why it is
missing.`,
		Args:              args(cobra.ExactArgs(1)),
		ValidArgsFunction: c.completeFirst(replicaAndModelNames),
		RunE: func(cmd *cobra.Command, a []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			var d explainView
			raw, err := cl.get(cmd.Context(), "/v1/replicas/"+a[0], nil, &d)
			var nf *Error
			if errors.As(err, &nf) && nf.Code == ExitNotFound {
				// Not a replica: a model?
				var m controllerapi.ModelView
				mraw, merr := cl.get(cmd.Context(), "/v1/models/"+a[0], nil, &m)
				switch {
				case merr == nil && c.json():
					return printJSON(cmd, mraw)
				case merr == nil:
					return write(cmd.OutOrStdout(), renderModel(m, c.opts.Now()))
				}
			}
			if err != nil {
				return err
			}
			if c.json() {
				return printJSON(cmd, raw)
			}
			return write(cmd.OutOrStdout(), renderExplain(d))
		},
	}
}

func renderExplain(d explainView) []byte {
	var b bytes.Buffer
	kv := newTable()
	kv.row("Replica:", d.ID)
	kv.row("Model:", d.Model)
	kv.row("State:", d.State)
	if d.JobID != "" {
		kv.row("Job:", d.JobID)
	}
	if len(d.Jobs) > 1 {
		kv.row("Jobs:", strings.Join(d.Jobs, ", "))
	}
	e := d.Explain
	switch {
	case e == nil:
		kv.row("Decision:", "none stored yet (the controller has not placed this replica)")
	case e.Placed:
		kv.row("Decision:", "placed at "+e.At.UTC().Format(time.RFC3339))
		kv.row("Profile:", e.Profile)
		kv.row("Domain:", scopeString(e.Domain))
		kv.row("Nodes:", strings.Join(e.Nodes, ", "))
		kv.row("Draw:", kW(e.Watts))
		for i, r := range e.Readiness {
			label := ""
			if i == 0 {
				label = "Weights:"
			}
			kv.row(label, r)
		}
	default:
		kv.row("Decision:", "not placed at "+e.At.UTC().Format(time.RFC3339)+": no profile fits anywhere")
	}
	if s := d.Scale; s != nil {
		kv.row("Scale:", dash(s.Explain))
		kv.row("Scale reason:", dash(s.Reason))
	}
	b.Write(kv.bytes())
	if e != nil && len(e.Rejections) > 0 {
		b.WriteString("\nRejections\n")
		t := newTable("PROFILE", "KIND", "DOMAIN", "NODES", "REASON")
		for _, r := range e.Rejections {
			t.row(r.Profile, r.Kind.String(), dash(r.Domain), fmt.Sprint(r.Nodes), r.Message)
		}
		b.Write(t.bytes())
	}
	if m := d.Engine; m != nil && len(m.Adapters) > 0 {
		b.WriteString("\nLoRA adapters (as the engine lists them)\n")
		t := newTable("ADAPTER", "LOADED", "ID", "NOTE")
		for _, a := range m.Adapters {
			id := "-"
			if a.ID != nil {
				id = fmt.Sprint(*a.ID)
			}
			t.row(a.Name, fmt.Sprint(a.Loaded), id, dash(a.Note))
		}
		b.Write(t.bytes())
		if len(m.AdapterEvents) > 0 {
			b.WriteString("\nAdapter events\n")
			t := newTable("AT", "ADAPTER", "EVENT", "DETAIL")
			for _, e := range m.AdapterEvents {
				t.row(e.At.UTC().Format(time.RFC3339), e.Adapter, e.Event, dash(e.Detail))
			}
			b.Write(t.bytes())
		}
	}
	if len(d.Phases) > 1 { // more than placed: Nomad told of the start
		b.WriteString("\nStart (from Nomad's task events)\n")
		t := newTable("PHASE", "AT", "AFTER", "DETAIL")
		t0 := d.Phases[0].At
		for _, p := range d.Phases {
			t.row(p.Name, p.At.UTC().Format("15:04:05.000"), "+"+p.At.Sub(t0).Round(time.Millisecond).String(), dash(p.Detail))
		}
		b.Write(t.bytes())
	}
	if len(d.Nomad) > 0 {
		fmt.Fprintf(&b, "\nNomad could not place job %s\n", d.JobID)
		t := newTable("GROUP", "EVALUATED", "FILTERED", "EXHAUSTED", "WHY")
		for _, n := range d.Nomad {
			var why []string
			for _, k := range sortedKeys(n.ConstraintFiltered) {
				why = append(why, fmt.Sprintf("filtered by %s: %d", k, n.ConstraintFiltered[k]))
			}
			for _, k := range sortedKeys(n.DimensionExhausted) {
				why = append(why, fmt.Sprintf("exhausted %s: %d", k, n.DimensionExhausted[k]))
			}
			t.row(n.Group, fmt.Sprint(n.NodesEvaluated), fmt.Sprint(n.NodesFiltered), fmt.Sprint(n.NodesExhausted), dash(strings.Join(why, "; ")))
		}
		b.Write(t.bytes())
	}
	return b.Bytes()
}

// scopeString writes a decision's domain coarse to fine: "site=s1 room=a …".
func scopeString(m map[string]string) string {
	var parts []string
	for _, l := range facility.Levels() {
		if v, ok := m[l.String()]; ok {
			parts = append(parts, l.String()+"="+v)
		}
	}
	return dash(strings.Join(parts, " "))
}

func (c *ctl) nodesCmd() *cobra.Command {
	var domain string
	cmd := &cobra.Command{
		Use:   "nodes [--domain LEVEL=VALUE]",
		Short: "List nodes: location, GPUs free/total, power measured/committed, status, held domains",
		Long: `List the nodes as placement sees them.

LOCATION is site/room/row/rack/pdu ("-" for a level not set). GPUS is free
(healthy and unused) of total. POWER is measured (device stats plus the
node's base draw; "-" before the first reading) of committed (the larger of
measured and what its replicas were promised). STATUS is Nomad's: ready,
down, initializing, or draining or ineligible for a ready node that takes no
new work (older controllers: schedulable or unschedulable: down, ineligible,
draining, or nothing free). HELD lists the held domains the node is in.`,
		Args: args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			q := url.Values{}
			if domain != "" {
				q.Set("domain", domain)
			}
			var nodes []controllerapi.NodeView
			raw, err := cl.get(cmd.Context(), "/v1/nodes", q, &nodes)
			if err != nil {
				return err
			}
			if len(nodes) == 0 && domain != "" {
				keys, err := domainKeys(cmd.Context(), cl)
				if err != nil {
					return err
				}
				return &Error{Code: ExitNotFound, Msg: fmt.Sprintf("no node is in %s", domain), Hint: suggest.Hint(domain, keys)}
			}
			if c.json() {
				return printJSON(cmd, raw)
			}
			t := newTable("NODE", "LOCATION", "GPUS", "POWER", "STATUS", "HELD")
			for _, n := range nodes {
				status := n.Status
				if status == "" { // a controller older than the status field
					status = "schedulable"
					if !n.Schedulable {
						status = "unschedulable"
					}
				}
				t.row(n.Name, location(n.Location), fmt.Sprintf("%d/%d", n.GPUsFree, n.GPUsTotal),
					power(n.Measured, n.Committed), status, dash(strings.Join(n.Held, ",")))
			}
			return write(cmd.OutOrStdout(), t.bytes())
		},
	}
	cmd.Flags().StringVar(&domain, "domain", "", "only the nodes in this domain, such as rack=r01-k01")
	_ = cmd.RegisterFlagCompletionFunc("domain", c.complete(domainKeys))
	return cmd
}

func (c *ctl) labelCmd() *cobra.Command {
	var unset []string
	cmd := &cobra.Command{
		Use:   "label NODE [LABEL=VALUE ...] [--unset LABEL ...]",
		Short: "Set or unset a node's location labels (Nomad dynamic node metadata)",
		Long: `Set or unset a node's location labels: site, room, row, rack, pdu, and
fabric, hcas and base_watts. They are written as Nomad dynamic node metadata
(llmgw.rack, ...): they win over the client file's meta {} block and survive
client restarts. It returns once the controller's view shows them (a Nomad
client sends its metadata to the servers with its next node update, 5 to
10 s after the write), so that the next llmgw ctl nodes, and placement, see
them; when that takes longer than 15 s it says so on stderr.

  llmgw ctl label n-0001 rack=r01-k01 pdu=p01-a
  llmgw ctl label n-0001 --unset pdu`,
		Args:              args(cobra.MinimumNArgs(1)),
		ValidArgsFunction: c.completeLabelArgs,
		RunE: func(cmd *cobra.Command, a []string) error {
			req := controllerapi.LabelsRequest{Set: map[string]string{}, Unset: unset}
			for _, kv := range a[1:] {
				k, v, ok := strings.Cut(kv, "=")
				if !ok || k == "" {
					return &Error{Code: ExitUsage, Msg: fmt.Sprintf("label %q: want LABEL=VALUE, such as rack=r01-k01", kv),
						Hint: "to remove a label, use --unset " + kv}
				}
				req.Set[k] = v
			}
			if len(req.Set) == 0 && len(req.Unset) == 0 {
				return &Error{Code: ExitUsage, Msg: "nothing to set or unset", Hint: "usage: " + cmd.UseLine()}
			}
			cl, err := c.client()
			if err != nil {
				return err
			}
			raw, err := cl.do(cmd.Context(), "PUT", "/v1/nodes/"+a[0]+"/labels", nil, req, nil)
			if err != nil {
				return err
			}
			warnWrite(cmd, raw)
			if c.json() {
				return printJSON(cmd, raw)
			}
			var parts []string
			if len(req.Set) > 0 {
				var set []string
				for _, k := range sortedKeys(req.Set) {
					set = append(set, k+"="+req.Set[k])
				}
				parts = append(parts, "set "+strings.Join(set, " "))
			}
			if len(req.Unset) > 0 {
				parts = append(parts, "unset "+strings.Join(req.Unset, " "))
			}
			return write(cmd.OutOrStdout(), fmt.Appendf(nil, "node %s: %s\n", a[0], strings.Join(parts, "; ")))
		},
	}
	cmd.Flags().StringSliceVar(&unset, "unset", nil, "labels to remove (repeat, or separate with commas)")
	_ = cmd.RegisterFlagCompletionFunc("unset", cobra.FixedCompletions(labelNames, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

func (c *ctl) facilityCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "facility",
		Short: "List budgeted and held domains: cap, committed and measured draw, headroom, count, caps, hold",
		Long: `List every domain with a power budget or a hold.

CAP is the budget; COMMITTED the draw placement counts (per node the larger
of measured and promised, each shard counted as the domain counts);
MEASURED what the nodes report; HEADROOM the budget less the facility's
headroom fraction less COMMITTED (negative: over). COUNT is how the budget
counts shards: "declared" (at their declared draw) or "measured" (at what
shards of their profile were learned to draw, docs/power.md); for a measured
one DECLARED is what COMMITTED would be counted declared. CAPS is the
domain's GPU power caps in the leader's last cap round (GET /v1/power):
"engaged (N GPUs capped)", "off", "refused" (a GPU in it refused a cap: it
admits as declared until caps work again), or "-" (no cap round on this
controller, or no GPU node in the domain); llmgw ctl power has the detail.
HOLD is "hold" or "drain", where the hold comes from ("file": facility.hcl,
"runtime": llmgw ctl facility hold) and its reason.`,
		Args: args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			var f controllerapi.FacilityView
			raw, err := cl.get(cmd.Context(), "/v1/facility", nil, &f)
			if err != nil {
				return err
			}
			if c.json() {
				return printJSON(cmd, raw)
			}
			// The caps, from the power view; a controller without one
			// (older than GET /v1/power) shows none.
			pv := &controllerapi.PowerView{}
			if _, err := cl.get(cmd.Context(), "/v1/power", nil, pv); err != nil {
				var e *Error
				if !errors.As(err, &e) || e.Code != ExitNotFound {
					return err
				}
				pv = nil
			}
			t := newTable("DOMAIN", "NODES", "CAP", "COMMITTED", "MEASURED", "HEADROOM", "COUNT", "DECLARED", "CAPS", "HOLD")
			for _, d := range f.Domains {
				capW, headroom, count, declared, caps := "-", "-", "-", "-", "-"
				if d.CapWatts > 0 {
					capW, headroom, count, caps = kW(d.CapWatts), kW(d.Headroom), dash(d.Count), capsString(d.Domain, pv)
					if d.Count == "measured" {
						declared = kW(d.DeclaredWatts)
					}
				}
				t.row(d.Domain, fmt.Sprint(d.Nodes), capW, kW(d.Committed), kW(d.Measured), headroom, count, declared, caps, holdString(d.Hold))
			}
			return write(cmd.OutOrStdout(), t.bytes())
		},
	}
	cmd.AddCommand(c.holdCmd(), c.releaseCmd())
	return cmd
}

func holdString(h *controllerapi.Hold) string {
	if h == nil {
		return "-"
	}
	s := "hold"
	if h.Drain {
		s = "drain"
	}
	src := h.Source
	if src == "facility" {
		src = "file"
	}
	s += " (" + src + ")"
	if h.Reason != "" {
		s += " " + h.Reason
	}
	return s
}

func (c *ctl) holdCmd() *cobra.Command {
	var req controllerapi.HoldRequest
	cmd := &cobra.Command{
		Use:   "hold DOMAIN [--drain] [--reason R]",
		Short: "Hold a domain: no new replica is placed in it; --drain also moves what runs there",
		Long: `Hold a domain, such as rack=r01-k03 or pdu=p01-a, for maintenance: no new
replica shard is placed in it. With --drain the replicas already there are
moved too, each new copy first, the old one stopped once the new one serves.
The hold is kept in Nomad Variables (llmgw/holds) until released.`,
		Args:              args(cobra.ExactArgs(1)),
		ValidArgsFunction: c.completeFirst(domainKeys),
		RunE: func(cmd *cobra.Command, a []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			raw, err := cl.do(cmd.Context(), "PUT", "/v1/facility/holds/"+a[0], nil, req, nil)
			if err != nil {
				return err
			}
			warnWrite(cmd, raw)
			if c.json() {
				return printJSON(cmd, raw)
			}
			what := "held"
			if req.Drain {
				what = "held and draining"
			}
			msg := fmt.Sprintf("%s %s", a[0], what)
			if req.Reason != "" {
				msg += ": " + req.Reason
			}
			return write(cmd.OutOrStdout(), []byte(msg+"\n"))
		},
	}
	cmd.Flags().BoolVar(&req.Drain, "drain", false, "also move the replicas running in the domain, new copy first")
	cmd.Flags().StringVar(&req.Reason, "reason", "", "why, shown in placement rejections and the facility list")
	return cmd
}

func (c *ctl) releaseCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "release DOMAIN",
		Short: "Release a hold set with llmgw ctl facility hold",
		Long: `Release a run-time hold. A hold written in the facility file is released by
removing it there and reloading the controller (SIGHUP).`,
		Args:              args(cobra.ExactArgs(1)),
		ValidArgsFunction: c.completeFirst(runtimeHolds),
		RunE: func(cmd *cobra.Command, a []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			raw, err := cl.do(cmd.Context(), "DELETE", "/v1/facility/holds/"+a[0], nil, nil, nil)
			if err != nil {
				return err
			}
			warnWrite(cmd, raw)
			if c.json() {
				return printJSON(cmd, raw)
			}
			return write(cmd.OutOrStdout(), []byte(a[0]+" released\n"))
		},
	}
}

// warnWrite prints a write's warning, if its answer has one, on stderr: the
// write is done, but the controller's view did not show it in time, so the
// next read may not show it yet.
func warnWrite(cmd *cobra.Command, raw []byte) {
	var ans struct {
		Warning string `json:"warning"`
	}
	if json.Unmarshal(raw, &ans) == nil && ans.Warning != "" {
		fmt.Fprintf(cmd.ErrOrStderr(), "llmgw: warning: %s\n", ans.Warning)
	}
}

// domainKeys lists every domain some node is in, from the nodes' locations.
func domainKeys(ctx context.Context, cl *client) ([]string, error) {
	var nodes []controllerapi.NodeView
	if _, err := cl.get(ctx, "/v1/nodes", nil, &nodes); err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	for _, n := range nodes {
		for _, l := range facility.Levels() {
			if v := n.Location[l.String()]; v != "" {
				seen[l.String()+"="+v] = true
			}
		}
	}
	return sortedKeys(seen), nil
}

// fetchNames GETs path into a T and picks the names completion offers.
func fetchNames[T any](ctx context.Context, cl *client, path string, pick func(T) []string) ([]string, error) {
	var v T
	if _, err := cl.get(ctx, path, nil, &v); err != nil {
		return nil, err
	}
	return pick(v), nil
}

// runtimeHolds lists the domains held through the API.
func runtimeHolds(ctx context.Context, cl *client) ([]string, error) {
	return fetchNames(ctx, cl, "/v1/facility", func(f controllerapi.FacilityView) (out []string) {
		for _, d := range f.Domains {
			if d.Hold != nil && d.Hold.Source == "runtime" {
				out = append(out, d.Domain)
			}
		}
		return out
	})
}

// replicaAndModelNames lists the replicas, then the models.
func replicaAndModelNames(ctx context.Context, cl *client) ([]string, error) {
	reps, err := replicaIDs(ctx, cl)
	if err != nil {
		return nil, err
	}
	models, err := modelNames(ctx, cl)
	return append(reps, models...), err
}

func replicaIDs(ctx context.Context, cl *client) ([]string, error) {
	return fetchNames(ctx, cl, "/v1/replicas", func(reps []controllerapi.ReplicaView) (out []string) {
		for _, r := range reps {
			out = append(out, r.ID)
		}
		return out
	})
}

func nodeNames(ctx context.Context, cl *client) ([]string, error) {
	return fetchNames(ctx, cl, "/v1/nodes", func(nodes []controllerapi.NodeView) (out []string) {
		for _, n := range nodes {
			out = append(out, n.Name)
		}
		return out
	})
}

func modelNames(ctx context.Context, cl *client) ([]string, error) {
	return fetchNames(ctx, cl, "/v1/catalog", func(cat controllerapi.CatalogView) (out []string) {
		for _, m := range cat.Models {
			out = append(out, m.Name)
		}
		return out
	})
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func (c *ctl) reloadCmd() *cobra.Command {
	var req controllerapi.ReloadRequest
	cmd := &cobra.Command{
		Use:   "reload [--confirm]",
		Short: "Reload the controller's catalog and facility files (as SIGHUP does)",
		Long: `Reload the catalog and facility files. A bad file is refused and the files in
force stay. So is a catalog that would stop more than reconcile.max_stop_fraction
of the running replicas (default half): check it, and if the stops are meant,
reload again with --confirm.`,
		Args: args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			raw, err := cl.do(cmd.Context(), "POST", "/v1/reload", nil, req, nil)
			if err != nil {
				return err
			}
			if c.json() {
				return printJSON(cmd, raw)
			}
			return write(cmd.OutOrStdout(), []byte("reloaded\n"))
		},
	}
	cmd.Flags().BoolVar(&req.Confirm, "confirm", false, "let through a catalog that stops more than max_stop_fraction of the running replicas")
	return cmd
}
