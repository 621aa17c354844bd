package plancmd

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/llmgw/llmgw/facility"
)

// The -o json shape.
type (
	jsonPlan struct {
		Placements []jsonPlacement `json:"placements"`
		Unplaced   []jsonUnplaced  `json:"unplaced"`
		Domains    []jsonDomain    `json:"domains"`
		Warnings   []string        `json:"warnings,omitempty"`
	}
	jsonPlacement struct {
		Replica string         `json:"replica"`
		Model   string         `json:"model"`
		Profile string         `json:"profile"`
		Domain  facility.Scope `json:"domain"`
		Shards  []jsonShard    `json:"shards"`
		Watts   float64        `json:"watts"`
	}
	jsonShard struct {
		Node  string  `json:"node"`
		Watts float64 `json:"watts"`
		// Fetch: for a model whose weights a node fetches, what this node
		// has to fetch first (facility.Fetch); left out otherwise.
		Fetch *jsonFetch `json:"fetch,omitempty"`
	}
	jsonFetch struct {
		Key            string  `json:"key"`
		Present        bool    `json:"present"`
		Bytes          int64   `json:"bytes,omitempty"`
		BytesPerSecond float64 `json:"bytes_per_second,omitempty"`
		Seconds        float64 `json:"seconds,omitempty"`
		Explain        string  `json:"explain"`
	}
	jsonUnplaced struct {
		Replica string   `json:"replica"`
		Model   string   `json:"model"`
		Reasons []string `json:"reasons"`
	}
	jsonDomain struct {
		Domain    string  `json:"domain"`
		CapWatts  float64 `json:"cap_watts"`
		DrawWatts float64 `json:"draw_watts"` // admitted, counted as the domain counts
		// Count is how the domain counts shards (declared, measured);
		// DeclaredWatts what DrawWatts would be with every shard declared.
		Count         string  `json:"count"`
		DeclaredWatts float64 `json:"declared_watts"`
		Held          bool    `json:"held"`
	}
)

// RenderJSON renders a plan as one line of JSON:
//
//	{"placements":[{"replica":…,"model":…,"profile":…,"domain":{"rack":…,"pdu":…},
//	  "shards":[{"node":…,"watts":…,"fetch":{"key":…,"present":…,"bytes":…,
//	    "bytes_per_second":…,"seconds":…,"explain":…}}],"watts":…}],
//	 "unplaced":[{"replica":…,"model":…,"reasons":[…]}],
//	 "domains":[{"domain":"pdu=p01-a","cap_watts":…,"draw_watts":…,"count":"measured",
//	   "declared_watts":…,"held":false}],
//	 "warnings":["catalog.hcl:12: profile m/p: …"]}
//
// warnings is left out when there are none; a shard's fetch, when its
// model has no weights a node fetches (bytes, bytes_per_second and
// seconds when nothing is to be fetched or the size is not known).
func RenderJSON(p facility.Plan) ([]byte, error) {
	out := jsonPlan{
		Placements: make([]jsonPlacement, 0, len(p.Placements)),
		Unplaced:   make([]jsonUnplaced, 0, len(p.Unplaced)),
		Domains:    make([]jsonDomain, 0, len(p.Domains)),
	}
	for _, d := range p.Placements {
		jp := jsonPlacement{Replica: d.Replica, Model: d.Model, Profile: d.Profile, Domain: d.Domain,
			Shards: make([]jsonShard, 0, len(d.Shards)), Watts: d.Watts}
		if jp.Domain == nil {
			jp.Domain = facility.Scope{}
		}
		for _, s := range d.Shards {
			js := jsonShard{Node: s.Node, Watts: s.Watts}
			if f := s.Fetch; f != nil {
				js.Fetch = &jsonFetch{Key: f.Key, Present: f.Present, Bytes: f.Bytes, BytesPerSecond: f.BytesPerSecond,
					Seconds: f.Seconds, Explain: f.String()}
			}
			jp.Shards = append(jp.Shards, js)
		}
		out.Placements = append(out.Placements, jp)
	}
	for _, d := range p.Unplaced {
		out.Unplaced = append(out.Unplaced, jsonUnplaced{Replica: d.Replica, Model: d.Model, Reasons: d.Reasons()})
	}
	for _, u := range p.Domains {
		out.Domains = append(out.Domains, jsonDomain{Domain: u.Domain.String(), CapWatts: u.CapWatts, DrawWatts: u.DrawWatts,
			Count: u.Count.String(), DeclaredWatts: u.DeclaredWatts, Held: u.Held})
	}
	out.Warnings = p.Warnings
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(out); err != nil {
		return nil, fmt.Errorf("render plan: %w", err)
	}
	return b.Bytes(), nil
}

