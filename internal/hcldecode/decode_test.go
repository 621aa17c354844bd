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
