package hcldecode

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/gohcl"
	"github.com/hashicorp/hcl/v2/hclsyntax"
)

// Every kind of field gohcl decodes, for comparing Decode with
// gohcl.DecodeBody.
type allKinds struct {
	Name      string            `hcl:"name"`
	Count     *int              `hcl:"count,optional"`
	Expr      hcl.Expression    `hcl:"expr,optional"`
	Missing   hcl.Expression    `hcl:"missing,optional"`
	Attr      *hcl.Attribute    `hcl:"attr,optional"`
	Env       map[string]string `hcl:"env,optional"`
	NameRange hcl.Range         `hcl:"name,attr_range"`
	NameName  hcl.Range         `hcl:"name,attr_name_range"`
	NameValue hcl.Range         `hcl:"name,attr_value_range"`
	One       oneBlock          `hcl:"one,block"`
	Opt       *oneBlock         `hcl:"opt,block"`
	None      *oneBlock         `hcl:"none,block"`
	Many      []*manyBlock      `hcl:"many,block"`
	Vals      []manyBlock       `hcl:"val,block"`
	Rest      hcl.Body          `hcl:",remain"`
}

type oneBlock struct {
	Size      float64   `hcl:"size"`
	TypeRange hcl.Range `hcl:",type_range"`
	DefRange  hcl.Range `hcl:",def_range"`
}

type manyBlock struct {
	Kind      string    `hcl:"kind,label"`
	Name      string    `hcl:"name,label"`
	KindRange hcl.Range `hcl:"kind,label_range"`
	On        bool      `hcl:"on,optional"`
	List      []string  `hcl:"list,optional"`
	Inner     []struct {
		X int `hcl:"x"`
	} `hcl:"inner,block"`
}

const allKindsSrc = `
name  = "a"
count = 3
expr  = 1 + 2
attr  = "kept"
env   = { A = "1", B = "2" }
one {
  size = 1.5
}
opt { size = 2 }
many "k" "first" {
  on   = true
  list = ["x", "y"]
  inner { x = 1 }
  inner { x = 2 }
}
many "k" "second" {}
val "v" "w" { on = false }
other = "left for remain"
`

// TestDecodeAsGohcl decodes every kind of field as gohcl.DecodeBody does.
func TestDecodeAsGohcl(t *testing.T) {
	t.Parallel()
	var got, want allKinds
	f, ok := Decode("t.hcl", []byte(allKindsSrc), nil, &got)
	if !ok || len(f.Problems()) > 0 {
		t.Fatalf("Decode: %v", f.Problems())
	}
	file, diags := hclsyntax.ParseConfig([]byte(allKindsSrc), "t.hcl", hcl.InitialPos)
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	if diags := gohcl.DecodeBody(file.Body, nil, &want); diags.HasErrors() {
		t.Fatal(diags)
	}
	opts := cmp.Options{
		// Expressions and bodies compare by where they are.
		cmp.Transformer("expr", func(e hcl.Expression) hcl.Range { return e.Range() }),
		cmp.Transformer("body", func(b hcl.Body) hcl.Range { return b.MissingItemRange() }),
		cmpopts.IgnoreFields(hcl.Attribute{}, "Expr"),
	}
	if diff := cmp.Diff(want, got, opts); diff != "" {
		t.Errorf("Decode (-gohcl +Decode):\n%s", diff)
	}
	if *got.Count != 3 || got.One.Size != 1.5 || len(got.Many) != 2 || len(got.Many[0].Inner) != 2 || got.Vals[0].Name != "w" {
		t.Errorf("decoded %+v", got)
	}
	if v, _ := got.Expr.Value(nil); v.AsBigFloat().String() != "3" {
		t.Errorf("expr = %#v", v)
	}
	attrs, _ := got.Rest.JustAttributes()
	if attrs["other"] == nil || len(attrs) != 1 {
		t.Errorf("remain: %v", attrs)
	}
}

// allKindsSrc in HCL's JSON syntax.
const allKindsJSON = `{
  "name": "a",
  "count": 3,
  "expr": 3,
  "attr": "kept",
  "env": {"A": "1", "B": "2"},
  "one": {"size": 1.5},
  "opt": {"size": 2},
  "many": {"k": {
    "first": {"on": true, "list": ["x", "y"], "inner": [{"x": 1}, {"x": 2}]},
    "second": {}
  }},
  "val": {"v": {"w": {"on": false}}},
  "other": "left for remain"
}`

