package bounded

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	hcljson "github.com/hashicorp/hcl/v2/json"
)

func TestJSONDepth(t *testing.T) {
	for _, tc := range []struct {
		name string
		src  string
		max  int
		line int // 0: within the limit
	}{
		{"flat", `{"a": 1, "b": [1, 2]}`, 2, 0},
		{"exactly the limit", `[[[1]]]`, 3, 0},
		{"one past", `[[[[1]]]]`, 3, 1},
		{"brackets in strings do not count", `{"a": "[[[[[[{{{{", "b": "\"[[[["}`, 1, 0},
		{"escaped backslash ends before the quote", `{"a": "\\", "b": [[[1]]]}`, 3, 1},
		{"line of the level past", "{\n\"a\":\n[\n[1]]}", 2, 4},
		{"siblings do not add up", `[[1],[2],[3],[4]]`, 2, 0},
	} {
		err := JSONDepth([]byte(tc.src), tc.max)
		var le *LimitError
		switch {
		case tc.line == 0 && err != nil:
			t.Errorf("%s: %v, want nil", tc.name, err)
		case tc.line != 0 && !errors.As(err, &le):
			t.Errorf("%s: %v, want a *LimitError", tc.name, err)
		case tc.line != 0 && (le.Line != tc.line || le.Max != int64(tc.max) || le.Limit != "nesting depth"):
			t.Errorf("%s: %+v, want line %d max %d", tc.name, le, tc.line, tc.max)
		}
	}
}

func TestHCLDepth(t *testing.T) {
	deep := func(open, fill, closing string, n int) string {
		return "a = " + strings.Repeat(open, n) + fill + strings.Repeat(closing, n) + "\n"
	}
	for _, tc := range []struct {
		name string
		src  string
		over bool
	}{
		{"catalog-like", "model \"a\" {\n  engine = \"vllm\"\n  args = [\"--x\", \"${env(\\\"A\\\")}\"]\n  meta = { a = { b = [1] } }\n}\n", false},
		{"brackets at the limit", deep("[", "1", "]", MaxDepth), false},
		{"brackets past the limit", deep("[", "1", "]", MaxDepth+1), true},
		{"braces past", deep("{a=", "1", "}", MaxDepth+1), true},
		{"parentheses past", deep("(", "1", ")", MaxDepth+1), true},
		{"templates past", "a = " + strings.Repeat(`"${`, MaxDepth) + "1" + strings.Repeat(`}"`, MaxDepth) + "\n", true},
		{"unary operators past", "a = " + strings.Repeat("!", MaxDepth+1) + "true\n", true},
		{"minus past", "a = " + strings.Repeat("-", MaxDepth+1) + "1\n", true},
		{"conditionals past", "a = " + strings.Repeat("x ? 1 : ", MaxDepth+1) + "2\n", true},
		{"operators on separate lines do not add up", strings.Repeat("a = -1\n", 2*MaxDepth), false},
		{"list items do not add up", "a = [" + strings.Repeat("-1, ", 2*MaxDepth) + "]\n", false},
		{"if directives past", "a = \"" + strings.Repeat("%{ if x }", MaxDepth) + strings.Repeat("%{ endif }", MaxDepth) + "\"\n", true},
		{"for directives in a heredoc past", "a = <<-EOT\n" + strings.Repeat("%{~ for x in y ~}\n", MaxDepth) + strings.Repeat("%{ endfor }\n", MaxDepth) + "  EOT\n", true},
		{"closed directives do not add up", "a = \"" + strings.Repeat("%{ if x }a%{ else }b%{ endif }", 2*MaxDepth) + "\"\n", false},
		{"escaped sequences are text", "a = \"" + strings.Repeat("$${", 2*MaxDepth) + strings.Repeat("%%{", 2*MaxDepth) + "\"\n", false},
		{"brackets in strings, comments and heredocs are text", "# [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[\n" +
			"/* ((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((\n */\n" +
			"a = \"" + strings.Repeat("[", 2*MaxDepth) + "\\\"" + strings.Repeat("{", 2*MaxDepth) + "\"\n" +
			"b = <<EOT\n" + strings.Repeat("(", 2*MaxDepth) + "\nEOT\n" + "c = " + strings.Repeat("[", MaxDepth) + strings.Repeat("]", MaxDepth) + "\n", false},
		{"a heredoc's marker inside a line does not end it", "a = <<EOT\n EOTX ${" + strings.Repeat("[", MaxDepth) + "}\nEOT\n", true},
		{"hyphens in names count (more, never less)", "a = [" + strings.Repeat("a-", MaxDepth+1) + "b]\n", true},
		{"bracket after operators nests inside them", "a = " + strings.Repeat("!", MaxDepth/2) + strings.Repeat("(", MaxDepth/2+1) + "true" + strings.Repeat(")", MaxDepth/2+1) + "\n", true},
	} {
		err := HCLDepth([]byte(tc.src), hcl.InitialPos, MaxDepth)
		if got := err != nil; got != tc.over {
			t.Errorf("%s: HCLDepth = %v, want over %v", tc.name, err, tc.over)
		}
		if err != nil && !IsLimit(err) {
			t.Errorf("%s: %v is not a *LimitError", tc.name, err)
		}
	}
}

