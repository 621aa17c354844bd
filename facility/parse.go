package facility

import (
	"errors"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2"

	"github.com/llmgw/llmgw/engine"
	"github.com/llmgw/llmgw/gatewayapi"
	"github.com/llmgw/llmgw/internal/hcldecode"
)

// The files' schemas, for gohcl (internal/hcldecode). A field is one
// attribute or block: to add one, add a field with its tag here and the
// check that carries it into the model below (decoding gives the types;
// the checks give limits, defaults and everything across fields). Each
// struct keeps its body, so that the checks know what was given and where.
type (
	fleetHCL struct {
		Nodes   []nodeHCL    `hcl:"node,block"`
		Learned []learnedHCL `hcl:"learned,block"`
	}
	// learnedHCL is one learned "MODEL" "PROFILE" { gpu, watts, samples }.
	learnedHCL struct {
		Model    string    `hcl:"model,label"`
		Profile  string    `hcl:"profile,label"`
		GPU      string    `hcl:"gpu"`
		Watts    float64   `hcl:"watts"`
		Samples  int       `hcl:"samples"`
		DefRange hcl.Range `hcl:",def_range"`
		Body     hcl.Body  `hcl:",body"`
	}
	nodeHCL struct {
		Name          string    `hcl:"name,label"`
		Site          string    `hcl:"site,optional"`
		Room          string    `hcl:"room,optional"`
		Row           string    `hcl:"row,optional"`
		Rack          string    `hcl:"rack,optional"`
		PDU           string    `hcl:"pdu,optional"`
		Pool          string    `hcl:"pool,optional"`
		CPUCores      int       `hcl:"cpu_cores,optional"`
		MemoryGB      int       `hcl:"memory_gb,optional"`
		BaseWatts     float64   `hcl:"base_watts,optional"`
		MeasuredWatts float64   `hcl:"measured_watts,optional"`
		Fabric        string    `hcl:"fabric,optional"`
		GPUs          []gpuHCL  `hcl:"gpu,block"`
		DefRange      hcl.Range `hcl:",def_range"`
		Body          hcl.Body  `hcl:",body"`

		// What the node's store holds (fleet.go's Node.Weights) and how
		// fast it fetches, for `llmgw plan`.
		Weights             map[string]int64 `hcl:"weights,optional"`
		FetchBytesPerSecond float64          `hcl:"fetch_bytes_per_second,optional"`
	}
	gpuHCL struct {
		Model      string    `hcl:"model,label"`
		Count      int       `hcl:"count"`
		Free       int       `hcl:"free,optional"`
		PowerLimit float64   `hcl:"power_limit"`
		Memory     int       `hcl:"memory,optional"`
		DefRange   hcl.Range `hcl:",def_range"`
		Body       hcl.Body  `hcl:",body"`
	}

	facilityHCL struct {
		Headroom float64      `hcl:"headroom,optional"`
		Count    string       `hcl:"count,optional"`
		Measured *measuredHCL `hcl:"measured,block"`
		Budgets  []budgetHCL  `hcl:"budget,block"`
		Holds    []holdHCL    `hcl:"hold,block"`
		Body     hcl.Body     `hcl:",body"`
	}
	measuredHCL struct {
		Percentile float64   `hcl:"percentile,optional"`
		Window     string    `hcl:"window,optional"`
		Margin     float64   `hcl:"margin,optional"`
		MinSamples int       `hcl:"min_samples,optional"`
		DefRange   hcl.Range `hcl:",def_range"`
		Body       hcl.Body  `hcl:",body"`
	}
	budgetHCL struct {
		Domain      string    `hcl:"domain,label"`
		Watts       float64   `hcl:"watts"`
		Count       string    `hcl:"count,optional"`
		DomainRange hcl.Range `hcl:"domain,label_range"`
		DefRange    hcl.Range `hcl:",def_range"`
		Body        hcl.Body  `hcl:",body"`
	}
	holdHCL struct {
		Domain      string    `hcl:"domain,label"`
		Reason      string    `hcl:"reason,optional"`
		Drain       bool      `hcl:"drain,optional"`
		DomainRange hcl.Range `hcl:"domain,label_range"`
		DefRange    hcl.Range `hcl:",def_range"`
	}

	catalogHCL struct {
		Models []modelHCL `hcl:"model,block"`
	}
	modelHCL struct {
		Name           string        `hcl:"name,label"`
		Source         string        `hcl:"source,optional"`
		File           string        `hcl:"file,optional"`
		Replicas       int           `hcl:"replicas,optional"`
		MaxSurge       int           `hcl:"max_surge,optional"`
		MaxUnavailable int           `hcl:"max_unavailable,optional"`
		Priority       int           `hcl:"priority,optional"`
		Routing        string        `hcl:"routing,optional"`
		WarmSpares     int           `hcl:"warm_spares,optional"`
		Weights        *weightsHCL   `hcl:"weights,block"`
		MaxAdapters    int           `hcl:"max_adapters,optional"`
		AdapterLoading string        `hcl:"adapter_loading,optional"`
		Adapters       []adapterHCL  `hcl:"adapter,block"`
		Autoscale      *autoscaleHCL `hcl:"autoscale,block"`
		Profiles       []profileHCL  `hcl:"profile,block"`
		DefRange       hcl.Range     `hcl:",def_range"`
		Body           hcl.Body      `hcl:",body"`
	}
	// weightsHCL is a model's weights block: a hub repository (the
	// model's source) at a revision with its files, or urls, or a path
	// (catalog.go's Model.Weights, weightsapi.Source).
	weightsHCL struct {
		Revision string            `hcl:"revision,optional"`
		Files    []string          `hcl:"files,optional"`
		URLs     []string          `hcl:"urls,optional"`
		SHA256   map[string]string `hcl:"sha256,optional"`
		Path     string            `hcl:"path,optional"`
		Bytes    int64             `hcl:"bytes,optional"`
		DefRange hcl.Range         `hcl:",def_range"`
		Body     hcl.Body          `hcl:",body"`
	}
	autoscaleHCL struct {
		Min            int        `hcl:"min,optional"`
		Max            int        `hcl:"max"`
		Target         *targetHCL `hcl:"target,block"`
		UpWindow       string     `hcl:"up_window,optional"`
		DownWindow     string     `hcl:"down_window,optional"`
		MaxStep        int        `hcl:"max_step,optional"`
		PanicThreshold float64    `hcl:"panic_threshold,optional"`
		IdleAfter      string     `hcl:"idle_after,optional"`
		WhenIdle       string     `hcl:"when_idle,optional"`
		DefRange       hcl.Range  `hcl:",def_range"`
		Body           hcl.Body   `hcl:",body"`
	}
	targetHCL struct {
		Outstanding float64   `hcl:"outstanding_per_replica,optional"`
		Waiting     float64   `hcl:"waiting_per_replica,optional"`
		KVCache     float64   `hcl:"kv_cache_use,optional"`
		TTFT        string    `hcl:"ttft_p90,optional"`
		DefRange    hcl.Range `hcl:",def_range"`
		Body        hcl.Body  `hcl:",body"`
	}
	profileHCL struct {
		Name       string   `hcl:"name,label"`
		Engine     string   `hcl:"engine"`
		GPU        string   `hcl:"gpu"`
		GPUs       int      `hcl:"gpus,optional"`
		Nodes      int      `hcl:"nodes,optional"`
		Watts      float64  `hcl:"watts,optional"`
		MinWatts   float64  `hcl:"min_watts,optional"`
		CPUCores   int      `hcl:"cpu_cores,optional"`
		MemoryGB   int      `hcl:"memory_gb,optional"`
		KeepWithin string   `hcl:"keep_within,optional"`
		Spread     []string `hcl:"spread,optional"`
		Fabric     string   `hcl:"fabric,optional"`
		Pool       string   `hcl:"pool,optional"`
		Args       []string `hcl:"args,optional"`
		// EngineVersion and CheckArgs say which contract checks args.
		EngineVersion string            `hcl:"engine_version,optional"`
		CheckArgs     bool              `hcl:"check_args,optional"`
		Env           map[string]string `hcl:"env,optional"`
		// EnvFromVariable: engine variables whose values Nomad reads from
		// a Nomad Variable when it starts the task (catalog.go's
		// VariableEnv).
		EnvFromVariable []envFromVariableHCL `hcl:"env_from_variable,block"`
		Ready           string               `hcl:"ready,optional"`
		Weight          int                  `hcl:"weight,optional"`
		// The layout (catalog.go's Profile.TensorParallel and friends).
		TensorParallel   int       `hcl:"tensor_parallel,optional"`
		PipelineParallel int       `hcl:"pipeline_parallel,optional"`
		DataParallel     int       `hcl:"data_parallel,optional"`
		ExpertParallel   int       `hcl:"expert_parallel,optional"`
		DefRange         hcl.Range `hcl:",def_range"`
		Body             hcl.Body  `hcl:",body"`
	}
)

