package ctlcmd

import (
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/llmgw/llmgw/gatewayapi"
	"github.com/llmgw/llmgw/internal/gatewayclient"
)

// EnvGateways names the gateways llmgw ctl cache reads when --gateway is
// not given: base URLs, comma-separated.
const EnvGateways = "LLMGW_GATEWAYS"

// DefaultGateway is the gateway llmgw ctl cache reads when neither
// --gateway nor $LLMGW_GATEWAYS names one: llmgw gateway's default listen
// address.
const DefaultGateway = "http://127.0.0.1:8080"

// cacheRow is one replica's prompt-cache counts summed over the gateways
// read.
type cacheRow struct {
	Model          string `json:"model"`
	Routing        string `json:"routing"`
	Replica        string `json:"replica"`
	Endpoint       string `json:"endpoint"`
	PromptTokens   int64  `json:"prompt_tokens"`
	CachedTokens   int64  `json:"cached_prompt_tokens"`
	UnknownAnswers int64  `json:"unknown_answers"`
	// HitRatio is CachedTokens / PromptTokens; nil with no prompt tokens
	// counted (no reading, not a miss).
	HitRatio *float64 `json:"hit_ratio"`
}

func (c *ctl) cacheCmd() *cobra.Command {
	var gateways []string
	cmd := &cobra.Command{
		Use:   "cache",
		Short: "Show the engines' prompt-cache hit ratio per model and replica, read from the gateways",
		Long: `Read each gateway's demand (` + gatewayapi.DemandPath + `) and show, per model and
replica, what the replicas' answers said of their engines' prompt caches,
summed over the gateways: PROMPT tokens of the answers that said how many
were cached, CACHED of them, HIT = CACHED / PROMPT, and UNKNOWN answers that
did not say (an engine that does not report it: neither hit nor miss; HIT
is "-" with no PROMPT). A "*" row per model sums its replicas. ROUTING is
the model's routing policy at the gateways (several when they differ).

The gateways are --gateway (repeatable, or comma-separated), else
$` + EnvGateways + `, else ` + DefaultGateway + `. Counts are since each
replica joined each gateway's view. A gateway that does not answer is an
error naming it (exit 5); the others' counts are not shown as the whole.`,
		Args: args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if c.output != "table" && c.output != "json" {
				return usageErr("-o %q: want table or json", c.output)
			}
			if len(gateways) == 0 {
				if env := c.opts.Getenv(EnvGateways); env != "" {
					gateways = strings.Split(env, ",")
				} else {
					gateways = []string{DefaultGateway}
				}
			}
			rows := map[[3]string]*cacheRow{}
			routing := map[string][]string{}
			dc := gatewayclient.DemandClient{HTTP: c.opts.HTTPClient}
			for _, g := range gateways {
				g = strings.TrimSpace(g)
				if u, err := url.Parse(g); err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
					return usageErr("--gateway %q: want a base URL such as %s", g, DefaultGateway)
				}
				d, err := dc.Read(cmd.Context(), g)
				if err != nil {
					return &Error{Code: ExitUnreachable, Msg: "gateway " + g + ": " + err.Error()}
				}
				for _, m := range d.Models {
					if m.Routing != "" && !slices.Contains(routing[m.Model], m.Routing) {
						routing[m.Model] = append(routing[m.Model], m.Routing)
					}
					for _, rc := range m.Cache {
						k := [3]string{m.Model, rc.Replica, rc.Endpoint}
						r := rows[k]
						if r == nil {
							r = &cacheRow{Model: m.Model, Replica: rc.Replica, Endpoint: rc.Endpoint}
							rows[k] = r
						}
						r.PromptTokens += rc.PromptTokens
						r.CachedTokens += rc.CachedTokens
						r.UnknownAnswers += rc.UnknownAnswers
					}
				}
			}
			out := cacheRows(rows, routing)
			if c.json() {
				b, err := json.MarshalIndent(out, "", "  ")
				if err != nil {
					return &Error{Code: ExitError, Msg: err.Error()}
				}
				return write(cmd.OutOrStdout(), append(b, '\n'))
			}
			t := newTable("MODEL", "ROUTING", "REPLICA", "ENDPOINT", "PROMPT", "CACHED", "HIT", "UNKNOWN")
			for _, r := range out {
				hit := "-"
				if r.HitRatio != nil {
					hit = fmt.Sprintf("%.1f%%", 100**r.HitRatio)
				}
				t.row(r.Model, r.Routing, r.Replica, dash(r.Endpoint), fmt.Sprint(r.PromptTokens), fmt.Sprint(r.CachedTokens), hit, fmt.Sprint(r.UnknownAnswers))
			}
			return write(cmd.OutOrStdout(), t.bytes())
		},
	}
	cmd.Flags().StringSliceVar(&gateways, "gateway", nil, "a gateway's base URL (repeatable; default $"+EnvGateways+", else "+DefaultGateway+")")
	return cmd
}

// cacheRows orders the summed rows by model, then replica, with a "*" row
// per model summing its replicas, and sets the hit ratios.
func cacheRows(rows map[[3]string]*cacheRow, routing map[string][]string) []cacheRow {
	var out []cacheRow
	for _, r := range rows {
		out = append(out, *r)
	}
	slices.SortFunc(out, func(a, b cacheRow) int {
		return strings.Compare(a.Model+"\x00"+a.Replica+"\x00"+a.Endpoint, b.Model+"\x00"+b.Replica+"\x00"+b.Endpoint)
	})
	var all []cacheRow
	for i := 0; i < len(out); {
		j := i
		sum := cacheRow{Model: out[i].Model, Replica: "*"}
		for ; j < len(out) && out[j].Model == out[i].Model; j++ {
			sum.PromptTokens += out[j].PromptTokens
			sum.CachedTokens += out[j].CachedTokens
			sum.UnknownAnswers += out[j].UnknownAnswers
		}
		all = append(all, out[i:j]...)
		all = append(all, sum)
		i = j
	}
	for i := range all {
		r := &all[i]
		slices.Sort(routing[r.Model])
		r.Routing = strings.Join(routing[r.Model], ",")
		if r.Routing == "" {
			r.Routing = "-"
		}
		if r.PromptTokens > 0 {
			v := float64(r.CachedTokens) / float64(r.PromptTokens)
			r.HitRatio = &v
		}
	}
	return all
}
