package hclspec

import (
	"fmt"
	"math/big"
	"reflect"
	"sort"
	"time"

	"github.com/go-viper/mapstructure/v2"
	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hcldec"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
	ctymsgpack "github.com/zclconf/go-cty/cty/msgpack"
)

// EncodeHCL evaluates an HCL body (the inside of a `config {}` block) against
// spec, applying the spec's defaults, and encodes the result as cty msgpack:
// what a Nomad client sends in SetConfig or TaskConfig.msgpack_driver_config.
// vars, when non-nil, are available for interpolation as Nomad makes the
// task's environment available.
func EncodeHCL(spec *Spec, filename string, src []byte, vars map[string]cty.Value) ([]byte, error) {
	ds, err := ToHCLDec(spec)
	if err != nil {
		return nil, err
	}
	f, diags := hclsyntax.ParseConfig(src, filename, hcl.InitialPos)
	if diags.HasErrors() {
		return nil, diags
	}
	var ctx *hcl.EvalContext
	if vars != nil {
		ctx = &hcl.EvalContext{Variables: vars}
	}
	val, diags := hcldec.Decode(f.Body, ds, ctx)
	if diags.HasErrors() {
		return nil, diags
	}
	return ctymsgpack.Marshal(val, hcldec.ImpliedType(ds))
}

// Decode decodes cty-msgpack configuration encoded against spec into out, a
// pointer to a struct whose fields carry `codec:"name"` tags. Attributes the
// struct does not know, numbers that do not fit the field, and bad durations
// (fields of type time.Duration take Go duration strings such as "1m") are
// errors that name the attribute.
func Decode(spec *Spec, data []byte, out any) error {
	ds, err := ToHCLDec(spec)
	if err != nil {
		return err
	}
	val, err := ctymsgpack.Unmarshal(data, hcldec.ImpliedType(ds))
	if err != nil {
		return fmt.Errorf("decode msgpack config: %w", err)
	}
	return DecodeValue(val, out)
}

// DecodeValue decodes a cty value into out, as Decode does.
func DecodeValue(val cty.Value, out any) error {
	generic, err := toGo(val, "")
	if err != nil {
		return err
	}
	if generic == nil {
		return nil
	}
	dec, err := mapstructure.NewDecoder(&mapstructure.DecoderConfig{
		TagName:     "codec",
		ErrorUnused: true,
		Result:      out,
		DecodeHook: mapstructure.ComposeDecodeHookFunc(
			durationHook,
			exactIntHook,
		),
	})
	if err != nil {
		return err
	}
	return dec.Decode(generic)
}

// toGo turns a cty value into nil, string, bool, int64, float64, []any or
// map[string]any.
func toGo(v cty.Value, path string) (any, error) {
	if v.IsNull() {
		return nil, nil
	}
	if !v.IsKnown() {
		return nil, fmt.Errorf("%s: value is not known", orRoot(path))
	}
	ty := v.Type()
	switch {
	case ty == cty.String:
		return v.AsString(), nil
	case ty == cty.Bool:
		return v.True(), nil
	case ty == cty.Number:
		bf := v.AsBigFloat()
		if bf.IsInt() {
			if i, acc := bf.Int64(); acc == big.Exact {
				return i, nil
			}
		}
		f, _ := bf.Float64()
		return f, nil
	case ty.IsListType() || ty.IsSetType() || ty.IsTupleType():
		out := make([]any, 0, v.LengthInt())
		i := 0
		for it := v.ElementIterator(); it.Next(); i++ {
			_, ev := it.Element()
			g, err := toGo(ev, fmt.Sprintf("%s[%d]", path, i))
			if err != nil {
				return nil, err
			}
			out = append(out, g)
		}
		return out, nil
	case ty.IsMapType() || ty.IsObjectType():
		out := make(map[string]any, v.LengthInt())
		for it := v.ElementIterator(); it.Next(); {
			k, ev := it.Element()
			name := k.AsString()
			g, err := toGo(ev, joinPath(path, name))
			if err != nil {
				return nil, err
			}
			if g == nil && ty.IsObjectType() {
				continue // absent optional attribute: leave the field's zero value
			}
			out[name] = g
		}
		return out, nil
	case ty == cty.DynamicPseudoType:
		return nil, fmt.Errorf("%s: dynamic value without a type", orRoot(path))
	default:
		return nil, fmt.Errorf("%s: unsupported type %s", orRoot(path), ty.FriendlyName())
	}
}

func joinPath(p, k string) string {
	if p == "" {
		return k
	}
	return p + "." + k
}

func orRoot(p string) string {
	if p == "" {
		return "config"
	}
	return p
}

var durationType = reflect.TypeOf(time.Duration(0))

func durationHook(from, to reflect.Type, data any) (any, error) {
	if to != durationType {
		return data, nil
	}
	s, ok := data.(string)
	if !ok {
		return nil, fmt.Errorf("want a duration string such as \"1m\", got %v", data)
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return nil, fmt.Errorf("bad duration %q: %w", s, err)
	}
	if d < 0 {
		return nil, fmt.Errorf("negative duration %q", s)
	}
	return d, nil
}

// exactIntHook refuses fractional numbers for integer fields, which
// mapstructure would otherwise truncate.
func exactIntHook(from, to reflect.Type, data any) (any, error) {
	f, ok := data.(float64)
	if !ok {
		return data, nil
	}
	switch to.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return nil, fmt.Errorf("want a whole number, got %v", f)
	}
	return data, nil
}

// SortedKeys returns a map's keys in order; a small helper for stable output.
func SortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