// TestDecodeJSON reads a file in HCL's JSON syntax into the same struct
// as the native one.
func TestDecodeJSON(t *testing.T) {
	t.Parallel()
	var native, got allKinds
	if f, ok := Decode("t.hcl", []byte(allKindsSrc), nil, &native); !ok || len(f.Problems()) > 0 {
		t.Fatalf("native: %v", f.Problems())
	}
	f, ok := Decode("t.hcl.json", []byte(allKindsJSON), nil, &got)
	if !ok || len(f.Problems()) > 0 {
		t.Fatalf("JSON: %v", f.Problems())
	}
	opts := cmp.Options{
		cmpopts.IgnoreTypes(hcl.Range{}, (*hcl.Attribute)(nil)),
		cmpopts.IgnoreInterfaces(struct{ hcl.Body }{}),
		cmp.Transformer("value", func(e hcl.Expression) string {
			v, diags := e.Value(nil)
			if diags.HasErrors() || v.IsNull() {
				return "null"
			}
			return v.GoString()
		}),
	}
	if diff := cmp.Diff(native, got, opts); diff != "" {
		t.Errorf("(-native +JSON):\n%s", diff)
	}
	if got.Many[1].KindRange.Start.Line != 9 || got.One.DefRange.Start.Line != 7 || got.NameRange.Start.Line != 2 {
		t.Errorf("JSON ranges: many[1] label %v, one %v, name %v", got.Many[1].KindRange, got.One.DefRange, got.NameRange)
	}
	if r, ok := f.Given(got.Rest, "other"); ok {
		t.Errorf("Given on the remain body: %v", r)
	}
}

// TestDecodeJSONProblems: a JSON file's problems name its file, line and
// the attribute, as a native file's do.
func TestDecodeJSONProblems(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name, src string
		want      []string
		notGiven  []string
	}{
		{"syntax", "{\n  \"name\": \n}", []string{"t.json:3: Missing JSON value: A JSON value must start with a brace, a bracket, a number, a string, or a keyword."}, nil},
		{"not an object", "[1]", []string{"t.json:1: Incorrect JSON value type: A JSON object is required here, to define arguments and child blocks."}, nil},
		{"type, named", "{\n  \"count\": \"many\"\n}", []string{"t.json:2: count: Unsuitable value type: a number is required"}, []string{"count"}},
		{"fraction", "{\"count\": 1.5}", []string{"t.json:1: count: Unsuitable value type: value must be a whole number, between -9223372036854775808 and 9223372036854775807"}, []string{"count"}},
		{"null", "{\n\"name\": null}", []string{"t.json:2: name: must not be null"}, []string{"name"}},
		{"null list", "{\"tags\": null}", []string{"t.json:1: tags: must not be null"}, []string{"tags"}},
		{"null in a block", "{\"inner\": {\n  \"size\": null\n}}", []string{"t.json:2: size: must not be null"}, nil},
		{"unknown, with a hint", "{\n\n\"nme\": \"x\"}", []string{`t.json:3: Extraneous JSON object property: No argument or block type is named "nme". Did you mean "name"?`}, nil},
		{"required", "{\"inner\": {\n}}", []string{`t.json:2: Missing required argument: The argument "size" is required, but no definition was found.`}, nil},
		{"label missing", "{\"thing\": {\"on\": true}}", []string{`t.json:1: Incorrect JSON value type: Either a JSON object or a JSON array is required, representing the contents of one or more "thing" blocks.`}, nil},
		{"block twice", "{\"inner\": [\n{\"size\": 1},\n{\"size\": 2}\n]}", []string{"t.json:1: Duplicate inner block: Only one inner block is allowed. Another was defined at t.json:1,11-12."}, nil},
		{"in file order", "{\n\"tags\": 1,\n\"name\": null,\n\"count\": \"x\",\n\"bad\": 1\n}", []string{
			"t.json:2: tags: Unsuitable value type: list of string required, but have number",
			"t.json:3: name: must not be null",
			"t.json:4: count: Unsuitable value type: a number is required",
			`t.json:5: Extraneous JSON object property: No argument or block type is named "bad".`,
		}, []string{"tags", "name", "count"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var v testFile
			f, _ := Decode("t.json", []byte(tt.src), nil, &v)
			if diff := cmp.Diff(tt.want, msgs(f), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("problems (-want +got):\n%s", diff)
			}
			for _, n := range tt.notGiven {
				if _, ok := f.Given(v.Body, n); ok {
					t.Errorf("Given(%s) after a problem with it", n)
				}
				if !f.Has(v.Body, n) {
					t.Errorf("Has(%s) = false, but the file has it", n)
				}
			}
		})
	}
}