// What the checks let through, HCL's recursive parsers parse without
// running out of stack: the shapes that crashed the controller (issue 34),
// a few hundred kilobytes of nesting, are refused; the same shapes at the
// limit parse.
func TestDeepInputIsRefusedBeforeTheParser(t *testing.T) {
	huge := strings.Repeat("[", 200_000)
	if err := HCLDepth([]byte("a = "+huge), hcl.InitialPos, MaxDepth); !IsLimit(err) {
		t.Fatalf("200 KB of brackets: %v, want a depth limit", err)
	}
	if err := JSONDepth([]byte(`{"a":`+huge), MaxDepth); !IsLimit(err) {
		t.Fatalf("200 KB of JSON brackets: %v, want a depth limit", err)
	}
	// A template is two levels: its quote and its interpolation.
	atLimit := "a = " + strings.Repeat(`"${`, MaxDepth/4) + strings.Repeat("[", MaxDepth/2) + "1" + strings.Repeat("]", MaxDepth/2) + strings.Repeat(`}"`, MaxDepth/4) + "\n"
	if err := HCLDepth([]byte(atLimit), hcl.InitialPos, MaxDepth); err != nil {
		t.Fatalf("at the limit: %v", err)
	}
	if _, diags := hclsyntax.ParseConfig([]byte(atLimit), "c.hcl", hcl.InitialPos); diags.HasErrors() {
		t.Fatalf("at the limit: %v", diags)
	}
	js := `{"a":` + strings.Repeat("[", MaxDepth-1) + strings.Repeat("]", MaxDepth-1) + "}"
	if err := JSONDepth([]byte(js), MaxDepth); err != nil {
		t.Fatalf("JSON at the limit: %v", err)
	}
	if _, diags := hcljson.Parse([]byte(js), "c.json"); diags.HasErrors() {
		t.Fatalf("JSON at the limit: %v", diags)
	}
}

func TestReadAll(t *testing.T) {
	src := strings.Repeat("x", 101)
	if _, err := ReadAll(strings.NewReader(src), 100); !IsLimit(err) || !strings.Contains(err.Error(), "100 bytes") {
		t.Fatalf("101 bytes against 100: %v", err)
	}
	if b, err := ReadAll(strings.NewReader(src), 101); err != nil || len(b) != 101 {
		t.Fatalf("101 bytes against 101: %d, %v", len(b), err)
	}
	r := iotest.ErrReader(errors.New("boom"))
	if _, err := ReadAll(r, 100); err == nil || IsLimit(err) {
		t.Fatalf("failing reader: %v", err)
	}
}

