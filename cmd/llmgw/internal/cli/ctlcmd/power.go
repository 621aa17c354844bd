package ctlcmd

import (
	"bytes"
	"fmt"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/llmgw/llmgw/controllerapi"
)

func (c *ctl) powerCmd() *cobra.Command {
	events := 10
	cmd := &cobra.Command{
		Use:   "power [--events N]",
		Short: "Show measured admission and GPU power caps: learned draw, each domain's caps, capped GPUs, refusals, events",
		Long: `Show what the controller's power part knows (GET /v1/power, docs/power.md):

Learned: what one shard of each model's profile draws on a GPU model, as
learned from the GPUs' readings (the measured rule's percentile over its
window), from how many samples, and whether measured budgets count it yet
(COUNTED: the samples reached the rule's min_samples).

Domains: each budgeted domain in the last cap round. CAPS is "engaged"
while its caps are on, else "off"; LIMIT its budget less headroom; DRAW what
it draws now (base and GPUs); BOUND the most it could draw with every GPU at
its cap; SHORTFALL by how much even every GPU at its floor leaves it over
its limit; CAPPED how many GPUs it capped.

Capped GPUs: each GPU with a cap, its model, cap, floor (the larger of its
minimum limit and its profile's min_watts), the limit its plugin reports it
enforces, its draw, the domain that capped it and its plugin's cap state.

Node shares: the nodes given a power share in the last round (docs/power.md,
"Node shares"): SHARE is what the node's plugin holds its GPUs to, reading
them every second, DRAW what they drew in the round, GPUS how many of them
the share covers. A node not listed has room for every GPU at its max.

Refused: the measured domains admitting as declared because a GPU in them
refused a cap. Events: the last --events cap decisions (cap, change, lift,
refused), oldest first.

The caps are decided by the leader: a controller that stands by shows what
it learned, and no cap round.`,
		Args: args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if events < 0 {
				return usageErr("--events %d: want 0 or more", events)
			}
			cl, err := c.client()
			if err != nil {
				return err
			}
			var v controllerapi.PowerView
			raw, err := cl.get(cmd.Context(), "/v1/power", nil, &v)
			if err != nil {
				return err
			}
			if c.json() {
				return printJSON(cmd, raw)
			}
			return write(cmd.OutOrStdout(), renderPower(v, events, c.opts.Now()))
		},
	}
	cmd.Flags().IntVar(&events, "events", events, "how many of the last cap events to show (0: none)")
	return cmd
}

// watt writes watts as whole watts: "450 W"; "-" for none.
func watt(w float64) string {
	if w <= 0 {
		return "-"
	}
	return strconv.FormatFloat(w, 'f', 0, 64) + " W"
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// renderPower writes the power view as its sections: learned draw, domains,
// capped GPUs, refusals and the last events.
func renderPower(v controllerapi.PowerView, events int, now time.Time) []byte {
	var b bytes.Buffer
	b.WriteString("Learned (per shard)\n")
	if len(v.Learned) == 0 {
		b.WriteString("nothing learned yet: no running replica has reported its GPUs' draw\n")
	} else {
		t := newTable("MODEL", "PROFILE", "GPU", "WATTS", "SAMPLES", "COUNTED")
		for _, l := range v.Learned {
			t.row(l.Model, l.Profile, l.GPU, watt(l.Watts), strconv.Itoa(l.Samples), yesNo(l.Counted))
		}
		b.Write(t.bytes())
	}

	b.WriteString("\nDomains\n")
	capped := map[string]int{}
	for _, g := range v.GPUs {
		if g.CapWatts > 0 {
			capped[g.CapDomain]++
		}
	}
	switch {
	case v.At.IsZero():
		b.WriteString("no cap round yet: caps are decided by the leader after each power poll\n")
	case len(v.Domains) == 0:
		b.WriteString("no budgeted domain holds a node with GPUs\n")
	default:
		b.WriteString("last round " + age(v.At, now) + " ago\n")
		t := newTable("DOMAIN", "CAPS", "LIMIT", "DRAW", "BOUND", "SHORTFALL", "CAPPED")
		for _, d := range v.Domains {
			caps := "off"
			if d.Engaged {
				caps = "engaged"
			}
			short := "-"
			if d.ShortfallWatts > 0 {
				short = kW(d.ShortfallWatts)
			}
			t.row(d.Domain, caps, kW(d.LimitWatts), kW(d.DrawWatts), kW(d.BoundWatts), short, strconv.Itoa(capped[d.Domain]))
		}
		b.Write(t.bytes())
	}

	if len(capped) > 0 {
		b.WriteString("\nCapped GPUs\n")
		t := newTable("NODE", "GPU", "MODEL", "CAP", "FLOOR", "ENFORCED", "DRAW", "DOMAIN", "STATE")
		for _, g := range v.GPUs {
			if g.CapWatts > 0 {
				t.row(g.Node, g.UUID, dash(g.Model), watt(g.CapWatts), watt(g.FloorWatts), watt(g.EnforcedWatts), watt(g.DrawWatts), g.CapDomain, dash(g.State))
			}
		}
		b.Write(t.bytes())
	}

	if len(v.Shares) > 0 {
		b.WriteString("\nNode shares (each node's plugin holds its share over its GPUs every second)\n")
		t := newTable("NODE", "SHARE", "DRAW", "GPUS")
		for _, s := range v.Shares {
			t.row(s.Node, watt(s.ShareWatts), watt(s.DrawWatts), strconv.Itoa(s.GPUs))
		}
		b.Write(t.bytes())
	}

	if len(v.Refused) > 0 {
		b.WriteString("\nRefused (these domains admit as declared until caps work again)\n")
		t := newTable("DOMAIN", "REASON")
		for _, r := range v.Refused {
			t.row(r.Domain, r.Reason)
		}
		b.Write(t.bytes())
	}

	if evs := v.Events[max(len(v.Events)-events, 0):]; len(evs) > 0 {
		fmt.Fprintf(&b, "\nEvents (last %d of %d)\n", len(evs), len(v.Events))
		t := newTable("AGE", "KIND", "DOMAIN", "NODE", "GPU", "MODEL", "WATTS", "REASON")
		for _, e := range evs {
			t.row(age(e.At, now), e.Kind, e.Domain, dash(e.Node), dash(e.GPU), dash(e.Model), watt(e.Watts), e.Reason)
		}
		b.Write(t.bytes())
	}
	return b.Bytes()
}

// capsString is a domain's caps for llmgw ctl facility: "engaged (2 GPUs
// capped)", "off", "refused" (a GPU in it refused a cap), or "-" where the
// power view has no word on it (no cap round on this controller yet, no GPU
// node in it, or an older controller without GET /v1/power).
func capsString(domain string, pv *controllerapi.PowerView) string {
	if pv == nil {
		return "-"
	}
	for _, r := range pv.Refused {
		if r.Domain == domain {
			return "refused"
		}
	}
	for _, d := range pv.Domains {
		if d.Domain != domain {
			continue
		}
		if !d.Engaged {
			return "off"
		}
		n := 0
		for _, g := range pv.GPUs {
			if g.CapWatts > 0 && g.CapDomain == domain {
				n++
			}
		}
		unit := "GPUs"
		if n == 1 {
			unit = "GPU"
		}
		return fmt.Sprintf("engaged (%d %s capped)", n, unit)
	}
	return "-"
}