// envFromVariableHCL is one env_from_variable "NAME" { variable, key }.
type envFromVariableHCL struct {
	Name      string    `hcl:"name,label"`
	Variable  string    `hcl:"variable"`
	Key       string    `hcl:"key"`
	NameRange hcl.Range `hcl:"name,label_range"`
	DefRange  hcl.Range `hcl:",def_range"`
	Body      hcl.Body  `hcl:",body"`
}

// decoder checks what hcldecode decoded, collecting every problem as an
// *Error naming file:line. Its methods take a body and an attribute name,
// do nothing when the attribute was not given (or did not decode: that was
// reported), and set the model's field when the value passes.
type decoder struct {
	*hcldecode.File
	filename string
	errs     []error
}

// decode parses and decodes src into raw; ok is false when the file does
// not parse. A file whose name ends in ".json" is in HCL's JSON syntax
// (hcldecode.IsJSON), any other in the native syntax: the fleet, facility
// and catalog may each be either.
func decode(filename string, src []byte, raw any) (*decoder, bool) {
	return decodePart(filename, hcldecode.Whole(src), raw)
}

// decodePart is decode for a part of the file filename
// (hcldecode.DecodePart).
func decodePart(filename string, part hcldecode.Part, raw any) (*decoder, bool) {
	f, ok := hcldecode.DecodePart(filename, part, nil, raw)
	d := &decoder{File: f, filename: filename}
	for _, p := range f.Problems() {
		d.errs = append(d.errs, errAt(Pos{Filename: p.Filename, Line: p.Line}, p.Msg))
	}
	return d, ok
}

