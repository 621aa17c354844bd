package ctlcmd

import (
	"bytes"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/llmgw/llmgw/controllerapi"
)

// maxPlanFile bounds each file ctl plan sends (the API takes 4 MiB in
// all).
const maxPlanFile = 2 << 20

func (c *ctl) planCmd() *cobra.Command {
	var (
		catalog, fac string
		holds        []string
		drain        bool
		reason       string
	)
	cmd := &cobra.Command{
		Use:   "plan [--catalog FILE] [--facility FILE] [--hold DOMAIN]... [--drain]",
		Short: "Show what the controller would do with other files or more holds: creates, moves, stops, budgets after; nothing applied",
		Long: `Ask the running controller what one reconcile pass would do, on what Nomad
runs now, with the catalog and facility files given (each in place of the one
in force; without either, the one in force) and the domains given with --hold
held (with --drain, drained: their replicas move out, new copy first). The
run-time holds in force apply as well. Nothing is applied: no job, hold or
decision is written.

CHANGE is create (a replica its slot has no job for), move (a new copy or new
placement of a replica that has one: out of a held domain, a roll to a changed
profile, a failed job placed again) or stop. FROM and TO are where the job runs
and where the new placement goes. The budgets table shows each budgeted
domain's draw now and after the pass. A catalog that a reload would refuse
(more stops than reconcile.max_stop_fraction) is said so. A bad file is refused
with every problem at file:line, as a reload refuses it.`,
		Args: args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if drain && len(holds) == 0 {
				return usageErr("--drain drains the domains --hold names: give --hold DOMAIN")
			}
			req := controllerapi.PlanRequest{}
			var err error
			if catalog != "" {
				if req.Catalog, err = readPlanFile("--catalog", catalog); err != nil {
					return err
				}
				req.CatalogName = catalog
			}
			if fac != "" {
				if req.Facility, err = readPlanFile("--facility", fac); err != nil {
					return err
				}
				req.FacilityName = fac
			}
			for _, h := range holds {
				req.Holds = append(req.Holds, controllerapi.PlanHold{Domain: h, Reason: reason, Drain: drain})
			}
			cl, err := c.client()
			if err != nil {
				return err
			}
			var v controllerapi.PlanView
			raw, err := cl.do(cmd.Context(), "POST", "/v1/plan", nil, req, &v)
			if err != nil {
				return err
			}
			if c.json() {
				return printJSON(cmd, raw)
			}
			return write(cmd.OutOrStdout(), renderPlan(v))
		},
	}
	f := cmd.Flags()
	f.StringVar(&catalog, "catalog", "", "catalog file to plan with, in place of the one in force (HCL)")
	f.StringVar(&fac, "facility", "", "facility file to plan with, in place of the one in force (HCL)")
	f.StringArrayVar(&holds, "hold", nil, "hold this domain (level=value, such as rack=r01-k01) for the plan; repeatable")
	f.BoolVar(&drain, "drain", false, "the --hold domains are drained: their replicas move out")
	f.StringVar(&reason, "reason", "", "the --hold reason, as the plan shows it")
	_ = cmd.MarkFlagFilename("catalog", "hcl")
	_ = cmd.MarkFlagFilename("facility", "hcl")
	return cmd
}

// readPlanFile reads one of ctl plan's files.
func readPlanFile(flag, path string) (string, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return "", &Error{Code: ExitUsage, Msg: fmt.Sprintf("%s: %v", flag, err)}
	}
	if fi.Size() > maxPlanFile {
		return "", &Error{Code: ExitUsage, Msg: fmt.Sprintf("%s %s: %d bytes, more than the %d a plan takes", flag, path, fi.Size(), maxPlanFile)}
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", &Error{Code: ExitUsage, Msg: fmt.Sprintf("%s: %v", flag, err)}
	}
	if len(bytes.TrimSpace(b)) == 0 {
		return "", &Error{Code: ExitUsage, Msg: fmt.Sprintf("%s %s: the file is empty", flag, path)}
	}
	return string(b), nil
}

// renderPlan is the plan as tables: the changes, the budgets now and
// after, the replicas left unplaced, and a summary line.
func renderPlan(v controllerapi.PlanView) []byte {
	var b bytes.Buffer
	if len(v.Changes) == 0 {
		b.WriteString("No changes.\n")
	} else {
		t := newTable("CHANGE", "REPLICA", "MODEL", "PROFILE", "FROM", "TO", "NODES", "WATTS", "REASON")
		for _, ch := range v.Changes {
			nodes := ch.Nodes
			if ch.Change == controllerapi.ChangeStop {
				nodes = ch.FromNodes
			}
			w := "-"
			if ch.Watts > 0 {
				w = fmt.Sprint(ch.Watts)
			}
			t.row(ch.Change, ch.Replica, dash(ch.Model), dash(ch.Profile), dash(ch.From), dash(ch.To), dash(strings.Join(nodes, ",")), w, ch.Reason)
		}
		b.Write(t.bytes())
	}
	if len(v.Domains) > 0 {
		b.WriteString("\n")
		t := newTable("DOMAIN", "CAP", "NOW", "AFTER", "HEADROOM AFTER", "HELD")
		for _, d := range v.Domains {
			held := "no"
			if d.Held {
				held = "yes"
			}
			t.row(d.Domain, kW(d.CapWatts), kW(d.BeforeWatts), kW(d.AfterWatts), kW(d.LimitWatts-d.AfterWatts), held)
		}
		b.Write(t.bytes())
	}
	if len(v.Unplaced) > 0 {
		b.WriteString("\nUNPLACED\n")
		for _, u := range v.Unplaced {
			fmt.Fprintf(&b, "%s (%s)\n", u.Replica, u.Model)
			for _, r := range u.Reasons {
				fmt.Fprintf(&b, "  %s\n", r)
			}
		}
	}
	if len(v.Waiting) > 0 {
		b.WriteString("\nWAITING\n")
		for _, id := range sortedKeys(v.Waiting) {
			fmt.Fprintf(&b, "%s: %s\n", id, v.Waiting[id])
		}
	}
	if len(v.Warnings) > 0 {
		b.WriteString("\nWARNINGS\n")
		for _, w := range v.Warnings {
			fmt.Fprintf(&b, "%s\n", w)
		}
	}
	fmt.Fprintf(&b, "\n%s, %s, %s; nothing applied", plural(v.Creates, "create"), plural(v.Moves, "move"), plural(v.Stops, "stop"))
	if v.DeferredStops > 0 {
		fmt.Fprintf(&b, "; %s left for later passes by reconcile.max_stops", plural(v.DeferredStops, "stop"))
	}
	b.WriteString("\n")
	if v.Refused != "" {
		fmt.Fprintf(&b, "A reload of these files would be refused: %s\n", v.Refused)
	}
	return b.Bytes()
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}
