// Package hclspec builds the HCL schema messages a Nomad plugin returns from
// ConfigSchema and TaskConfigSchema, and converts them into hcldec specs, so
// that the plugin (decoding what Nomad sends) and the plugintest harness
// (encoding what Nomad would send) evaluate configuration exactly as the
// Nomad client does.
//
// A schema is a tree of Spec values: Object at the top, Attr and
// RequiredAttr for attributes with an HCL type expression ("string",
// "number", "bool", "list(string)", "map(string)", "any"), Default with a
// Literal for defaults, Block, BlockList, BlockMap and BlockAttrs for nested
// blocks. The client evaluates a `config {}` block against it and sends the
// value as cty msgpack; Decode turns those bytes into a Go struct with
// `codec:"name"` field tags, and EncodeHCL produces them from HCL source, as
// the client would.
package hclspec

import (
	"fmt"
	"sort"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/ext/typeexpr"
	"github.com/hashicorp/hcl/v2/hcldec"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"

	pb "github.com/llmgw/llmgw/nomadplugin/pb/hclspecpb"
)

// Spec is the wire message for one schema node (hclspecpb.Spec); build it
// with the functions below.
type Spec = pb.Spec

// Object groups named specs into one object.
func Object(attrs map[string]*Spec) *Spec {
	return &Spec{Block: &pb.Spec_Object{Object: &pb.Object{Attributes: attrs}}}
}

// Attr is an optional attribute of the given HCL type expression
// (for example "string", "list(number)", "map(string)").
func Attr(name, typ string) *Spec {
	return &Spec{Block: &pb.Spec_Attr{Attr: &pb.Attr{Name: name, Type: typ}}}
}

// RequiredAttr is an attribute that must be set.
func RequiredAttr(name, typ string) *Spec {
	return &Spec{Block: &pb.Spec_Attr{Attr: &pb.Attr{Name: name, Type: typ, Required: true}}}
}

// Default uses def when primary evaluates to null.
func Default(primary, def *Spec) *Spec {
	return &Spec{Block: &pb.Spec_Default{Default: &pb.Default{Primary: primary, Default: def}}}
}

// Literal is a constant HCL expression, such as `"1m"`, `true` or `[13, 31]`.
func Literal(expr string) *Spec {
	return &Spec{Block: &pb.Spec_Literal{Literal: &pb.Literal{Value: expr}}}
}

// Block is a single nested block, decoded as an object (null when absent).
func Block(name string, required bool, nested *Spec) *Spec {
	return &Spec{Block: &pb.Spec_BlockValue{BlockValue: &pb.Block{Name: name, Required: required, Nested: nested}}}
}

// BlockAttrs is a block whose body is a map of attributes of one type.
func BlockAttrs(name, elemType string, required bool) *Spec {
	return &Spec{Block: &pb.Spec_BlockAttrs{BlockAttrs: &pb.BlockAttrs{Name: name, Type: elemType, Required: required}}}
}

// BlockList is a repeated nested block decoded as a list. max 0 means no limit.
func BlockList(name string, minItems, maxItems uint64, nested *Spec) *Spec {
	return &Spec{Block: &pb.Spec_BlockList{BlockList: &pb.BlockList{Name: name, MinItems: minItems, MaxItems: maxItems, Nested: nested}}}
}

// BlockMap is a labelled repeated block decoded as a map keyed by its labels.
func BlockMap(name string, labels []string, nested *Spec) *Spec {
	return &Spec{Block: &pb.Spec_BlockMap{BlockMap: &pb.BlockMap{Name: name, Labels: labels, Nested: nested}}}
}

// Array groups specs into one tuple.
func Array(values ...*Spec) *Spec {
	return &Spec{Block: &pb.Spec_Array{Array: &pb.Array{Values: values}}}
}

