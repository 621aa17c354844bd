package hcldecode

import (
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/hashicorp/hcl/v2"
	"github.com/zclconf/go-cty/cty/function"
)

type testFile struct {
	Name   string            `hcl:"name,optional"`
	Count  int               `hcl:"count,optional"`
	Tags   []string          `hcl:"tags,optional"`
	Env    map[string]string `hcl:"env,optional"`
	Inner  *testInner        `hcl:"inner,block"`
	Things []testThing       `hcl:"thing,block"`
	Body   hcl.Body          `hcl:",body"`
}

type testInner struct {
	Size     float64   `hcl:"size"`
	DefRange hcl.Range `hcl:",def_range"`
	Body     hcl.Body  `hcl:",body"`
}

type testThing struct {
	Label string   `hcl:"label,label"`
	On    bool     `hcl:"on,optional"`
	Body  hcl.Body `hcl:",body"`
}

func decode(t *testing.T, src string) (*File, testFile) {
	t.Helper()
	ctx := &hcl.EvalContext{Functions: map[string]function.Function{
		"env": EnvFunc(func(k string) string { return map[string]string{"A": "from-env"}[k] }),
	}}
	var v testFile
	f, _ := Decode("t.hcl", []byte(src), ctx, &v)
	return f, v
}

func msgs(f *File) []string {
	var out []string
	for _, p := range f.Problems() {
		out = append(out, p.String())
	}
	return out
}

func TestDecode(t *testing.T) {
	t.Parallel()
	f, v := decode(t, `
name  = env("A")
count = 3
tags  = ["a", "b"]
inner {
  size = 1.5
}
thing "x" { on = true }
thing "y" {}
`)
	if p := msgs(f); len(p) != 0 {
		t.Fatalf("problems: %q", p)
	}
	if v.Name != "from-env" || v.Count != 3 || !cmp.Equal(v.Tags, []string{"a", "b"}) || v.Inner == nil || v.Inner.Size != 1.5 ||
		len(v.Things) != 2 || v.Things[0].Label != "x" || !v.Things[0].On || v.Things[1].On {
		t.Errorf("decoded %+v", v)
	}
	if r, ok := f.Given(v.Body, "count"); !ok || r.Start.Line != 3 {
		t.Errorf("Given(count) = %v, %v; want line 3", r, ok)
	}
	if _, ok := f.Given(v.Body, "env"); ok || f.Has(v.Body, "env") {
		t.Error("env is not in the file")
	}
	if v.Inner.DefRange.Start.Line != 5 {
		t.Errorf("inner at %v, want line 5", v.Inner.DefRange)
	}
	if _, ok := f.Given(v.Things[0].Body, "on"); !ok {
		t.Error("thing x: on not given")
	}
	if f.Has(nil, "x") {
		t.Error("a nil body has an attribute")
	}
	f.Errorf(v.Inner.DefRange, "inner: %s", "too small")
	if diff := cmp.Diff([]string{"t.hcl:5: inner: too small"}, msgs(f)); diff != "" {
		t.Error(diff)
	}
}

