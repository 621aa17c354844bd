package hcldecode

import (
	"fmt"
	"reflect"
	"slices"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/gohcl"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/gocty"
)

// This file decodes a body into a struct with gohcl tags as
// gohcl.DecodeBody does, field for field, but derives each struct type's
// schema and field layout once a file (gohcl derives them again for every block:
// in a fleet of 12,800 nodes that was most of gohcl's time, docs/perf.md).
// The schema is gohcl's own (gohcl.ImpliedBodySchema), the bodies are read
// with the body's Content, and every value is converted with
// gohcl.DecodeExpression; what is ours is the walk over the fields, and
// the filing of each diagnostic against the attribute it belongs to.

var (
	bodyType  = reflect.TypeFor[hcl.Body]()
	exprType  = reflect.TypeFor[hcl.Expression]()
	attrType  = reflect.TypeFor[*hcl.Attribute]()
	attrsType = reflect.TypeFor[hcl.Attributes]()
)

// layout is what decoding needs to know of a struct type with gohcl tags.
type layout struct {
	schema  *hcl.BodySchema
	partial bool // a remain field takes what the schema does not
	attrs   []attrField
	blocks  []blockField
	labels  []labelField // in the order of the block's labels
	// Field indexes, -1 for none.
	body, remain, defRange, typeRange int
}

type attrField struct {
	name  string
	index int
	// Fields taking the attribute's ranges, -1 for none.
	rng, nameRng, valueRng int
	target
}

// target is what an attribute's value goes into.
type target struct {
	// keep: the field is an hcl.Expression or *hcl.Attribute, set as given.
	keep bool
	// ty is the cty type gohcl converts the value to (gocty.ImpliedType),
	// cty.NilType when there is none.
	ty cty.Type
}

func targetOf(t reflect.Type) target {
	if attrType.AssignableTo(t) || exprType.AssignableTo(t) {
		return target{keep: true}
	}
	ty, err := gocty.ImpliedType(reflect.New(t).Interface())
	if err != nil {
		return target{ty: cty.NilType} // gohcl.DecodeExpression will say why
	}
	return target{ty: ty}
}

type blockField struct {
	typ        string
	index      int
	slice, ptr bool
	elem       reflect.Type // the block's struct (or map) type
}

type labelField struct {
	name       string
	index, rng int
}

// layoutOf returns t's layout, deriving it on the decode's first use of
// t. gohcl derives the schema, and panics on a tag it does not know, as
// DecodeBody would.
func (d *decoder) layoutOf(t reflect.Type) *layout {
	if l, ok := d.layouts[t]; ok {
		return l
	}
	schema, partial := gohcl.ImpliedBodySchema(reflect.New(t).Interface())
	l := &layout{schema: schema, partial: partial, body: -1, remain: -1, defRange: -1, typeRange: -1}
	ranges := map[string]map[string]int{}
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("hcl")
		if tag == "" {
			continue
		}
		name, kind, ok := strings.Cut(tag, ",")
		if !ok {
			kind = "attr"
		}
		switch kind {
		case "attr", "optional":
			l.attrs = append(l.attrs, attrField{name: name, index: i, target: targetOf(f.Type)})
		case "block":
			bf := blockField{typ: name, index: i, elem: f.Type}
			if bf.elem.Kind() == reflect.Slice {
				bf.slice, bf.elem = true, bf.elem.Elem()
			}
			if bf.elem.Kind() == reflect.Pointer {
				bf.ptr, bf.elem = true, bf.elem.Elem()
			}
			l.blocks = append(l.blocks, bf)
		case "label":
			l.labels = append(l.labels, labelField{name: name, index: i, rng: -1})
		case "body":
			l.body = i
		case "remain":
			l.remain = i
		case "def_range":
			l.defRange = i
		case "type_range":
			l.typeRange = i
		default: // label_range, attr_range, attr_name_range, attr_value_range
			if ranges[kind] == nil {
				ranges[kind] = map[string]int{}
			}
			ranges[kind][name] = i
		}
	}
	index := func(kind, name string) int {
		if i, ok := ranges[kind][name]; ok {
			return i
		}
		return -1
	}
	for i := range l.attrs {
		a := &l.attrs[i]
		a.rng, a.nameRng, a.valueRng = index("attr_range", a.name), index("attr_name_range", a.name), index("attr_value_range", a.name)
	}
	for i := range l.labels {
		l.labels[i].rng = index("label_range", l.labels[i].name)
	}
	if d.layouts == nil {
		d.layouts = map[reflect.Type]*layout{}
	}
	d.layouts[t] = l
	return l
}

// body is what a struct's `hcl:",body"` field holds after Decode: the
// body, with the attributes the schema took from it and those whose value
// had a problem, for Has and Given.
type body struct {
	hcl.Body
	attrs hcl.Attributes
	bad   map[string]bool
}