func (d *decoder) pos(r hcl.Range) Pos {
	fn := r.Filename
	if fn == "" {
		fn = d.filename
	}
	return Pos{Filename: fn, Line: max(r.Start.Line, 1)}
}

func (d *decoder) errorf(r hcl.Range, format string, args ...any) {
	d.errs = append(d.errs, errAt(d.pos(r), fmt.Sprintf(format, args...)))
}

func (d *decoder) err() error { return errors.Join(d.errs...) }

// set sets *dst to v when attribute name of body was given.
func set[T any](d *decoder, body hcl.Body, name string, v T, dst *T) bool {
	if _, ok := d.Given(body, name); !ok {
		return false
	}
	*dst = v
	return true
}

// watts checks a number of watts with checkWatts.
func (d *decoder) watts(body hcl.Body, name string, v float64, dst *float64, positive bool) bool {
	r, ok := d.Given(body, name)
	if !ok {
		return false
	}
	if err := checkWatts(name, v, positive); err != nil {
		d.errorf(r, "%v", err)
		return false
	}
	*dst = v
	return true
}

// intIn checks a whole number: lo ≤ v ≤ hi.
func (d *decoder) intIn(body hcl.Body, name string, v int, dst *int, lo, hi int) bool {
	r, ok := d.Given(body, name)
	if !ok {
		return false
	}
	if err := checkInt(name, v, lo, hi); err != nil {
		d.errorf(r, "%v", err)
		return false
	}
	*dst = v
	return true
}

// value checks a location, pool or fabric value with checkValue.
func (d *decoder) value(body hcl.Body, name, v string, dst *string) bool {
	r, ok := d.Given(body, name)
	if !ok {
		return false
	}
	if err := checkValue(v); err != nil {
		d.errorf(r, "%s: %v", name, err)
		return false
	}
	*dst = v
	return true
}

