package facility

import (
	"errors"
	"fmt"
	"math"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/gohcl"
	"github.com/hashicorp/hcl/v2/hclsyntax"
)

// decoder turns HCL into values, collecting every problem as an *Error
// naming file:line.
type decoder struct {
	filename string
	errs     []error
}

func (d *decoder) pos(r hcl.Range) Pos {
	fn := r.Filename
	if fn == "" {
		fn = d.filename
	}
	line := r.Start.Line
	if line < 1 {
		line = 1
	}
	return Pos{Filename: fn, Line: line}
}

func (d *decoder) addDiags(diags hcl.Diagnostics) bool {
	ok := true
	for _, dg := range diags {
		if dg.Severity != hcl.DiagError {
			continue
		}
		ok = false
		p := Pos{Filename: d.filename, Line: 1}
		if dg.Subject != nil {
			p = d.pos(*dg.Subject)
		}
		msg := dg.Summary
		if dg.Detail != "" {
			msg += ": " + dg.Detail
		}
		d.errs = append(d.errs, errAt(p, msg))
	}
	return ok
}

func (d *decoder) errorf(r hcl.Range, format string, args ...any) {
	d.errs = append(d.errs, errAt(d.pos(r), fmt.Sprintf(format, args...)))
}

func (d *decoder) err() error { return errors.Join(d.errs...) }

func (d *decoder) parse(src []byte) (hcl.Body, bool) {
	f, diags := hclsyntax.ParseConfig(src, d.filename, hcl.InitialPos)
	if !d.addDiags(diags) || f == nil {
		return nil, false
	}
	return f.Body, true
}

func (d *decoder) content(body hcl.Body, schema *hcl.BodySchema) *hcl.BodyContent {
	c, diags := body.Content(schema)
	d.addDiags(diags)
	if c == nil {
		c = &hcl.BodyContent{}
	}
	return c
}

// decode decodes attribute name, if present, into dst; it reports whether
// the attribute was present and decoded.
func (d *decoder) decode(c *hcl.BodyContent, name string, dst any) bool {
	a, ok := c.Attributes[name]
	if !ok {
		return false
	}
	return d.addDiags(gohcl.DecodeExpression(a.Expr, nil, dst))
}

// finite decodes a number attribute and checks it with checkWatts.
func (d *decoder) watts(c *hcl.BodyContent, name string, dst *float64, positive bool) bool {
	var v float64
	if !d.decode(c, name, &v) {
		return false
	}
	if err := checkWatts(name, v, positive); err != nil {
		d.errorf(c.Attributes[name].Range, "%v", err)
		return false
	}
	*dst = v
	return true
}

// intIn decodes a whole-number attribute and checks lo ≤ v ≤ hi.
func (d *decoder) intIn(c *hcl.BodyContent, name string, dst *int, lo, hi int) bool {
	var v int
	if !d.decode(c, name, &v) {
		return false
	}
	if err := checkInt(name, v, lo, hi); err != nil {
		d.errorf(c.Attributes[name].Range, "%v", err)
		return false
	}
	*dst = v
	return true
}

func (d *decoder) value(c *hcl.BodyContent, name string, dst *string) bool {
	var v string
	if !d.decode(c, name, &v) {
		return false
	}
	if err := checkValue(v); err != nil {
		d.errorf(c.Attributes[name].Range, "%s: %v", name, err)
		return false
	}
	*dst = v
	return true
}

func (d *decoder) level(c *hcl.BodyContent, name string, dst *Level) bool {
	var s string
	if !d.decode(c, name, &s) {
		return false
	}
	l, err := ParseLevel(s)
	if err != nil {
		d.errorf(c.Attributes[name].Range, "%s: %v", name, err)
		return false
	}
	*dst = l
	return true
}

// validated turns the *Errors of a Validate into decoder errors; they carry
// their own positions.
func (d *decoder) validated(err error) {
	if err == nil {
		return
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		d.errs = append(d.errs, j.Unwrap()...)
		return
	}
	d.errs = append(d.errs, err)
}

var fleetSchema = &hcl.BodySchema{Blocks: []hcl.BlockHeaderSchema{{Type: "node", LabelNames: []string{"name"}}}}

var nodeSchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{
		{Name: "site"}, {Name: "room"}, {Name: "row"}, {Name: "rack"}, {Name: "pdu"},
		{Name: "pool"}, {Name: "cpu_cores"}, {Name: "memory_gb"},
		{Name: "base_watts"}, {Name: "measured_watts"}, {Name: "fabric"},
	},
	Blocks: []hcl.BlockHeaderSchema{{Type: "gpu", LabelNames: []string{"model"}}},
}

var gpuSchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{
		{Name: "count", Required: true}, {Name: "free"},
		{Name: "power_limit", Required: true}, {Name: "memory"},
	},
}