// found is a problem at a place in the file, before sorting.
type found struct {
	at  hcl.Pos
	msg string
}

// decoder is one Decode's walk.
type decoder struct {
	ctx     *hcl.EvalContext
	layouts map[reflect.Type]*layout // each struct type's, once derived
	found   []found
}

// diagnostics files the errors of diags, each at the start of its subject,
// and each once (a JSON body that is not an object says so twice).
func (d *decoder) diagnostics(diags hcl.Diagnostics) {
	first := len(d.found)
	for _, g := range diags {
		if g.Severity != hcl.DiagError {
			continue
		}
		at := hcl.Pos{Line: 1}
		if g.Subject != nil {
			at = g.Subject.Start
		}
		p := found{at, message(g)}
		if !slices.Contains(d.found[first:], p) {
			d.found = append(d.found, p)
		}
	}
}

// value decodes b into v, a struct with gohcl tags or a map.
func (d *decoder) value(b hcl.Body, v reflect.Value) {
	if v.Kind() == reflect.Map {
		d.toMap(b, v)
		return
	}
	l := d.layoutOf(v.Type())
	var (
		content *hcl.BodyContent
		rest    hcl.Body
		diags   hcl.Diagnostics
	)
	if l.partial {
		content, rest, diags = b.PartialContent(l.schema)
	} else {
		content, diags = b.Content(l.schema)
	}
	d.diagnostics(diags)
	if content == nil {
		return
	}
	var given *body
	if l.body >= 0 {
		fv := v.Field(l.body)
		if bodyType.AssignableTo(fv.Type()) {
			given = &body{Body: b, attrs: content.Attributes}
			fv.Set(reflect.ValueOf(given))
		} else {
			d.value(b, fv)
		}
	}
	if l.remain >= 0 {
		fv := v.Field(l.remain)
		switch {
		case bodyType.AssignableTo(fv.Type()):
			fv.Set(reflect.ValueOf(rest))
		case attrsType.AssignableTo(fv.Type()):
			attrs, diags := rest.JustAttributes()
			d.diagnostics(diags)
			fv.Set(reflect.ValueOf(attrs))
		default:
			d.value(rest, fv)
		}
	}
	for _, af := range l.attrs {
		fv := v.Field(af.index)
		a := content.Attributes[af.name]
		if a == nil {
			if exprType.AssignableTo(fv.Type()) {
				// As gohcl: an expression that is null, where the attribute
				// would be.
				fv.Set(reflect.ValueOf(hcl.StaticExpr(cty.NullVal(cty.DynamicPseudoType), b.MissingItemRange())))
			}
			continue
		}
		if af.rng >= 0 {
			v.Field(af.rng).Set(reflect.ValueOf(a.Range))
		}
		if af.nameRng >= 0 {
			v.Field(af.nameRng).Set(reflect.ValueOf(a.NameRange))
		}
		if af.valueRng >= 0 {
			v.Field(af.valueRng).Set(reflect.ValueOf(a.Expr.Range()))
		}
		if !d.attribute(a, fv, af.target) && given != nil {
			if given.bad == nil {
				given.bad = map[string]bool{}
			}
			given.bad[af.name] = true
		}
	}
	d.blocks(l, content.Blocks, b, v)
}

// attribute decodes a into fv and reports whether it did cleanly. It files
// at most one problem, at the attribute's start, naming it: "must not be
// null" before any other.
func (d *decoder) attribute(a *hcl.Attribute, fv reflect.Value, t target) bool {
	keep := t.keep
	var (
		val   cty.Value
		diags hcl.Diagnostics
	)
	// A literal knows its value, and a string template is never null (a
	// null inside one is an error): most attributes of a file need no
	// evaluation to tell they are not null.
	switch e := a.Expr.(type) {
	case *hclsyntax.LiteralValueExpr:
		val = e.Val
	case *hclsyntax.TemplateExpr:
		if keep {
			return setExpr(a, fv)
		}
		val, diags = e.Value(d.ctx)
	default:
		val, diags = e.Value(d.ctx)
	}
	if !diags.HasErrors() && val.IsNull() {
		d.found = append(d.found, found{a.Range.Start, a.Name + ": must not be null"})
		return false
	}
	if n := longest(val); n > MaxItems {
		// Converting a long list costs time that grows with the square
		// of its length (cty's element unification): refused first.
		d.found = append(d.found, found{a.Range.Start, fmt.Sprintf("%s: a list or map of %d items; at most %d (llmgw's limit on one value)", a.Name, n, MaxItems)})
		return false
	}
	if keep {
		// Kept as given, for the caller to evaluate: a problem evaluating
		// it here is not one.
		return setExpr(a, fv)
	}
	if !diags.HasErrors() {
		// The value is converted as gohcl converts an expression's: to the
		// field's cty type (nothing to convert when it has it already),
		// then into the field with gocty. gohcl.DecodeExpression does the
		// conversion, and says what is wrong, when there is one to do or
		// it fails.
		if t.ty == cty.NilType || !val.Type().Equals(t.ty) || gocty.FromCtyValue(val, fv.Addr().Interface()) != nil {
			diags = gohcl.DecodeExpression(hcl.StaticExpr(val, a.Expr.Range()), d.ctx, fv.Addr().Interface())
		}
	}
	for _, g := range diags {
		if g.Severity == hcl.DiagError {
			d.found = append(d.found, found{a.Range.Start, a.Name + ": " + message(g)})
			return false
		}
	}
	return true
}