func TestDecodeProblems(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name, src string
		want      []string
		notGiven  []string // attributes Given must report absent
	}{
		{"syntax", "name = \n", []string{"t.hcl:1: Invalid expression: Expected the start of an expression, but found an invalid expression token."}, nil},
		{"type, named", "\ncount = \"many\"\n", []string{"t.hcl:2: count: Unsuitable value type: a number is required"}, []string{"count"}},
		{"fraction", "count = 1.5\n", []string{"t.hcl:1: count: Unsuitable value type: value must be a whole number, between -9223372036854775808 and 9223372036854775807"}, []string{"count"}},
		{"null scalar", "name = null\n", []string{"t.hcl:1: name: must not be null"}, []string{"name"}},
		{"null from a template", "name = \"${null}\"\n", []string{"t.hcl:1: name: must not be null"}, []string{"name"}},
		{"null from an expression", "name = true ? null : \"x\"\n", []string{"t.hcl:1: name: must not be null"}, []string{"name"}},
		{"null in a string", "name = \"a${null}\"\n", []string{"t.hcl:1: name: Invalid template interpolation value: The expression result is null. Cannot include a null value in a string template."}, []string{"name"}},
		{"null list", "tags = null\n", []string{"t.hcl:1: tags: must not be null"}, []string{"tags"}},
		{"null map", "env = null\n", []string{"t.hcl:1: env: must not be null"}, []string{"env"}},
		{"null in a block", "inner {\n  size = null\n}\n", []string{"t.hcl:2: size: must not be null"}, nil},
		{"unknown, with a hint", "nme = \"x\"\n", []string{`t.hcl:1: Unsupported argument: An argument named "nme" is not expected here. Did you mean "name"?`}, nil},
		{"unknown block, with a hint", "iner {}\n", []string{`t.hcl:1: Unsupported block type: Blocks of type "iner" are not expected here. Did you mean "inner"?`}, nil},
		{"unknown block's contents are not looked at", "other {\n  x = null\n}\n", []string{`t.hcl:1: Unsupported block type: Blocks of type "other" are not expected here.`}, nil},
		{"required", "inner {\n}\n", []string{`t.hcl:1: Missing required argument: The argument "size" is required, but no definition was found.`}, nil},
		{"label missing", "thing {}\n", []string{`t.hcl:1: Missing label for thing: All thing blocks must have 1 labels (label).`}, nil},
		{"block twice", "inner {\n  size = 1\n}\ninner {\n  size = 2\n}\n", []string{"t.hcl:4: Duplicate inner block: Only one inner block is allowed. Another was defined at t.hcl:1,1-6."}, nil},
		{"function unknown, one problem", "name = nope(1)\n", []string{`t.hcl:1: name: Call to unknown function: There is no function named "nope".`}, []string{"name"}},
		{"in file order", "tags = 1\nname = null\ncount = \"x\"\nbad = 1\n", []string{
			"t.hcl:1: tags: Unsuitable value type: list of string required, but have number",
			"t.hcl:2: name: must not be null",
			"t.hcl:3: count: Unsuitable value type: a number is required",
			`t.hcl:4: Unsupported argument: An argument named "bad" is not expected here.`,
		}, []string{"tags", "name", "count"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f, v := decode(t, tt.src)
			if diff := cmp.Diff(tt.want, msgs(f)); diff != "" {
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

func TestProblemNamesTheFile(t *testing.T) {
	t.Parallel()
	var v testFile
	f, ok := Decode("dir/t.hcl", []byte("count = {"), nil, &v)
	if ok {
		t.Fatal("a file that does not parse decoded")
	}
	for _, p := range f.Problems() {
		if p.Filename != "dir/t.hcl" || p.Line < 1 || !strings.HasPrefix(p.String(), "dir/t.hcl:1: ") {
			t.Errorf("problem %+v", p)
		}
	}
	if len(f.Problems()) == 0 {
		t.Error("no problem")
	}
}

// A file nested past bounded.MaxDepth is a problem at its file:line, in
// either syntax, before HCL's recursive parsers see it: 200 KB of brackets
// overflowed their stack (a fatal error in Go) before the check.
func TestDecodeRefusesDeepNesting(t *testing.T) {
	t.Parallel()
	type doc struct {
		A any `hcl:"a,optional"`
	}
	deep := strings.Repeat("[", 200_000)
	for _, tc := range []struct{ name, src, want string }{
		{"c.hcl", "b = 1\na = " + deep, "c.hcl:2: nested deeper than 64 levels"},
		{"c.json", "{\n\"a\": " + deep, "c.json:2: nested deeper than 64 levels"},
	} {
		var d doc
		f, ok := Decode(tc.name, []byte(tc.src), nil, &d)
		if ok {
			t.Fatalf("%s: decoded", tc.name)
		}
		ps := f.Problems()
		if len(ps) != 1 || !strings.HasPrefix(ps[0].String(), tc.want) {
			t.Fatalf("%s: problems %v, want %q", tc.name, ps, tc.want)
		}
	}
}

// A list or map past MaxItems, at the top of an attribute or nested in it,
// is a problem at its line, before it is converted (cty's conversion of a
// long list takes time that grows with the square of its length).
func TestDecodeRefusesLongLists(t *testing.T) {
	t.Parallel()
	type doc struct {
		X    int                 `hcl:"x,optional"`
		Args []string            `hcl:"args,optional"`
		Env  map[string]string   `hcl:"env,optional"`
		Deep map[string][]string `hcl:"deep,optional"`
	}
	items := func(n int, f string) string {
		var b strings.Builder
		for i := range n {
			fmt.Fprintf(&b, f, i)
		}
		return b.String()
	}
	for _, tc := range []struct{ name, src, want string }{
		{"list", "x = 1\nargs = [" + items(MaxItems+1, `"a%d",`) + "]\n", "c.hcl:2: args: a list or map of 4097 items; at most 4096"},
		{"map", "env = {" + items(MaxItems+1, "a%d = \"1\",") + "}\n", "c.hcl:1: env: a list or map of 4097 items; at most 4096"},
		{"nested", "deep = { a = [" + items(MaxItems+1, `"a%d",`) + "] }\n", "c.hcl:1: deep: a list or map of 4097 items; at most 4096"},
		{"JSON", `{"args": [` + items(MaxItems, `"a%d",`) + `"z"]}`, "c.json:1: args: a list or map of 4097 items; at most 4096"},
	} {
		name := "c.hcl"
		if tc.name == "JSON" {
			name = "c.json"
		}
		var d doc
		f, ok := Decode(name, []byte(tc.src), nil, &d)
		if !ok {
			t.Fatalf("%s: did not parse: %v", tc.name, f.Problems())
		}
		ps := f.Problems()
		if len(ps) != 1 || ps[0].String() != tc.want+" (llmgw's limit on one value)" {
			t.Errorf("%s: problems %v, want %q", tc.name, ps, tc.want)
		}
	}
	var d doc
	if f, ok := Decode("c.hcl", []byte("args = ["+items(MaxItems, `"a%d",`)+"]\n"), nil, &d); !ok || len(f.Problems()) != 0 || len(d.Args) != MaxItems {
		t.Fatalf("%d items: %v, %d decoded", MaxItems, f.Problems(), len(d.Args))
	}
}