// ParseFleet parses a fleet file (fleet.hcl): node blocks with their
// location, resources, power and GPUs. Every problem is an *Error naming
// filename:line; they are joined with errors.Join.
func ParseFleet(filename string, src []byte) (Fleet, error) {
	d := &decoder{filename: filename}
	body, ok := d.parse(src)
	if !ok {
		return Fleet{}, d.err()
	}
	var fleet Fleet
	for _, b := range d.content(body, fleetSchema).Blocks {
		n := Node{Name: b.Labels[0], Pool: DefaultPool, Pos: d.pos(b.DefRange)}
		c := d.content(b.Body, nodeSchema)
		for _, l := range Levels() {
			var v string
			if d.value(c, l.String(), &v) {
				n.Location.set(l, v)
			}
		}
		d.value(c, "pool", &n.Pool)
		d.value(c, "fabric", &n.Fabric)
		d.intIn(c, "cpu_cores", &n.CPUCores, 0, maxCPU)
		d.intIn(c, "memory_gb", &n.MemoryGB, 0, maxMemGB)
		d.watts(c, "base_watts", &n.BaseWatts, false)
		d.watts(c, "measured_watts", &n.MeasuredWatts, false)
		for _, gb := range c.Blocks {
			g := GPU{Model: gb.Labels[0]}
			gc := d.content(gb.Body, gpuSchema)
			okCount := d.intIn(gc, "count", &g.Count, 1, maxCount)
			g.Free = g.Count
			if d.decode(gc, "free", &g.Free) && okCount && (g.Free < 0 || g.Free > g.Count) {
				d.errorf(gc.Attributes["free"].Range, "free must be between 0 and count (%d), got %d", g.Count, g.Free)
				g.Free = 0
			}
			d.watts(gc, "power_limit", &g.PowerLimitWatts, true)
			d.intIn(gc, "memory", &g.MemoryMiB, 0, math.MaxInt32)
			if g.Model == "" {
				d.errorf(gb.DefRange, "gpu block needs a model name")
			}
			n.GPUs = append(n.GPUs, g)
		}
		fleet.Nodes = append(fleet.Nodes, n)
	}
	if len(d.errs) > 0 {
		return Fleet{}, d.err()
	}
	d.validated(fleet.Validate())
	if len(d.errs) > 0 {
		return Fleet{}, d.err()
	}
	return fleet, nil
}

var facilitySchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{{Name: "headroom"}},
	Blocks: []hcl.BlockHeaderSchema{
		{Type: "budget", LabelNames: []string{"domain"}},
		{Type: "hold", LabelNames: []string{"domain"}},
	},
}

var budgetSchema = &hcl.BodySchema{Attributes: []hcl.AttributeSchema{{Name: "watts", Required: true}}}

var holdSchema = &hcl.BodySchema{Attributes: []hcl.AttributeSchema{{Name: "reason"}, {Name: "drain"}}}

// ParseFacility parses a facility file (facility.hcl): headroom, budget and
// hold blocks keyed by domain ("pdu=p01-a"). Every problem is an *Error
// naming filename:line.
func ParseFacility(filename string, src []byte) (Facility, error) {
	d := &decoder{filename: filename}
	body, ok := d.parse(src)
	if !ok {
		return Facility{}, d.err()
	}
	var fac Facility
	c := d.content(body, facilitySchema)
	if d.decode(c, "headroom", &fac.Headroom) {
		if h := fac.Headroom; math.IsNaN(h) || h < 0 || h >= 1 {
			d.errorf(c.Attributes["headroom"].Range, "headroom must be at least 0 and less than 1, got %v", h)
			fac.Headroom = 0
		}
	}
	for _, b := range c.Blocks {
		dom, err := ParseDomain(b.Labels[0])
		if err != nil {
			d.errorf(b.LabelRanges[0], "%s: %v", b.Type, err)
		}
		switch b.Type {
		case "budget":
			bc := d.content(b.Body, budgetSchema)
			bud := Budget{Domain: dom, Pos: d.pos(b.DefRange)}
			if !d.watts(bc, "watts", &bud.Watts, true) {
				bud.Watts = 1 // reported; keep Validate quiet about it
			}
			fac.Budgets = append(fac.Budgets, bud)
		case "hold":
			hc := d.content(b.Body, holdSchema)
			h := Hold{Domain: dom, Pos: d.pos(b.DefRange)}
			d.decode(hc, "reason", &h.Reason)
			d.decode(hc, "drain", &h.Drain)
			fac.Holds = append(fac.Holds, h)
		}
	}
	if len(d.errs) > 0 {
		return Facility{}, d.err()
	}
	d.validated(fac.Validate())
	if len(d.errs) > 0 {
		return Facility{}, d.err()
	}
	return fac, nil
}

