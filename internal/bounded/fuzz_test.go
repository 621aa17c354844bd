package bounded

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	hcljson "github.com/hashicorp/hcl/v2/json"
)

// nest builds an HCL expression from shape, one level per byte (bracket,
// brace, parenthesis, template, unary operator, conditional), repeated
// reps times; it returns the expression and its depth as HCLDepth counts it.
func nest(shape []byte, reps int) (string, int) {
	var open, closing strings.Builder
	depth := 0
	for r := 0; r < reps; r++ {
		for _, c := range shape {
			switch c % 6 {
			case 0:
				open.WriteString("[")
				closing.WriteString("]")
			case 1:
				open.WriteString("{a=")
				closing.WriteString("}")
			case 2:
				open.WriteString("(")
				closing.WriteString(")")
			case 3:
				open.WriteString(`"${`)
				closing.WriteString(`}"`)
				depth++ // the quote and the interpolation
			case 4:
				open.WriteString("!")
			case 5:
				open.WriteString("x ? 1 : ")
			}
			depth++
		}
	}
	// closing was written outside-in; reverse it.
	c := []rune(closing.String())
	for i, j := 0, len(c)-1; i < j; i, j = i+1, j-1 {
		c[i], c[j] = c[j], c[i]
	}
	return open.String() + "true" + string(c), depth
}

// FuzzHCLDepth: HCLDepth refuses exactly the nestings deeper than the
// limit, and HCL's parser parses what it lets through (a stack overflow
// would end the fuzzer: it is fatal in Go). The seeds include nestings of
// hundreds of thousands of levels.
func FuzzHCLDepth(f *testing.F) {
	f.Add([]byte{0}, 1)
	f.Add([]byte{0, 1, 2, 3, 4, 5}, 10)
	f.Add([]byte{3}, 40_000)
	f.Add([]byte{0}, 200_000)
	f.Add([]byte{4, 5}, 50_000)
	f.Fuzz(func(t *testing.T, shape []byte, reps int) {
		if len(shape) == 0 || reps <= 0 || len(shape)*reps > 400_000 {
			return
		}
		expr, depth := nest(shape, reps)
		src := "a = " + expr + "\n"
		err := HCLDepth([]byte(src), hcl.InitialPos, MaxDepth)
		if (depth > MaxDepth) != (err != nil) {
			t.Fatalf("depth %d: HCLDepth = %v", depth, err)
		}
		if err == nil {
			_, _ = hclsyntax.ParseConfig([]byte(src), "f.hcl", hcl.InitialPos)
		}
	})
}

// FuzzJSONDepth: JSONDepth never refuses a document json.Valid accepts at
// or under the limit, refuses every deeper one, and HCL's JSON parser
// parses what it lets through.
func FuzzJSONDepth(f *testing.F) {
	f.Add([]byte(`{"a": [1, {"b": "]]]"}]}`))
	f.Add([]byte(strings.Repeat("[", 300_000)))
	f.Add([]byte(`{"a":` + strings.Repeat(`{"a":`, 100) + "1" + strings.Repeat("}", 101)))
	f.Add([]byte(`"\\\"[[["`))
	f.Fuzz(func(t *testing.T, src []byte) {
		err := JSONDepth(src, MaxDepth)
		if err == nil {
			_, _ = hcljson.Parse(src, "f.json")
		}
		if !json.Valid(src) {
			return
		}
		var v any
		if json.Unmarshal(src, &v) != nil {
			return
		}
		if d := depthOf(v); (d > MaxDepth) != (err != nil) {
			t.Fatalf("depth %d: JSONDepth = %v", d, err)
		}
	})
}

func depthOf(v any) int {
	d := 0
	switch x := v.(type) {
	case map[string]any:
		for _, e := range x {
			d = max(d, depthOf(e))
		}
		return d + 1
	case []any:
		for _, e := range x {
			d = max(d, depthOf(e))
		}
		return d + 1
	}
	return 0
}