// benchFleet is a fleet-like file of about 4 MB (the 12,800-node bench
// fleet is 3.8 MB).
func benchFleet() []byte {
	var b strings.Builder
	for i := 0; b.Len() < 4<<20; i++ {
		fmt.Fprintf(&b, "node \"n%05d\" {\n  site = \"s1\"\n  room = \"a\"\n  row = \"r%d\"\n  rack = \"k%d\"\n  pdu = \"p%d\"\n  gpu \"NVIDIA H200\" {\n    count = 8\n    power_limit = 700\n  }\n}\n", i, i%40, i%400, i%800)
	}
	return []byte(b.String())
}

// BenchmarkDepth: what the checks add to reading a 4 MB file, beside what
// HCL's parser takes for it.
func BenchmarkDepth(b *testing.B) {
	src := benchFleet()
	b.Run("HCLDepth", func(b *testing.B) {
		b.SetBytes(int64(len(src)))
		b.ReportAllocs()
		for b.Loop() {
			if err := HCLDepth(src, hcl.InitialPos, MaxDepth); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("ParseConfig", func(b *testing.B) {
		b.SetBytes(int64(len(src)))
		b.ReportAllocs()
		for b.Loop() {
			if _, diags := hclsyntax.ParseConfig(src, "f.hcl", hcl.InitialPos); diags.HasErrors() {
				b.Fatal(diags)
			}
		}
	})
	js := []byte(`{"node": [` + strings.Repeat(`{"name": "n1", "gpu": [{"count": 8, "power_limit": 700}], "rack": "k1"},`, 50_000) + `{}]}`)
	b.Run("JSONDepth", func(b *testing.B) {
		b.SetBytes(int64(len(js)))
		b.ReportAllocs()
		for b.Loop() {
			if err := JSONDepth(js, MaxDepth); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func TestUTF8(t *testing.T) {
	if err := UTF8([]byte("a = \"héllo\"\nb = 1\n"), hcl.InitialPos); err != nil {
		t.Fatalf("valid: %v", err)
	}
	err := UTF8([]byte("a = 1\nb = \"\xd6#\"\n"), hcl.Pos{Line: 10, Column: 1})
	var ee *EncodingError
	if !errors.As(err, &ee) || ee.Line != 11 {
		t.Fatalf("broken on the second line of a part at line 10: %v, want line 11", err)
	}
}

// The token counts are never below what HCL's lexer and Go's JSON decoder
// make of an input, and close to it.
func TestTokens(t *testing.T) {
	for _, src := range []string{
		"a = 1\nb = \"x ${y} z\"\nc = [1, 2, 3]\n",
		"model \"m\" {\n  # a comment\n  source = \"o/m\"\n  profile \"p\" { gpus = 8 }\n}\n",
		strings.Repeat("a=1\n", 1000),
		"a = <<EOT\nline ${x}\nEOT\n",
	} {
		toks, _ := hclsyntax.LexConfig([]byte(src), "t.hcl", hcl.InitialPos)
		lex := len(toks) - 1 // without the end of file
		if got := HCLTokens([]byte(src)); got < lex || got > 2*lex {
			t.Errorf("HCLTokens(%q) = %d, HCL's lexer makes %d", src, got, lex)
		}
	}
	for _, src := range []string{`{"a": [1, 2.5, true, null], "b": {"c": "d\\"e"}}`, `[` + strings.Repeat(`1,`, 999) + `1]`} {
		dec := json.NewDecoder(strings.NewReader(src))
		n := 0
		for {
			if _, err := dec.Token(); err != nil {
				break
			}
			n++
		}
		// Go's decoder does not return commas and colons as tokens.
		if got := JSONTokens([]byte(src)); got < n || got > 3*n {
			t.Errorf("JSONTokens(%q) = %d, Go's decoder reads %d", src, got, n)
		}
	}
}
