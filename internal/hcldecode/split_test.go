package hcldecode

import (
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// splitSrc has thing blocks in one array, problems in some of them, and
// properties before and after the array.
const splitSrc = `{
  "name": "before",
  "thing": [
    {"a": {"on": true}},
    {"b": {"on": "maybe"}},
    {"c": {}},
    {"d": {
      "on": false,
      "off": 1
    }},
    {"e": {"on": null}}, {"f": {"on": true}}
  ],
  "count": "x",
  "tags": ["t"]
}
`

// TestSplitJSONDecodesAsWhole: decoding the parts of a file gives the
// blocks, values, lines and problems that decoding the file whole gives,
// for every number of parts.
func TestSplitJSONDecodesAsWhole(t *testing.T) {
	t.Parallel()
	var whole testFile
	wf, ok := Decode("t.json", []byte(splitSrc), nil, &whole)
	if !ok {
		t.Fatalf("whole: %v", wf.Problems())
	}
	wantProblems := []string{
		"t.json:5: on: Unsuitable value type: a bool is required",
		`t.json:9: Extraneous JSON object property: No argument or block type is named "off".`,
		"t.json:11: on: must not be null",
		"t.json:13: count: Unsuitable value type: a number is required",
	}
	if diff := cmp.Diff(wantProblems, msgs(wf)); diff != "" {
		t.Fatalf("whole file's problems (-want +got):\n%s", diff)
	}
	type thing struct {
		Label string
		On    bool
		Line  int
	}
	things := func(v testFile) []thing {
		var out []thing
		for _, th := range v.Things {
			r := th.Body.MissingItemRange()
			out = append(out, thing{th.Label, th.On, r.Start.Line})
		}
		return out
	}
	for n := 2; n <= 8; n++ {
		parts, ok := SplitJSON([]byte(splitSrc), "thing", n)
		if !ok {
			t.Fatalf("n=%d: not split", n)
		}
		if len(parts) < 2 || len(parts) > n+1 {
			t.Errorf("n=%d: %d parts", n, len(parts))
		}
		var (
			got      testFile
			problems []string
		)
		for i, p := range parts {
			var v testFile
			f, ok := DecodePart("t.json", p, nil, &v)
			if !ok {
				t.Fatalf("n=%d part %d does not parse: %v\n%s", n, i, f.Problems(), p.Src)
			}
			if i == 0 {
				got = v
			} else {
				if v.Name != "" || v.Count != 0 || v.Tags != nil {
					t.Errorf("n=%d part %d has the rest's attributes", n, i)
				}
				got.Things = append(got.Things, v.Things...)
			}
			problems = append(problems, msgs(f)...)
		}
		if diff := cmp.Diff(things(whole), things(got)); diff != "" {
			t.Errorf("n=%d blocks (-whole +parts):\n%s", n, diff)
		}
		if got.Name != whole.Name || !cmp.Equal(got.Tags, whole.Tags) {
			t.Errorf("n=%d: rest %q %v, want %q %v", n, got.Name, got.Tags, whole.Name, whole.Tags)
		}
		// Each part's problems are the whole's at the same lines; the
		// rest's (line 13) come first, being the first part.
		if diff := cmp.Diff(wantProblems, problems, cmpopts.SortSlices(func(a, b string) bool { return a < b })); diff != "" {
			t.Errorf("n=%d problems (-whole +parts):\n%s", n, diff)
		}
	}
}

// TestSplitJSONDeclines: a file not of the shape is not split; decoding it
// whole reports what is wrong with it.
func TestSplitJSONDeclines(t *testing.T) {
	t.Parallel()
	for name, src := range map[string]string{
		"not JSON":           `thing "a" {}`,
		"broken":             `{"thing": [{"a": {}}, {"b": {}`,
		"an array":           `[{"thing": [{"a": {}}, {"b": {}}]}]`,
		"no such property":   `{"name": "x"}`,
		"an object":          `{"thing": {"a": {}, "b": {}}}`,
		"one element":        `{"thing": [{"a": {}}]}`,
		"property twice":     `{"thing": [{"a": {}}, {"b": {}}], "thing": [{"c": {}}, {"d": {}}]}`,
		"after the object":   `{"thing": [{"a": {}}, {"b": {}}]} {}`,
		"a key not a string": `{1: 2}`,
	} {
		if parts, ok := SplitJSON([]byte(src), "thing", 4); ok {
			t.Errorf("%s: split into %d parts", name, len(parts))
		}
	}
	if _, ok := SplitJSON([]byte(splitSrc), "thing", 1); ok {
		t.Error("n=1: split")
	}
}

// TestSplitJSONLines: a run starting mid-line keeps its lines; the parts
// of a file with CRLF line ends name the same lines as the whole.
func TestSplitJSONLines(t *testing.T) {
	t.Parallel()
	src := strings.ReplaceAll(splitSrc, "\n", "\r\n")
	parts, ok := SplitJSON([]byte(src), "thing", 8)
	if !ok {
		t.Fatal("not split")
	}
	var lines []int
	for _, p := range parts[1:] {
		var v testFile
		if f, ok := DecodePart("t.json", p, nil, &v); !ok {
			t.Fatalf("does not parse: %v", f.Problems())
		}
		for _, th := range v.Things {
			lines = append(lines, th.Body.MissingItemRange().Start.Line)
		}
		if p.Start.Byte < 0 || p.Start.Line < 1 {
			t.Errorf("part starts at %+v", p.Start)
		}
	}
	if want := []int{4, 5, 6, 10, 11, 11}; !cmp.Equal(want, lines) {
		t.Errorf("block end lines %v, want %v", lines, want)
	}
}

// TestSplitJSONRest: the rest parses and keeps the other properties
// wherever the array stands among them.
func TestSplitJSONRest(t *testing.T) {
	t.Parallel()
	for _, src := range []string{
		`{"thing": [{"a": {}}, {"b": {}}], "name": "x"}`,
		"{\n\"thing\": [{\"a\": {}},\n{\"b\": {}}]\n,\n\"name\": \"x\"}",
		`{"name": "x", "thing": [{"a": {}}, {"b": {}}]}`,
		`{"name": "x", "thing": [{"a": {}}, {"b": {}}], "count": 2}`,
		`{"thing": [{"a": {}}, {"b": {}}]}`,
	} {
		parts, ok := SplitJSON([]byte(src), "thing", 2)
		if !ok {
			t.Fatalf("%s: not split", src)
		}
		var whole, rest testFile
		Decode("t.json", []byte(src), nil, &whole)
		if f, ok := DecodePart("t.json", parts[0], nil, &rest); !ok || len(f.Problems()) > 0 {
			t.Errorf("%s: rest %q: %v", src, parts[0].Src, f.Problems())
		}
		if rest.Name != whole.Name || rest.Count != whole.Count || len(rest.Things) != 0 {
			t.Errorf("%s: rest decodes to %+v", src, rest)
		}
	}
}

// TestSplitNative: the parts of a native file, cut before lines that begin
// with a thing block, decode to the whole's blocks and problems at the
// whole's lines; a cut inside a comment leaves the part before it
// unparseable.
func TestSplitNative(t *testing.T) {
	t.Parallel()
	src := "name = \"x\"\nthing \"a\" {\n  on = true\n}\n# between\nthing \"b\" {\n  on = \"maybe\"\n}\nthing \"c\" {}\nthings = 1\n"
	var whole testFile
	wf, _ := Decode("t.hcl", []byte(src), nil, &whole)
	parts, ok := SplitNative([]byte(src), "thing", 8)
	if !ok || len(parts) != 3 {
		t.Fatalf("split: %d parts, ok %v", len(parts), ok)
	}
	var labels, problems []string
	for _, p := range parts {
		var v testFile
		f, ok := DecodePart("t.hcl", p, nil, &v)
		if !ok {
			t.Fatalf("part at line %d does not parse: %v", p.Start.Line, f.Problems())
		}
		for _, th := range v.Things {
			labels = append(labels, fmt.Sprintf("%s@%d", th.Label, th.Body.MissingItemRange().Start.Line))
		}
		problems = append(problems, msgs(f)...)
	}
	var want []string
	for _, th := range whole.Things {
		want = append(want, fmt.Sprintf("%s@%d", th.Label, th.Body.MissingItemRange().Start.Line))
	}
	if !cmp.Equal(want, labels) || !cmp.Equal(msgs(wf), problems) {
		t.Errorf("parts: %v %v; whole: %v %v", labels, problems, want, msgs(wf))
	}
	trap := "thing \"a\" {}\n/*\nthing \"b\" {}\n*/\nthing \"c\" {}\n"
	parts, _ = SplitNative([]byte(trap), "thing", 8)
	var v testFile
	if _, ok := DecodePart("t.hcl", parts[0], nil, &v); ok {
		t.Errorf("the part ending inside a comment parsed: %q", parts[0].Src)
	}
	if _, ok := SplitNative([]byte("thing \"a\" {}\n  thing \"b\" {}\n"), "thing", 8); ok {
		t.Error("split at an indented line")
	}
}