// level checks a level name.
func (d *decoder) level(body hcl.Body, name, v string, dst *Level) bool {
	r, ok := d.Given(body, name)
	if !ok {
		return false
	}
	l, err := ParseLevel(v)
	if err != nil {
		d.errorf(r, "%s: %v", name, err)
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

// ParseFleet parses a fleet file (fleet.hcl, or fleet.json when a program
// writes it): node blocks with their location, resources, power and GPUs,
// and the weights their stores hold (weights = { "<key>" = bytes }, the
// driver's attributes driver.llmgw.weights.<key>) with
// fetch_bytes_per_second.
// Every problem is an *Error naming
// filename:line; they are joined with errors.Join.
func ParseFleet(filename string, src []byte) (Fleet, error) {
	r := NewFleetReader(filename, src, 1)
	r.Read(0)
	return r.Fleet()
}

// FleetReader reads a fleet file in parts that may be read at once, each
// on its own goroutine: a fleet in HCL's JSON syntax whose nodes are one
// array ({"node": [{"n1": {…}}, …]}, as an inventory program writes it:
// hcldecode.SplitJSON), or in the native syntax with its node blocks
// starting lines (hcldecode.SplitNative), splits into runs of nodes; any
// other file is one part. The fleet and the problems are those ParseFleet
// gives, in the same order. The reader itself starts no goroutines.
type FleetReader struct {
	filename string
	src      []byte
	parts    []hcldecode.Part
	read     []fleetPart
}

// fleetPart is what one part read to: its nodes and learned draws, the
// problems decoding found (in file order), and those the checks after it
// found about nodes and about learned blocks.
type fleetPart struct {
	ok                bool // parsed
	nodes             []Node
	learned           []Learned
	decoded, nodeErrs []error
	learnedErrs       []error
}

// NewFleetReader prepares to read the fleet file filename in at most
// n+1 parts (n runs of nodes and the rest of the file).
func NewFleetReader(filename string, src []byte, n int) *FleetReader {
	r := &FleetReader{filename: filename, src: src}
	if hcldecode.IsJSON(filename) {
		r.parts, _ = hcldecode.SplitJSON(src, "node", n)
	} else {
		r.parts, _ = hcldecode.SplitNative(src, "node", n)
	}
	if r.parts == nil {
		r.parts = []hcldecode.Part{hcldecode.Whole(src)}
	}
	r.read = make([]fleetPart, len(r.parts))
	return r
}

// Parts is how many parts the file is read in.
func (r *FleetReader) Parts() int { return len(r.parts) }

// Read reads part i. Reads of different parts may run at once.
func (r *FleetReader) Read(i int) { r.read[i] = readFleetPart(r.filename, r.parts[i]) }

// Fleet joins the parts, every one of them read, into the fleet, and
// checks it whole. If a part did not decode cleanly (it does not parse on
// its own, or a value does not fit), the file is read again whole, so that
// its decoding problems are exactly those of the file, in the parser's
// order.
func (r *FleetReader) Fleet() (Fleet, error) {
	if len(r.parts) > 1 {
		for _, p := range r.read {
			if !p.ok || len(p.decoded) > 0 {
				return ParseFleet(r.filename, r.src)
			}
		}
	} else if !r.read[0].ok {
		return Fleet{}, errors.Join(r.read[0].decoded...)
	}
	var (
		fleet Fleet
		errs  []error
	)
	for _, p := range r.read {
		errs = append(errs, p.decoded...)
	}
	for _, p := range r.read {
		fleet.Nodes = append(fleet.Nodes, p.nodes...)
		errs = append(errs, p.nodeErrs...)
	}
	for _, p := range r.read {
		fleet.Learned = append(fleet.Learned, p.learned...)
		errs = append(errs, p.learnedErrs...)
	}
	if len(errs) > 0 {
		return Fleet{}, errors.Join(errs...)
	}
	d := &decoder{filename: r.filename}
	d.validated(fleet.Validate())
	if len(d.errs) > 0 {
		return Fleet{}, d.err()
	}
	return fleet, nil
}

func readFleetPart(filename string, part hcldecode.Part) fleetPart {
	var raw fleetHCL
	d, ok := decodePart(filename, part, &raw)
	out := fleetPart{ok: ok, decoded: d.errs}
	if !ok {
		return out
	}
	d.errs = nil
	for _, rn := range raw.Nodes {
		n := Node{Name: rn.Name, Pool: DefaultPool, Pos: d.pos(rn.DefRange)}
		b := rn.Body
		loc := [NumLevels]string{LevelSite: rn.Site, LevelRoom: rn.Room, LevelRow: rn.Row, LevelRack: rn.Rack, LevelPDU: rn.PDU}
		for _, l := range Levels() {
			var s string
			if d.value(b, l.String(), loc[l], &s) {
				n.Location.set(l, s)
			}
		}
		d.value(b, "pool", rn.Pool, &n.Pool)
		d.value(b, "fabric", rn.Fabric, &n.Fabric)
		d.intIn(b, "cpu_cores", rn.CPUCores, &n.CPUCores, 0, maxCPU)
		d.intIn(b, "memory_gb", rn.MemoryGB, &n.MemoryGB, 0, maxMemGB)
		d.watts(b, "base_watts", rn.BaseWatts, &n.BaseWatts, false)
		d.watts(b, "measured_watts", rn.MeasuredWatts, &n.MeasuredWatts, false)
		d.nodeWeights(b, rn, &n)
		for _, rg := range rn.GPUs {
			g := GPU{Model: rg.Model}
			gb := rg.Body
			okCount := d.intIn(gb, "count", rg.Count, &g.Count, 1, maxCount)
			g.Free = g.Count
			if set(d, gb, "free", rg.Free, &g.Free) && okCount && (g.Free < 0 || g.Free > g.Count) {
				r, _ := d.Given(gb, "free")
				d.errorf(r, "free must be between 0 and count (%d), got %d", g.Count, g.Free)
				g.Free = 0
			}
			d.watts(gb, "power_limit", rg.PowerLimit, &g.PowerLimitWatts, true)
			d.intIn(gb, "memory", rg.Memory, &g.MemoryMiB, 0, math.MaxInt32)
			if g.Model == "" {
				d.errorf(rg.DefRange, "gpu block needs a model name")
			}
			n.GPUs = append(n.GPUs, g)
		}
		out.nodes = append(out.nodes, n)
	}
	out.nodeErrs, d.errs = d.errs, nil
	out.learned = d.learned(raw.Learned)
	out.learnedErrs = d.errs
	return out
}

// ParseFacility parses a facility file (facility.hcl): headroom, budget and
// hold blocks keyed by domain ("pdu=p01-a"). Every problem is an *Error
// naming filename:line.
func ParseFacility(filename string, src []byte) (Facility, error) {
	var raw facilityHCL
	d, ok := decode(filename, src, &raw)
	if !ok {
		return Facility{}, d.err()
	}
	var fac Facility
	if r, ok := d.Given(raw.Body, "headroom"); ok {
		if h := raw.Headroom; math.IsNaN(h) || h < 0 || h >= 1 {
			d.errorf(r, "headroom must be at least 0 and less than 1, got %v", h)
		} else {
			fac.Headroom = h
		}
	}
	domain := func(typ, label string, at hcl.Range) Domain {
		dom, err := ParseDomain(label)
		if err != nil {
			d.errorf(at, "%s: %v", typ, err)
		}
		return dom
	}
	d.count(raw.Body, raw.Count, &fac.Count)
	if raw.Measured != nil {
		m := d.measured(raw.Measured)
		fac.Measured = &m
	}
	for _, rb := range raw.Budgets {
		bud := Budget{Domain: domain("budget", rb.Domain, rb.DomainRange), Pos: d.pos(rb.DefRange)}
		if !d.watts(rb.Body, "watts", rb.Watts, &bud.Watts, true) {
			bud.Watts = 1 // reported; keep Validate quiet about it
		}
		d.count(rb.Body, rb.Count, &bud.Count)
		fac.Budgets = append(fac.Budgets, bud)
	}
	for _, rh := range raw.Holds {
		// reason and drain need no check beyond their types.
		fac.Holds = append(fac.Holds, Hold{Domain: domain("hold", rh.Domain, rh.DomainRange), Reason: rh.Reason, Drain: rh.Drain, Pos: d.pos(rh.DefRange)})
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

// count reads a count attribute: "declared" or "measured".
func (d *decoder) count(body hcl.Body, v string, dst *CountMode) {
	r, ok := d.Given(body, "count")
	if !ok {
		return
	}
	m, err := ParseCountMode(v)
	if err != nil {
		d.errorf(r, "%v", err)
		return
	}
	*dst = m
}

// measured reads facility.hcl's measured block: the defaults
// (DefaultMeasured), then each field given, checked at its line.
func (d *decoder) measured(rm *measuredHCL) Measured {
	m := DefaultMeasured()
	m.Pos = d.pos(rm.DefRange)
	b := rm.Body
	field := func(name string, apply func(*Measured)) {
		r, ok := d.Given(b, name)
		if !ok {
			return
		}
		try := m
		apply(&try)
		if bad := try.check(); len(bad) > 0 {
			d.errorf(r, "measured: %s", bad[0])
			return
		}
		m = try
	}
	field("percentile", func(m *Measured) { m.Percentile = rm.Percentile })
	if r, ok := d.Given(b, "window"); ok {
		dur, err := hcldecode.ParseDuration("window", rm.Window)
		if err != nil {
			d.errorf(r, "measured: %v", err)
		} else {
			field("window", func(m *Measured) { m.Window = dur })
		}
	}
	field("margin", func(m *Measured) { m.Margin = rm.Margin })
	field("min_samples", func(m *Measured) { m.MinSamples = rm.MinSamples })
	return m
}

// learned reads fleet.hcl's learned blocks, each field checked at its
// line (duplicates are Fleet.Validate's).
func (d *decoder) learned(raw []learnedHCL) []Learned {
	var out []Learned
	for _, rl := range raw {
		l := Learned{LearnedKey: LearnedKey{Model: rl.Model, Profile: rl.Profile, GPU: rl.GPU}, Pos: d.pos(rl.DefRange)}
		b := rl.Body
		n := len(d.errs)
		if err := checkName("model", l.Model); err != nil {
			d.errorf(rl.DefRange, "learned %s: %v", l.LearnedKey, err)
		}
		if err := checkName("profile", l.Profile); err != nil {
			d.errorf(rl.DefRange, "learned %s: %v", l.LearnedKey, err)
		}
		if r, ok := d.Given(b, "gpu"); ok && l.GPU == "" {
			d.errorf(r, "learned %s: gpu must name a GPU model", l.LearnedKey)
		}
		d.watts(b, "watts", rl.Watts, &l.Watts, false)
		d.intIn(b, "samples", rl.Samples, &l.Samples, 0, math.MaxInt32)
		if len(d.errs) == n {
			out = append(out, l)
		}
	}
	return out
}

// ParseCatalog parses a catalog file (catalog.hcl): model blocks with their
// profiles in order of preference. Defaults: replicas 1, max_surge 1,
// max_unavailable 0, priority 50, gpus 1, nodes 1,
// spread ["rack", "pdu"], pool "default", weight 1. A model's weights
// block and warm_spares are read as parse_weights.go says, its adapter
// blocks and max_adapters as adapters.go says. Every problem
// is an *Error naming filename:line.
func ParseCatalog(filename string, src []byte) (Catalog, error) {
	var raw catalogHCL
	d, ok := decode(filename, src, &raw)
	if !ok {
		return Catalog{}, d.err()
	}
	var cat Catalog
	for _, rm := range raw.Models {
		m := Model{Name: rm.Name, Replicas: 1, MaxSurge: 1, Priority: DefaultPriority, Pos: d.pos(rm.DefRange)}
		b := rm.Body
		set(d, b, "source", rm.Source, &m.Source)
		set(d, b, "file", rm.File, &m.File)
		d.intIn(b, "replicas", rm.Replicas, &m.Replicas, 0, maxCount)
		d.intIn(b, "priority", rm.Priority, &m.Priority, 0, MaxPriority)
		if r, ok := d.Given(b, "routing"); ok {
			if rm.Routing == "" || !gatewayapi.ValidRouting(rm.Routing) {
				d.errorf(r, "model %q: routing %q: want %q or %q", m.Name, rm.Routing, gatewayapi.RoutingLeastOutstanding, gatewayapi.RoutingPrefix)
			} else {
				m.Routing = rm.Routing
			}
		}
		if rm.Autoscale != nil {
			if d.Has(b, "replicas") {
				r, ok := d.Given(b, "replicas")
				if !ok {
					r = rm.DefRange // its value was bad: reported there
				}
				d.errorf(r, "model %q: replicas and autoscale are both given: replicas is a fixed count, autoscale a range (min, max); give one", m.Name)
			}
			a := d.autoscale(rm.Autoscale)
			m.Autoscale, m.Replicas = &a, a.Min
		}
		if rm.Weights != nil {
			d.weights(&m, &rm)
		}
		d.warmSpares(&m, &rm)
		d.adapters(&m, &rm)
		d.intIn(b, "max_surge", rm.MaxSurge, &m.MaxSurge, 0, maxCount)
		d.intIn(b, "max_unavailable", rm.MaxUnavailable, &m.MaxUnavailable, 0, maxCount)
		if m.MaxSurge == 0 && m.MaxUnavailable == 0 {
			d.errorf(rm.DefRange, "model %q: max_surge and max_unavailable are both 0: a roll could never make progress", m.Name)
		}
		for i := range rm.Profiles {
			m.Profiles = append(m.Profiles, d.profile(&rm.Profiles[i]))
		}
		if len(m.Profiles) == 0 {
			d.errorf(rm.DefRange, "model %q: no profile", m.Name)
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

// profile builds a profile from its block: the defaults, then each field
// the block gives, checked.
func (d *decoder) profile(rp *profileHCL) Profile {
	p := Profile{
		Name: rp.Name, GPUs: 1, Nodes: 1, Pool: DefaultPool, Weight: 1,
		KeepWithin: LevelSite, Spread: DefaultSpread(), Pos: d.pos(rp.DefRange),
	}
	b := rp.Body
	set(d, b, "engine", rp.Engine, &p.Engine)
	if set(d, b, "gpu", rp.GPU, &p.GPU) && p.GPU == "" {
		r, _ := d.Given(b, "gpu")
		d.errorf(r, "gpu must name a GPU model")
	}
	d.intIn(b, "gpus", rp.GPUs, &p.GPUs, 1, maxCount)
	d.intIn(b, "nodes", rp.Nodes, &p.Nodes, 1, maxCount)
	d.watts(b, "watts", rp.Watts, &p.Watts, true)
	if d.watts(b, "min_watts", rp.MinWatts, &p.MinWatts, true) {
		if msg := p.minWattsProblem(); msg != "" {
			r, _ := d.Given(b, "min_watts")
			d.errorf(r, "%s", msg)
			p.MinWatts = 0 // reported here; keep Validate quiet about it
		}
	}
	d.intIn(b, "cpu_cores", rp.CPUCores, &p.CPUCores, 0, maxCPU)
	d.intIn(b, "memory_gb", rp.MemoryGB, &p.MemoryGB, 0, maxMemGB)
	if !d.level(b, "keep_within", rp.KeepWithin, &p.KeepWithin) {
		if !d.Has(b, "keep_within") && p.Nodes > 1 {
			d.errorf(rp.DefRange, "profile %q: keep_within is required when nodes > 1", p.Name)
		}
	}
	if r, ok := d.Given(b, "spread"); ok {
		p.Spread = make([]Level, 0, len(rp.Spread))
		for _, s := range rp.Spread {
			l, err := ParseLevel(s)
			if err != nil {
				d.errorf(r, "spread: %v", err)
				continue
			}
			p.Spread = append(p.Spread, l)
		}
	}
	d.value(b, "fabric", rp.Fabric, &p.Fabric)
	d.value(b, "pool", rp.Pool, &p.Pool)
	set(d, b, "args", rp.Args, &p.Args)
	d.argsCheck(b, rp, &p)
	set(d, b, "env", rp.Env, &p.Env)
	p.EnvFromVariable = d.envFromVariables(p, rp)
	set(d, b, "ready", rp.Ready, &p.Ready)
	d.intIn(b, "weight", rp.Weight, &p.Weight, 0, math.MaxInt32)
	d.intIn(b, "tensor_parallel", rp.TensorParallel, &p.TensorParallel, 1, maxCount)
	d.intIn(b, "pipeline_parallel", rp.PipelineParallel, &p.PipelineParallel, 1, maxCount)
	d.intIn(b, "data_parallel", rp.DataParallel, &p.DataParallel, 1, maxCount)
	d.intIn(b, "expert_parallel", rp.ExpertParallel, &p.ExpertParallel, 1, maxCount)
	return p
}

// argsCheck reads engine_version and check_args: a version string, and
// neither on an engine llmgw has no contract for (command), whose args
// nothing could check.
func (d *decoder) argsCheck(b hcl.Body, rp *profileHCL, p *Profile) {
	noContract := func(field string) bool {
		if desc, ok := engine.Lookup(p.Engine); ok && desc.Pinned.Version == "" {
			r, _ := d.Given(b, field)
			d.errorf(r, "%s: engine %q has no contract to check args against (llmgw passes them as given); remove %s", field, p.Engine, field)
			return true
		}
		return false
	}
	if r, ok := d.Given(b, "engine_version"); ok && !noContract("engine_version") {
		if err := CheckEngineVersion(rp.EngineVersion); err != nil {
			d.errorf(r, "engine_version: %v", err)
		} else {
			p.EngineVersion = rp.EngineVersion
		}
	}
	if _, ok := d.Given(b, "check_args"); ok && !noContract("check_args") {
		p.SkipArgsCheck = !rp.CheckArgs
	}
}

// engineVersion is a release version: numbers separated by dots, with an
// optional leading v and an optional suffix (0.11.0, v3.3.7, 0.10.1.1,
// 0.12.0rc1, 0.9.2+cu128), or a llama.cpp build tag (b6500).
var engineVersion = regexp.MustCompile(`^(v?[0-9]+(\.[0-9]+)+|b[0-9]+)([-+.]?[0-9A-Za-z]+([-+.][0-9A-Za-z]+)*)?$`)

// CheckEngineVersion checks a profile's engine_version.
func CheckEngineVersion(v string) error {
	if !engineVersion.MatchString(v) {
		return fmt.Errorf("%q is not a version: want the engine's release, numbers and dots such as \"0.11.0\" or \"v3.3.7\" (llama.cpp: a build tag such as \"b6500\")", v)
	}
	return nil
}

// envFromVariables checks a profile's env_from_variable blocks: a valid
// variable name, given once and not in env too; a Variable path Nomad
// accepts and a task may read; an item key. They come back sorted by
// name.
func (d *decoder) envFromVariables(p Profile, rp *profileHCL) []VariableEnv {
	var out []VariableEnv
	first := map[string]Pos{}
	for _, rv := range rp.EnvFromVariable {
		v := VariableEnv{Name: rv.Name, Variable: rv.Variable, Key: rv.Key, Pos: d.pos(rv.DefRange)}
		ok := true
		bad := func(r hcl.Range, format string, args ...any) {
			d.errorf(r, "profile %q: env_from_variable %q: %s", p.Name, rv.Name, fmt.Sprintf(format, args...))
			ok = false
		}
		if !envNameRE.MatchString(v.Name) {
			bad(rv.NameRange, "not an environment variable name (letters, digits and _, not starting with a digit)")
		}
		if at, dup := first[v.Name]; dup {
			bad(rv.NameRange, "given twice (first at %s)", at)
		}
		first[v.Name] = v.Pos
		if _, inEnv := p.Env[v.Name]; inEnv {
			r, _ := d.Given(rp.Body, "env")
			bad(rv.NameRange, "%s is in env too (line %d): give it one source", v.Name, r.Start.Line)
		}
		// An attribute not given was reported by hcldecode.
		if r, given := d.Given(rv.Body, "variable"); !given {
			ok = false
		} else if err := CheckVariablePath(v.Variable); err != nil {
			bad(r, "variable: %v", err)
		}
		if r, given := d.Given(rv.Body, "key"); !given {
			ok = false
		} else if !itemKeyRE.MatchString(v.Key) {
			bad(r, "key: %q is not an item key (letters, digits, _, - and .)", v.Key)
		}
		if ok {
			out = append(out, v)
		}
	}
	slices.SortFunc(out, func(a, b VariableEnv) int { return strings.Compare(a.Name, b.Name) })
	return out
}

var (
	envNameRE   = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	itemKeyRE   = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,128}$`)
	varPathRE   = regexp.MustCompile(`^[A-Za-z0-9_~-]+(/[A-Za-z0-9_~-]+)*$`)
	maxVarPath  = 128
	varReserved = "nomad/"
)

// CheckVariablePath reports whether path is a Nomad Variable path a
// task's template may name: letters, digits, '-', '_' and '~' in
// segments between single slashes, at most 128 characters, and under
// nomad/ only nomad/jobs and below (Nomad keeps the rest of nomad/ for
// itself).
func CheckVariablePath(path string) error {
	switch {
	case path == "":
		return errors.New("empty: name a Nomad Variable path, such as nomad/jobs or llmgw/secrets/hf")
	case len(path) > maxVarPath:
		return fmt.Errorf("%q is longer than %d characters", path, maxVarPath)
	case !varPathRE.MatchString(path):
		return fmt.Errorf("%q is not a Nomad Variable path (letters, digits, '-', '_' and '~' between single slashes, no leading or trailing slash)", path)
	case strings.HasPrefix(path+"/", varReserved) && path != "nomad/jobs" && !strings.HasPrefix(path, "nomad/jobs/"):
		return fmt.Errorf("%q: Nomad keeps nomad/ for itself except nomad/jobs and below", path)
	}
	return nil
}

// duration checks a duration attribute ("30s", "10m"): lo ≤ v ≤ hi.
func (d *decoder) duration(body hcl.Body, name, v string, dst *time.Duration, lo, hi time.Duration) bool {
	r, ok := d.Given(body, name)
	if !ok {
		return false
	}
	dur, err := hcldecode.ParseDuration(name, v)
	if err != nil {
		d.errorf(r, "%v", err)
		return false
	}
	if err := checkDuration(name, dur, lo, hi); err != nil {
		d.errorf(r, "%v", err)
		return false
	}
	*dst = dur
	return true
}

// autoscale builds a model's policy from its autoscale block: the
// defaults, then each field given, checked, each problem at its line.
func (d *decoder) autoscale(ra *autoscaleHCL) Autoscale {
	a := DefaultAutoscale()
	a.Pos = d.pos(ra.DefRange)
	b := ra.Body
	at := func(name string) hcl.Range { r, _ := d.Given(b, name); return r }
	okMin := d.intIn(b, "min", ra.Min, &a.Min, 0, maxCount)
	okMax := d.intIn(b, "max", ra.Max, &a.Max, 1, maxCount)
	if okMax && (okMin || !d.Has(b, "min")) && a.Min > a.Max {
		r := at("min")
		if !okMin {
			r = at("max")
		}
		d.errorf(r, "autoscale: min (%d) is above max (%d)", a.Min, a.Max)
	}
	d.target(ra, &a)
	okUp := d.duration(b, "up_window", ra.UpWindow, &a.UpWindow, minUpWindow, maxUpWindow)
	okDown := d.duration(b, "down_window", ra.DownWindow, &a.DownWindow, minDownWindow, maxDownWindow)
	if (okUp || !d.Has(b, "up_window")) && (okDown || !d.Has(b, "down_window")) && a.DownWindow < a.UpWindow {
		r := at("down_window")
		if !okDown {
			r = at("up_window")
		}
		d.errorf(r, "autoscale: down_window (%s) is shorter than up_window (%s)", fmtDuration(a.DownWindow), fmtDuration(a.UpWindow))
	}
	d.intIn(b, "max_step", ra.MaxStep, &a.MaxStep, 1, maxCount)
	if r, ok := d.Given(b, "panic_threshold"); ok {
		if err := checkPanic(ra.PanicThreshold); err != nil {
			d.errorf(r, "%v", err)
		} else {
			a.PanicThreshold = ra.PanicThreshold
		}
	}
	if r, ok := d.Given(b, "idle_after"); ok {
		if a.Min > 0 {
			d.errorf(r, "autoscale: idle_after is only for min = 0 (scale to zero); min is %d", a.Min)
		} else if d.duration(b, "idle_after", ra.IdleAfter, &a.IdleAfter, minDownWindow, maxIdleAfter) && a.IdleAfter < a.DownWindow {
			d.errorf(r, "autoscale: idle_after (%s) is shorter than down_window (%s): a model goes to zero no sooner than down_window after its last scale up",
				fmtDuration(a.IdleAfter), fmtDuration(a.DownWindow))
		}
	} else {
		a.IdleAfter = max(a.IdleAfter, a.DownWindow)
	}
	if r, ok := d.Given(b, "when_idle"); ok {
		switch {
		case ra.WhenIdle != IdleStop && ra.WhenIdle != IdleSleep:
			d.errorf(r, "autoscale: when_idle %q: want %q (stop every replica) or %q (keep one whose engine sleeps)", ra.WhenIdle, IdleStop, IdleSleep)
		case a.Min > 0:
			d.errorf(r, "autoscale: when_idle is only for min = 0 (what an idle model comes to); min is %d", a.Min)
		default:
			a.WhenIdle = ra.WhenIdle
		}
	}
	return a
}

// target reads an autoscale block's target block: exactly one kind.
func (d *decoder) target(ra *autoscaleHCL, a *Autoscale) {
	rt := ra.Target
	if rt == nil {
		d.errorf(ra.DefRange, "autoscale: a target block is required, with one of %s", targetNameList)
		return
	}
	b := rt.Body
	var given []TargetKind
	for _, k := range TargetKinds() {
		if d.Has(b, k.String()) {
			given = append(given, k)
		}
	}
	switch len(given) {
	case 0:
		d.errorf(rt.DefRange, "autoscale: target needs one of %s", targetNameList)
		return
	case 1:
	default:
		d.errorf(rt.DefRange, "autoscale: target gives %s and %s: give one", given[0], given[1])
		return
	}
	k := given[0]
	r, ok := d.Given(b, k.String())
	if !ok {
		return // its value did not decode: reported
	}
	t := Target{Kind: k}
	switch k {
	case TargetOutstanding:
		t.Value = rt.Outstanding
	case TargetWaiting:
		t.Value = rt.Waiting
	case TargetKVCache:
		t.Value = rt.KVCache
	case TargetTTFT:
		dur, err := time.ParseDuration(rt.TTFT)
		if err != nil {
			d.errorf(r, "ttft_p90: %q is not a duration (such as \"800ms\")", rt.TTFT)
			return
		}
		t.Value = dur.Seconds()
	}
	if err := t.check(); err != nil {
		d.errorf(r, "autoscale: %v", err)
		return
	}
	a.Target = t
}