func watts(w float64) string { return strconv.FormatFloat(w, 'f', -1, 64) }

func kW(w float64) string { return fmt.Sprintf("%.1f kW", w/1000) }

// RenderText renders a plan as tables: placements, what their nodes have
// to fetch of the models' weights (when a model has weights a node
// fetches), budgeted domains, holds, the replicas that cannot be placed
// with their reasons, and the catalog's warnings.
func RenderText(p facility.Plan) []byte {
	var b bytes.Buffer
	tw := tabwriter.NewWriter(&b, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "REPLICA\tMODEL\tPROFILE\tDOMAIN\tNODES\tWATTS")
	for _, d := range p.Placements {
		nodes := make([]string, len(d.Shards))
		for i, s := range d.Shards {
			nodes[i] = s.Node
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", d.Replica, d.Model, d.Profile, d.Domain.Key(), strings.Join(nodes, ","), watts(d.Watts))
	}
	_ = tw.Flush() // a bytes.Buffer does not fail
	writeWeights(&b, p)

	b.WriteString("\n")
	tw = tabwriter.NewWriter(&b, 0, 8, 2, ' ', 0)
	// DRAW is what the domain admitted, counted as it counts (COUNT); for
	// a measured domain DECLARED is what it would be counted declared.
	fmt.Fprintln(tw, "DOMAIN\tCAP\tDRAW\tHEADROOM\tCOUNT\tDECLARED\tHELD")
	for _, u := range p.Domains {
		declared := "-"
		if u.Count == facility.CountMeasured {
			declared = kW(u.DeclaredWatts)
		}
		held := "no"
		if u.Held {
			held = "yes"
			if u.Hold.Reason != "" {
				held += " (" + u.Hold.Reason + ")"
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", u.Domain, kW(u.CapWatts), kW(u.DrawWatts), kW(u.HeadroomWatts()), u.Count, declared, held)
	}
	_ = tw.Flush() // a bytes.Buffer does not fail

	if len(p.Holds) > 0 {
		b.WriteString("\n")
		tw = tabwriter.NewWriter(&b, 0, 8, 2, ' ', 0)
		fmt.Fprintln(tw, "HOLD\tDRAIN\tREASON")
		for _, h := range p.Holds {
			drain := "no"
			if h.Drain {
				drain = "yes"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\n", h.Domain, drain, h.Reason)
		}
		_ = tw.Flush() // a bytes.Buffer does not fail
	}

	if len(p.Unplaced) > 0 {
		b.WriteString("\nUNPLACED\n")
		for _, d := range p.Unplaced {
			fmt.Fprintf(&b, "%s (%s)\n", d.Replica, d.Model)
			for _, r := range d.Reasons() {
				fmt.Fprintf(&b, "  %s\n", r)
			}
		}
	}
	if len(p.Warnings) > 0 {
		b.WriteString("\nWARNINGS\n")
		for _, w := range p.Warnings {
			fmt.Fprintf(&b, "%s\n", w)
		}
	}
	total := len(p.Placements) + len(p.Unplaced)
	fmt.Fprintf(&b, "\n%d of %d replicas placed", len(p.Placements), total)
	if len(p.Unplaced) > 0 {
		fmt.Fprintf(&b, ", %d not placed", len(p.Unplaced))
	}
	b.WriteString("\n")
	return b.Bytes()
}

// writeWeights writes, when some placement's model has weights a node
// fetches, what each of its nodes has to fetch first.
func writeWeights(b *bytes.Buffer, p facility.Plan) {
	var tw *tabwriter.Writer
	for _, d := range p.Placements {
		for _, s := range d.Shards {
			if s.Fetch == nil {
				continue
			}
			if tw == nil {
				b.WriteString("\n")
				tw = tabwriter.NewWriter(b, 0, 8, 2, ' ', 0)
				fmt.Fprintln(tw, "REPLICA\tNODE\tWEIGHTS")
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\n", d.Replica, s.Node, s.Fetch)
		}
	}
	if tw != nil {
		_ = tw.Flush() // a bytes.Buffer does not fail
	}
}
