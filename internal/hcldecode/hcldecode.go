// Package hcldecode is the one way llmgw reads its own HCL files: the
// controller's configuration (controller/config), the catalog, facility and
// fleet (facility), and the gateway's configuration (cmd/llmgw/internal/cli/gatewaycmd).
//
// A file's schema is a Go struct with gohcl tags
// (github.com/hashicorp/hcl/v2/gohcl): an attribute is a field tagged
// `hcl:"name,optional"` (or `hcl:"name"` when required), a block a field
// tagged `hcl:"name,block"` (a pointer for an optional block, a slice for a
// repeated one), a block label `hcl:"name,label"`. Every struct that needs
// to know which attributes were given, or where, carries its body in a field
// tagged `hcl:",body"`; a block struct may carry its header's range in a
// field tagged `hcl:",def_range"`. Decode parses and decodes in one step,
// as gohcl.DecodeBody would but deriving each struct type's schema once
// (decode.go); what gohcl cannot say (durations, enums, ranges, defaults,
// one field against another) is checked after it, in Go, with Given and
// Errorf. A file whose name ends in ".json" is read in HCL's JSON syntax
// into the same structs, with the same problems at its own lines.
//
// Decode keeps every problem at its file:line and names the attribute a bad
// value belongs to ("priority: Unsuitable value type: a number is
// required"). A name the schema does not have is refused by HCL itself,
// with a "Did you mean" hint when one is near. A null value is refused
// ("NAME: must not be null"), whatever the attribute's type, so that null
// never stands for "not set". Each attribute gets one problem at most: its
// first.
//
// The package is pure: it reads no files and no environment (EnvFunc takes
// the lookup as a function).
package hcldecode

import (
	"cmp"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	hcljson "github.com/hashicorp/hcl/v2/json"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/function"

	"github.com/llmgw/llmgw/internal/bounded"
)

// Problem is one problem with a file, at a place in it. It is the one
// file:line error of llmgw's readers (the controller's configuration, the
// catalog, facility and fleet, the gateway's configuration and key files):
// each returns one *Problem per problem, joined with errors.Join.
type Problem struct {
	Filename string
	// Line is at least 1 for a problem in the file; 0 for one about the
	// file but from elsewhere (the environment, a value built in code).
	Line int
	Msg  string
}

// String is "file:line: msg", "file: msg" without a line, and msg alone
// without a file.
func (p Problem) String() string {
	switch {
	case p.Filename == "" && p.Line == 0:
		return p.Msg
	case p.Line == 0:
		return p.Filename + ": " + p.Msg
	}
	return fmt.Sprintf("%s:%d: %s", p.Filename, p.Line, p.Msg)
}

func (p *Problem) Error() string { return p.String() }

// File is a decoded file and the problems found in it so far.
type File struct {
	filename string
	problems []Problem
}

// Decode parses src as the file filename and decodes it into val, a
// pointer to a struct with gohcl tags, evaluating expressions in ctx (nil:
// constants only, no functions). A filename ending in ".json" is read in
// HCL's JSON syntax (github.com/hashicorp/hcl/v2/json: an object per body,
// a block as an object property keyed by its labels), any other in the
// native syntax; both decode into the same structs, with the same
// problems. ok is false when the file does not parse, and val is then
// untouched; otherwise val holds what decoded cleanly, and the File the
// problems of what did not.
func Decode(filename string, src []byte, ctx *hcl.EvalContext, val any) (f *File, ok bool) {
	return DecodePart(filename, Whole(src), ctx, val)
}

// DecodePart is Decode for a part of the file filename (SplitJSON): its
// problems name the file's lines.
func DecodePart(filename string, part Part, ctx *hcl.EvalContext, val any) (f *File, ok bool) {
	f = &File{filename: filename}
	if err := checkBounds(filename, part); err != nil {
		line := 0
		var le *bounded.LimitError
		var ee *bounded.EncodingError
		switch {
		case errors.As(err, &le):
			line = le.Line
		case errors.As(err, &ee):
			line = ee.Line
		}
		f.problems = append(f.problems, Problem{Filename: filename, Line: line, Msg: err.Error()})
		return f, false
	}
	var (
		file  *hcl.File
		diags hcl.Diagnostics
	)
	if IsJSON(filename) {
		file, diags = hcljson.ParseWithStartPos(part.Src, filename, part.Start)
	} else {
		file, diags = hclsyntax.ParseConfig(part.Src, filename, part.Start)
	}
	if diags.HasErrors() || file == nil {
		f.diagnostics(diags)
		return f, false
	}
	d := decoder{ctx: ctx}
	d.value(file.Body, reflect.ValueOf(val).Elem())
	slices.SortStableFunc(d.found, func(a, b found) int { return cmp.Compare(a.at.Byte, b.at.Byte) })
	for _, p := range d.found {
		f.problems = append(f.problems, Problem{Filename: filename, Line: max(p.at.Line, 1), Msg: p.msg})
	}
	return f, true
}