// ToHCLDec converts a wire schema into the hcldec spec the Nomad client
// builds from it.
func ToHCLDec(s *Spec) (hcldec.Spec, error) {
	if s == nil {
		return nil, fmt.Errorf("hclspec: nil spec")
	}
	switch b := s.GetBlock().(type) {
	case *pb.Spec_Object:
		out := hcldec.ObjectSpec{}
		keys := make([]string, 0, len(b.Object.GetAttributes()))
		for k := range b.Object.GetAttributes() {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			c, err := ToHCLDec(b.Object.GetAttributes()[k])
			if err != nil {
				return nil, fmt.Errorf("%s: %w", k, err)
			}
			out[k] = c
		}
		return out, nil
	case *pb.Spec_Array:
		out := hcldec.TupleSpec{}
		for i, v := range b.Array.GetValues() {
			c, err := ToHCLDec(v)
			if err != nil {
				return nil, fmt.Errorf("[%d]: %w", i, err)
			}
			out = append(out, c)
		}
		return out, nil
	case *pb.Spec_Attr:
		ty, err := parseType(b.Attr.GetType())
		if err != nil {
			return nil, fmt.Errorf("attribute %q: %w", b.Attr.GetName(), err)
		}
		return &hcldec.AttrSpec{Name: b.Attr.GetName(), Type: ty, Required: b.Attr.GetRequired()}, nil
	case *pb.Spec_BlockValue:
		nested, err := ToHCLDec(b.BlockValue.GetNested())
		if err != nil {
			return nil, fmt.Errorf("block %q: %w", b.BlockValue.GetName(), err)
		}
		return &hcldec.BlockSpec{TypeName: b.BlockValue.GetName(), Nested: nested, Required: b.BlockValue.GetRequired()}, nil
	case *pb.Spec_BlockAttrs:
		ty, err := parseType(b.BlockAttrs.GetType())
		if err != nil {
			return nil, fmt.Errorf("block %q: %w", b.BlockAttrs.GetName(), err)
		}
		return &hcldec.BlockAttrsSpec{TypeName: b.BlockAttrs.GetName(), ElementType: ty, Required: b.BlockAttrs.GetRequired()}, nil
	case *pb.Spec_BlockList:
		nested, err := ToHCLDec(b.BlockList.GetNested())
		if err != nil {
			return nil, fmt.Errorf("block %q: %w", b.BlockList.GetName(), err)
		}
		return &hcldec.BlockListSpec{TypeName: b.BlockList.GetName(), Nested: nested,
			MinItems: int(b.BlockList.GetMinItems()), MaxItems: int(b.BlockList.GetMaxItems())}, nil
	case *pb.Spec_BlockSet:
		nested, err := ToHCLDec(b.BlockSet.GetNested())
		if err != nil {
			return nil, fmt.Errorf("block %q: %w", b.BlockSet.GetName(), err)
		}
		return &hcldec.BlockSetSpec{TypeName: b.BlockSet.GetName(), Nested: nested,
			MinItems: int(b.BlockSet.GetMinItems()), MaxItems: int(b.BlockSet.GetMaxItems())}, nil
	case *pb.Spec_BlockMap:
		nested, err := ToHCLDec(b.BlockMap.GetNested())
		if err != nil {
			return nil, fmt.Errorf("block %q: %w", b.BlockMap.GetName(), err)
		}
		return &hcldec.BlockMapSpec{TypeName: b.BlockMap.GetName(), LabelNames: b.BlockMap.GetLabels(), Nested: nested}, nil
	case *pb.Spec_Default:
		primary, err := ToHCLDec(b.Default.GetPrimary())
		if err != nil {
			return nil, fmt.Errorf("default primary: %w", err)
		}
		def, err := ToHCLDec(b.Default.GetDefault())
		if err != nil {
			return nil, fmt.Errorf("default value: %w", err)
		}
		return &hcldec.DefaultSpec{Primary: primary, Default: def}, nil
	case *pb.Spec_Literal:
		expr, diags := hclsyntax.ParseExpression([]byte(b.Literal.GetValue()), "literal", hcl.InitialPos)
		if diags.HasErrors() {
			return nil, fmt.Errorf("literal %q: %s", b.Literal.GetValue(), diags.Error())
		}
		v, diags := expr.Value(nil)
		if diags.HasErrors() {
			return nil, fmt.Errorf("literal %q: %s", b.Literal.GetValue(), diags.Error())
		}
		return &hcldec.LiteralSpec{Value: v}, nil
	default:
		return nil, fmt.Errorf("hclspec: empty or unknown spec variant %T", b)
	}
}

func parseType(s string) (ty cty.Type, err error) {
	expr, diags := hclsyntax.ParseExpression([]byte(s), "type", hcl.InitialPos)
	if diags.HasErrors() {
		return ty, fmt.Errorf("type %q: %s", s, diags.Error())
	}
	ty, diags = typeexpr.TypeConstraint(expr)
	if diags.HasErrors() {
		return ty, fmt.Errorf("type %q: %s", s, diags.Error())
	}
	return ty, nil
}