var catalogSchema = &hcl.BodySchema{Blocks: []hcl.BlockHeaderSchema{{Type: "model", LabelNames: []string{"name"}}}}

var modelSchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{{Name: "source"}, {Name: "replicas"}, {Name: "max_surge"}, {Name: "max_unavailable"}},
	Blocks:     []hcl.BlockHeaderSchema{{Type: "profile", LabelNames: []string{"name"}}},
}

var profileSchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{
		{Name: "engine", Required: true}, {Name: "gpu", Required: true}, {Name: "gpus"},
		{Name: "nodes"}, {Name: "watts"}, {Name: "cpu_cores"}, {Name: "memory_gb"},
		{Name: "keep_within"}, {Name: "spread"}, {Name: "fabric"}, {Name: "pool"},
		{Name: "args"}, {Name: "env"}, {Name: "ready"}, {Name: "weight"},
	},
}

// ParseCatalog parses a catalog file (catalog.hcl): model blocks with their
// profiles in order of preference. Defaults: replicas 1, max_surge 1,
// max_unavailable 0, gpus 1, nodes 1,
// spread ["rack", "pdu"], pool "default", weight 1. Every problem is an
// *Error naming filename:line.
func ParseCatalog(filename string, src []byte) (Catalog, error) {
	d := &decoder{filename: filename}
	body, ok := d.parse(src)
	if !ok {
		return Catalog{}, d.err()
	}
	var cat Catalog
	for _, mb := range d.content(body, catalogSchema).Blocks {
		m := Model{Name: mb.Labels[0], Replicas: 1, MaxSurge: 1, Pos: d.pos(mb.DefRange)}
		mc := d.content(mb.Body, modelSchema)
		d.decode(mc, "source", &m.Source)
		d.intIn(mc, "replicas", &m.Replicas, 0, maxCount)
		d.intIn(mc, "max_surge", &m.MaxSurge, 0, maxCount)
		d.intIn(mc, "max_unavailable", &m.MaxUnavailable, 0, maxCount)
		if m.MaxSurge == 0 && m.MaxUnavailable == 0 {
			d.errorf(mb.DefRange, "model %q: max_surge and max_unavailable are both 0: a roll could never make progress", m.Name)
		}
		for _, pb := range mc.Blocks {
			m.Profiles = append(m.Profiles, d.profile(pb))
		}
		if len(m.Profiles) == 0 {
			d.errorf(mb.DefRange, "model %q: no profile", m.Name)
		}
		cat.Models = append(cat.Models, m)
	}
	if len(d.errs) > 0 {
		return Catalog{}, d.err()
	}
	d.validated(cat.Validate())
	if len(d.errs) > 0 {
		return Catalog{}, d.err()
	}
	return cat, nil
}

func (d *decoder) profile(b *hcl.Block) Profile {
	p := Profile{
		Name: b.Labels[0], GPUs: 1, Nodes: 1, Pool: DefaultPool, Weight: 1,
		KeepWithin: LevelSite, Spread: DefaultSpread(), Pos: d.pos(b.DefRange),
	}
	c := d.content(b.Body, profileSchema)
	d.decode(c, "engine", &p.Engine)
	if d.decode(c, "gpu", &p.GPU) && p.GPU == "" {
		d.errorf(c.Attributes["gpu"].Range, "gpu must name a GPU model")
	}
	d.intIn(c, "gpus", &p.GPUs, 1, maxCount)
	d.intIn(c, "nodes", &p.Nodes, 1, maxCount)
	d.watts(c, "watts", &p.Watts, true)
	d.intIn(c, "cpu_cores", &p.CPUCores, 0, maxCPU)
	d.intIn(c, "memory_gb", &p.MemoryGB, 0, maxMemGB)
	if !d.level(c, "keep_within", &p.KeepWithin) {
		if _, given := c.Attributes["keep_within"]; !given && p.Nodes > 1 {
			d.errorf(b.DefRange, "profile %q: keep_within is required when nodes > 1", p.Name)
		}
	}
	var spread []string
	if d.decode(c, "spread", &spread) {
		p.Spread = make([]Level, 0, len(spread))
		for _, s := range spread {
			l, err := ParseLevel(s)
			if err != nil {
				d.errorf(c.Attributes["spread"].Range, "spread: %v", err)
				continue
			}
			p.Spread = append(p.Spread, l)
		}
	}
	d.value(c, "fabric", &p.Fabric)
	d.value(c, "pool", &p.Pool)
	d.decode(c, "args", &p.Args)
	d.decode(c, "env", &p.Env)
	d.decode(c, "ready", &p.Ready)
	d.intIn(c, "weight", &p.Weight, 0, math.MaxInt32)
	return p
}