// lexDepth is HCLDepth's count made from the tokens of HCL's own lexer
// (hclsyntax.LexConfig): the oracle FuzzHCLDepthAgainstLexer holds the
// byte scan to.
func lexDepth(src []byte) int {
	toks, _ := hclsyntax.LexConfig(src, "f.hcl", hcl.InitialPos)
	type level struct {
		close     hclsyntax.TokenType
		base, ops int
		dirs      int
	}
	st := []level{{}}
	deepest := 0
	depth := func(l level) int { return l.base + l.ops + l.dirs }
	for i, t := range toks {
		top := &st[len(st)-1]
		var close hclsyntax.TokenType
		switch t.Type {
		case hclsyntax.TokenOBrace:
			close = hclsyntax.TokenCBrace
		case hclsyntax.TokenOBrack:
			close = hclsyntax.TokenCBrack
		case hclsyntax.TokenOParen:
			close = hclsyntax.TokenCParen
		case hclsyntax.TokenOQuote:
			close = hclsyntax.TokenCQuote
		case hclsyntax.TokenOHeredoc:
			close = hclsyntax.TokenCHeredoc
		case hclsyntax.TokenTemplateInterp, hclsyntax.TokenTemplateControl:
			close = hclsyntax.TokenTemplateSeqEnd
			if t.Type == hclsyntax.TokenTemplateControl && i+1 < len(toks) && toks[i+1].Type == hclsyntax.TokenIdent {
				switch string(toks[i+1].Bytes) {
				case "if", "for":
					top.dirs++
				case "endif", "endfor":
					top.dirs = max(top.dirs-1, 0)
				}
			}
		case hclsyntax.TokenCBrace, hclsyntax.TokenCBrack, hclsyntax.TokenCParen, hclsyntax.TokenCQuote,
			hclsyntax.TokenCHeredoc, hclsyntax.TokenTemplateSeqEnd:
			if len(st) > 1 && top.close == t.Type {
				st = st[:len(st)-1]
			}
		case hclsyntax.TokenQuestion, hclsyntax.TokenBang, hclsyntax.TokenMinus:
			top.ops++
			deepest = max(deepest, depth(*top))
		case hclsyntax.TokenComma, hclsyntax.TokenNewline:
			top.ops = 0
		}
		if close != 0 {
			l := level{close: close, base: depth(*top) + 1}
			st = append(st, l)
			deepest = max(deepest, l.base)
		}
	}
	return deepest
}

// FuzzHCLDepthAgainstLexer: the byte scan never counts less depth than
// HCL's own lexer sees, whatever the input (it may count more: every '-'),
// nor fewer than half its tokens.
func FuzzHCLDepthAgainstLexer(f *testing.F) {
	for _, s := range []string{
		"a = [1, (2), {b = 3}]\n",
		"a = \"x${y}z%{ if a }b%{ endif }\"\n",
		"a = <<EOT\nx ${[1]} %{ for x in y }\n%{ endfor }\nEOT\nb = 1\n",
		"a = <<-EOT\n  $${x} %%{y} ${\"${1}\"}\n  EOT\n",
		"# [[[\n// (((\n/* {{{ */ a = !x ? -1 : 2\n",
		"a = \"\\\"${[\"\\\\\"}\"\n",
		"a = x ? [y ? 1 : 2] : (!z)\n",
		"b {\n c {\n  d = [<<EOT\n[\nEOT\n]\n }\n}\n",
		"a = <<EOT\n\"${\"\n}\"\nEOT\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, src []byte) {
		if len(src) > 4096 || UTF8(src, hcl.InitialPos) != nil {
			return // HCLDepth's callers refuse broken UTF-8 first
		}
		scan, _, tokens := hclScan(src, 1<<30)
		if lex := lexDepth(src); scan < lex {
			t.Fatalf("the scan counts %d, HCL's lexer %d, for %q", scan, lex, src)
		}
		toks, _ := hclsyntax.LexConfig(src, "f.hcl", hcl.InitialPos)
		if lex := len(toks) - 1; 2*tokens < lex {
			t.Fatalf("the scan counts %d tokens, HCL's lexer makes %d (more than twice as many), of %q", tokens, lex, src)
		}
	})
}

// jsonScanBytewise is jsonScan one byte at a time, strings included, as
// it was written first: the oracle FuzzJSONScanMatchesBytewise holds the
// faster one to.
func jsonScanBytewise(src []byte, stop int) (deepest, line, tokens int) {
	depth := 0
	line = 1
	inString, escaped, word := false, false, false
	for _, c := range src {
		if inString {
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			case c == '\n':
				line++
			}
			continue
		}
		switch c {
		case ' ', '\t', '\r', '\n':
			word = false
			if c == '\n' {
				line++
			}
			continue
		case '"':
			inString = true
		case '{', '[':
			depth++
			if depth > deepest {
				deepest = depth
				if deepest > stop {
					return deepest, line, tokens + 1
				}
			}
		case '}', ']':
			depth--
		case ',', ':':
		default:
			if !word {
				tokens++
			}
			word = true
			continue
		}
		word = false
		tokens++
	}
	return deepest, line, tokens
}

// jsonScan counts as the byte-at-a-time scan does: depth, the line it
// stopped at and the tokens, with strings that hold escaped quotes and
// newlines, end at the last byte, or never end.
func FuzzJSONScanMatchesBytewise(f *testing.F) {
	for _, s := range []string{`{"a": [1, {"b": "]]]"}]}`, "\"\\\"[[[\"", "[\"a\nb\", \"c\\\nd\"]\n[[", `"abc\`, `"no end [[[`,
		"{\"k\":\"" + strings.Repeat("\\\\", 30) + "\"}", `[[["\""]]]`, "1 2\n\"x\ny\"\n{"} {
		f.Add([]byte(s), 3)
	}
	f.Fuzz(func(t *testing.T, src []byte, stop int) {
		d1, l1, t1 := jsonScan(src, stop)
		d2, l2, t2 := jsonScanBytewise(src, stop)
		if d1 != d2 || l1 != l2 || t1 != t2 {
			t.Fatalf("%q (stop %d): jsonScan = %d, %d, %d; byte by byte %d, %d, %d", src, stop, d1, l1, t1, d2, l2, t2)
		}
	})
}