// checkBounds refuses a part larger than bounded.MaxFileBytes, not valid
// UTF-8, or nested deeper than bounded.MaxDepth, before HCL's recursive
// parsers see it.
func checkBounds(filename string, part Part) error {
	if len(part.Src) > bounded.MaxFileBytes {
		return &bounded.LimitError{Limit: "size", Max: bounded.MaxFileBytes}
	}
	if err := bounded.UTF8(part.Src, part.Start); err != nil {
		return err
	}
	if IsJSON(filename) {
		return bounded.JSONDepth(part.Src, bounded.MaxDepth)
	}
	return bounded.HCLDepth(part.Src, part.Start, bounded.MaxDepth)
}

// IsJSON reports whether Decode reads filename in HCL's JSON syntax: its
// name ends in ".json" (fleet.json, fleet.hcl.json).
func IsJSON(filename string) bool { return strings.HasSuffix(filename, ".json") }

// diagnostics adds the errors of diags, each at the start of its subject.
func (f *File) diagnostics(diags hcl.Diagnostics) {
	for _, d := range diags {
		if d.Severity == hcl.DiagError {
			f.problems = append(f.problems, f.problem(d.Subject, message(d)))
		}
	}
}

func message(d *hcl.Diagnostic) string {
	detail := d.Detail
	if d.Summary == "Unsuitable value type" {
		// gohcl's detail repeats its summary.
		detail = strings.TrimPrefix(detail, "Unsuitable value: ")
	}
	if detail == "" {
		return d.Summary
	}
	return d.Summary + ": " + detail
}

func (f *File) problem(r *hcl.Range, msg string) Problem {
	p := Problem{Filename: f.filename, Line: 1, Msg: msg}
	if r != nil {
		if r.Filename != "" {
			p.Filename = r.Filename
		}
		p.Line = max(r.Start.Line, 1)
	}
	return p
}

// attribute returns attribute name of b, nil when it has none (or b is
// not from Decode: nil, for a block not given), and whether its name or
// value had a problem.
func attribute(b hcl.Body, name string) (a *hcl.Attribute, bad bool) {
	db, _ := b.(*body)
	if db == nil {
		return nil, false
	}
	return db.attrs[name], db.bad[name]
}

// Has reports whether body (a decoded struct's `hcl:",body"` field) has
// attribute name, whatever its value.
func (f *File) Has(body hcl.Body, name string) bool {
	a, _ := attribute(body, name)
	return a != nil
}

// Given returns the range of attribute name of body (a decoded struct's
// `hcl:",body"` field) and true when the attribute is there and its value
// decoded cleanly: the struct's field holds it, for Go to check further.
func (f *File) Given(body hcl.Body, name string) (hcl.Range, bool) {
	a, bad := attribute(body, name)
	if a == nil || bad {
		return hcl.Range{}, false
	}
	return a.Range, true
}

// Missing is the range to report something absent from body at: where
// body starts (the file's first line for the file's own body, or for a
// block not given).
func Missing(body hcl.Body) hcl.Range {
	if body == nil {
		return hcl.Range{}
	}
	return body.MissingItemRange()
}

// Errorf adds a problem at r.
func (f *File) Errorf(r hcl.Range, format string, args ...any) {
	f.problems = append(f.problems, f.problem(&r, fmt.Sprintf(format, args...)))
}

// ParseDuration reads s, the value of the duration attribute name
// ("30s", "10m"), with the one message every reader gives for a value
// that is not one; the caller puts it at the attribute's line.
func ParseDuration(name, s string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%s: %q is not a duration (such as \"30s\", \"10m\")", name, s)
	}
	return d, nil
}

// Problems returns every problem so far, in the order found: those of
// decoding in the order of the file, then those added with Errorf.
func (f *File) Problems() []Problem { return slices.Clone(f.problems) }

// EnvFunc is env("NAME") in a file: the variable's value from lookup, ""
// when unset.
func EnvFunc(lookup func(string) string) function.Function {
	return function.New(&function.Spec{
		Params: []function.Parameter{{Name: "name", Type: cty.String}},
		Type:   function.StaticReturnType(cty.String),
		Impl: func(args []cty.Value, _ cty.Type) (cty.Value, error) {
			return cty.StringVal(lookup(args[0].AsString())), nil
		},
	})
}