// setExpr sets fv, an *hcl.Attribute or an hcl.Expression, from a.
func setExpr(a *hcl.Attribute, fv reflect.Value) bool {
	if attrType.AssignableTo(fv.Type()) {
		fv.Set(reflect.ValueOf(a))
	} else {
		fv.Set(reflect.ValueOf(a.Expr))
	}
	return true
}

// toMap decodes every attribute of b into the map v.
func (d *decoder) toMap(b hcl.Body, v reflect.Value) {
	attrs, diags := b.JustAttributes()
	d.diagnostics(diags)
	m := reflect.MakeMapWithSize(v.Type(), len(attrs))
	t := targetOf(v.Type().Elem())
	for name, a := range attrs {
		ev := reflect.New(v.Type().Elem()).Elem()
		if d.attribute(a, ev, t) {
			m.SetMapIndex(reflect.ValueOf(name), ev)
		}
	}
	v.Set(m)
}

// blocks decodes the blocks of a body into v's block fields.
func (d *decoder) blocks(l *layout, all hcl.Blocks, b hcl.Body, v reflect.Value) {
	for _, bf := range l.blocks {
		var blocks hcl.Blocks
		for _, blk := range all {
			if blk.Type == bf.typ {
				blocks = append(blocks, blk)
			}
		}
		fv := v.Field(bf.index)
		switch {
		case len(blocks) > 1 && !bf.slice:
			// gohcl's words, so that the message is the one it gave.
			d.found = append(d.found, found{blocks[1].DefRange.Start,
				"Duplicate " + bf.typ + " block: Only one " + bf.typ + " block is allowed. Another was defined at " + blocks[0].DefRange.String() + "."})
		case len(blocks) == 0 && !bf.slice && !bf.ptr:
			d.found = append(d.found, found{b.MissingItemRange().Start,
				"Missing " + bf.typ + " block: A " + bf.typ + " block is required."})
		case len(blocks) == 0:
			fv.SetZero()
		case bf.slice:
			et := bf.elem
			if bf.ptr {
				et = reflect.PointerTo(et)
			}
			s := reflect.MakeSlice(reflect.SliceOf(et), len(blocks), len(blocks))
			for i, blk := range blocks {
				ev := s.Index(i)
				if bf.ptr {
					ev.Set(reflect.New(bf.elem))
					ev = ev.Elem()
				}
				d.block(blk, ev)
			}
			fv.Set(s)
		case bf.ptr:
			pv := reflect.New(bf.elem)
			d.block(blocks[0], pv.Elem())
			fv.Set(pv)
		default:
			d.block(blocks[0], fv)
		}
	}
}

// block decodes blk into v: its body, labels and ranges.
func (d *decoder) block(blk *hcl.Block, v reflect.Value) {
	d.value(blk.Body, v)
	if v.Kind() != reflect.Struct {
		return
	}
	l := d.layoutOf(v.Type())
	for i, lv := range blk.Labels {
		if i >= len(l.labels) {
			break // Content has refused the block
		}
		v.Field(l.labels[i].index).SetString(lv)
		if r := l.labels[i].rng; r >= 0 {
			v.Field(r).Set(reflect.ValueOf(blk.LabelRanges[i]))
		}
	}
	if l.typeRange >= 0 {
		v.Field(l.typeRange).Set(reflect.ValueOf(blk.TypeRange))
	}
	if l.defRange >= 0 {
		v.Field(l.defRange).Set(reflect.ValueOf(blk.DefRange))
	}
}

// MaxItems is the most items one list, set, tuple, map or object value of
// a file may have.
const MaxItems = 4096

// longest is the most items of any collection in v (v itself or one
// nested in it); 0 for a value that is none, unknown or null. Files nest
// at most bounded.MaxDepth levels, so the recursion is bounded.
func longest(v cty.Value) int {
	if !v.IsKnown() || v.IsNull() {
		return 0
	}
	ty := v.Type()
	if !ty.IsListType() && !ty.IsSetType() && !ty.IsTupleType() && !ty.IsMapType() && !ty.IsObjectType() {
		return 0
	}
	n := v.LengthInt()
	if n > MaxItems {
		return n
	}
	for it := v.ElementIterator(); it.Next(); {
		_, e := it.Element()
		n = max(n, longest(e))
		if n > MaxItems {
			return n
		}
	}
	return n
}
