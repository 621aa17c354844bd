// Package bounded holds the limits on input llmgw reads from outside (API
// bodies, the catalog, facility, fleet, configuration and key files) and
// the checks that enforce them before any recursive parser sees the input.
//
// HCL's parsers (native and JSON syntax) and many engines' JSON parsers
// recurse once per level of nesting: a few hundred kilobytes of brackets
// overflow the stack, which in Go is a fatal error no recover catches. The
// checks here are iterative, one pass over the bytes each, so their cost is
// linear in the input and their stack constant.
//
// The package is pure but for ReadFile (file.go).
package bounded

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"unicode/utf8"

	"github.com/hashicorp/hcl/v2"
)

// The limits on files and file-like API bodies (a catalog in POST
// /v1/plan). A real catalog nests four or five levels; a fleet file of
// 12,800 nodes is about 4 MB.
const (
	// MaxDepth is the deepest nesting of brackets, braces, parentheses,
	// quotes, template interpolations and chained operators a file may have.
	MaxDepth = 64
	// MaxFileBytes is the largest file llmgw reads.
	MaxFileBytes = 64 << 20
)

// LimitError says which limit an input went past, and where.
type LimitError struct {
	// Limit names the limit: "nesting depth" or "size".
	Limit string
	// Max is the limit's value (levels or bytes).
	Max int64
	// Line is the 1-based line where the limit was passed; 0 when not
	// known (a size).
	Line int
}

func (e *LimitError) Error() string {
	switch e.Limit {
	case "size":
		return fmt.Sprintf("larger than %d bytes (llmgw's size limit on this input)", e.Max)
	default:
		return fmt.Sprintf("nested deeper than %d levels (llmgw's nesting depth limit)", e.Max)
	}
}

// IsLimit reports whether err is (or wraps) a *LimitError.
func IsLimit(err error) bool {
	var le *LimitError
	return errors.As(err, &le)
}

// JSONDepth returns a *LimitError when src, read as JSON, nests objects
// and arrays deeper than max levels; nil otherwise. It does not check that
// src is well-formed (the caller's parser does): it only counts, so a
// malformed input passes when it is shallow. line is counted from 1.
func JSONDepth(src []byte, max int) error {
	if d, line, _ := jsonScan(src, max); d > max {
		return &LimitError{Limit: "nesting depth", Max: int64(max), Line: line}
	}
	return nil
}

// jsonScan returns the deepest nesting of src, or the first depth past
// stop and the 1-based line where it was reached, and the tokens read to
// there: every string, every run of a number or literal, every bracket,
// comma and colon.
func jsonScan(src []byte, stop int) (deepest, line, tokens int) {
	depth := 0
	line = 1
	word := false
	for i := 0; i < len(src); i++ {
		c := src[i]
		switch c {
		case ' ', '\t', '\r', '\n':
			word = false
			if c == '\n' {
				line++
			}
			continue
		case '"':
			var lines int
			i, lines = stringEnd(src, i+1)
			line += lines
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

// stringEnd returns the offset of the quote that ends the string whose
// content starts at src[i] (len(src) when none does) and the newlines in
// it that no backslash escapes. It finds the quote and the backslashes
// with bytes.IndexByte rather than byte by byte: a JSON document's bytes
// are mostly in its strings.
func stringEnd(src []byte, i int) (end, lines int) {
	q := -1 // the next quote at or after i, once found
	for i < len(src) {
		if q < i {
			if k := bytes.IndexByte(src[i:], '"'); k >= 0 {
				q = i + k
			} else {
				q = len(src)
			}
		}
		run := src[i:q]
		b := bytes.IndexByte(run, '\\')
		if b >= 0 {
			run = run[:b]
		}
		lines += bytes.Count(run, newline)
		if b < 0 {
			return q, lines
		}
		i += b + 2 // past the backslash and the byte it escapes
	}
	return len(src), lines
}

var newline = []byte{'\n'}

// HCLDepth returns a *LimitError when src, read as HCL's native syntax
// starting at start, nests deeper than max levels; nil otherwise. It counts
// what HCL's parser recurses on: brackets, braces, parentheses, quoted
// strings, heredocs, template sequences (`${`, `%{`) and the `if` and
// `for` directives open in a template, and, within each of those, every
// conditional (`?`) and unary operator (`!`, `-`) since the last comma or
// newline, which nest without a bracket.
//
// It is one pass over the bytes that follows HCL's lexical modes
// (expressions, quoted strings, heredocs, comments) without making tokens:
// HCL's own lexer (hclsyntax.LexConfig) holds a token of about 100 bytes
// for every few bytes of input, which for a fleet file of a few megabytes
// cost as much as the parse itself. Where it is unsure it counts more,
// never less: every '-' in an expression counts (also within a name like
// "a-b"), and a closing bracket that does not match what is open closes
// nothing. FuzzHCLDepthAgainstLexer holds it to HCL's lexer. src must be
// valid UTF-8 (UTF8 checks that; HCL's lexer reads a broken sequence as
// one character with the bytes after it, '#' or '"' among them).
func HCLDepth(src []byte, start hcl.Pos, max int) error {
	if d, line, _ := hclScan(src, max); d > max {
		return &LimitError{Limit: "nesting depth", Max: int64(max), Line: start.Line + line - 1}
	}
	return nil
}

// level is one level of nesting open in hclDepth, closed by close: a
// bracket, brace or parenthesis, '"' for a quoted string, 'H' for a
// heredoc, 'S' for a template sequence's '}'. ops counts the operators
// since its last comma or newline, dirs the if and for directives open in
// it.
type level struct {
	close           byte
	base, ops, dirs int
}

func (l *level) depth() int { return l.base + l.ops + l.dirs }

// mode is one of HCL's lexical modes open in hclDepth: an expression
// ('e', the file's top level), a template sequence ('i', with the braces
// open in it), a quoted string ('s') or a heredoc ('h', with its marker).
type mode struct {
	kind   byte
	braces int
	marker []byte
}

// HCLTokens returns about how many tokens HCL's lexer makes of src (valid
// UTF-8): every name, number and punctuation mark, newline, comment, quote
// and run of text; on real files a little more than the lexer, on any
// input at least half as many (FuzzHCLDepthAgainstLexer). What HCL's parser and llmgw's decoder
// hold grows with the tokens, not the bytes (some 270 bytes of heap a
// token for "a=1" lines), so an API body's cost is bounded by them.
func HCLTokens(src []byte) int {
	_, _, tokens := hclScan(src, int(^uint(0)>>1))
	return tokens
}

// hclScan returns the deepest nesting of src, or the first depth past
// stop and the 1-based line where it was reached, and the tokens (as
// HCLTokens counts them) read to there. It follows the modes of HCL's
// lexer (a '}' in a template sequence with no brace of its own open ends
// the sequence, whatever brackets are open in it) and counts levels as
// they open and as their own closer closes them.
func hclScan(src []byte, stop int) (deepest, line, tokens int) {
	lv := []level{{}}
	md := []mode{{kind: 'e'}}
	line = 1
	top := func() *level { return &lv[len(lv)-1] }
	open := func(close byte) bool {
		l := level{close: close, base: top().depth() + 1}
		lv = append(lv, l)
		deepest = max(deepest, l.base)
		return deepest > stop
	}
	shut := func(close byte) {
		if len(lv) > 1 && top().close == close {
			lv = lv[:len(lv)-1]
		}
	}
	note := func() bool {
		deepest = max(deepest, top().depth())
		return deepest > stop
	}
	lineStart := true  // at the start of a line (for a heredoc's end)
	word := false      // the byte before was part of a name or number
	wordDigit := false // and it was a digit
	text := false      // a run of a string's text is open
	for i := 0; i < len(src); i++ {
		c := src[i]
		m := &md[len(md)-1]
		switch m.kind {
		case 'e', 'i':
			text = false
			if isIdent(c, false) && c != '-' {
				// A run of digits, or of other name bytes, is a token: a
				// number and the name after it are two.
				digit := c >= '0' && c <= '9'
				switch {
				case c >= 0xC0:
					// Every character not ASCII counts (HCL's lexer
					// makes one of each it cannot put in a name).
					tokens++
				case c >= 0x80:
				case !word || digit != wordDigit:
					tokens++
				}
				word, wordDigit = true, digit
				continue
			}
			word = false
			if c != ' ' && c != '\t' {
				tokens++
			}
			switch {
			case c == '\n':
				line++
				top().ops = 0
			case c == ',':
				top().ops = 0
			case c == '#' || (c == '/' && i+1 < len(src) && src[i+1] == '/'):
				// The comment takes its newline with it, as in HCL's
				// lexer: the operators before it still count.
				for i+1 < len(src) && src[i] != '\n' {
					i++
				}
				if src[i] == '\n' {
					line++
				}
			case c == '/' && i+1 < len(src) && src[i+1] == '*' && bytes.Contains(src[i+2:], []byte("*/")):
				// A comment that ends; an unterminated one is read
				// as HCL's lexer reads it, as operators.
				end := i + 2 + bytes.Index(src[i+2:], []byte("*/"))
				line += bytes.Count(src[i:end], []byte("\n"))
				i = end + 1
			case c == '"':
				md = append(md, mode{kind: 's'})
				if open('"') {
					return deepest, line, tokens
				}
			case c == '<' && i+1 < len(src) && src[i+1] == '<':
				if mk, next, ok := heredocStart(src, i+2); ok {
					// What HCL's lexer may make of an opening that is not
					// one: a token a byte.
					tokens += next - i
					md = append(md, mode{kind: 'h', marker: mk})
					if open('H') {
						return deepest, line, tokens
					}
					line++
					i = next - 1
					lineStart = true
					continue
				}
			case c == '{':
				if m.kind == 'i' {
					m.braces++
				}
				if open('}') {
					return deepest, line, tokens
				}
			case c == '~' && i+1 < len(src) && src[i+1] == '}':
				// "~}" is always a template sequence's end to HCL's
				// lexer (a strip marker), never a brace's.
				i++
				shut('S')
				if m.kind == 'i' && m.braces == 0 {
					md = md[:len(md)-1]
				} else if m.kind == 'i' {
					m.braces--
				}
			case c == '}' && m.kind == 'i' && m.braces == 0:
				shut('S')
				md = md[:len(md)-1]
			case c == '}':
				if m.kind == 'i' {
					m.braces--
				}
				shut('}')
			case c == '[' || c == '(':
				if open(closer(c)) {
					return deepest, line, tokens
				}
			case c == ']' || c == ')':
				shut(c)
			case c == '?' || c == '!' || c == '-':
				top().ops++
				if note() {
					return deepest, line, tokens
				}
			}
		case 's', 'h':
			word = false
			if m.kind == 'h' && lineStart {
				if end, ok := heredocEnd(src, i, m.marker); ok {
					tokens++
					shut('H')
					md = md[:len(md)-1]
					i = end - 1
					lineStart = false
					continue
				}
			}
			lineStart = false
			// A run of text is a token; a quote, a template sequence's
			// opening and (in a heredoc) a line's end close it.
			if !text {
				tokens++
				text = true
			}
			switch {
			case c == '\n':
				line++
				lineStart = true
				text = false
			case c == '\\' && m.kind == 's':
				if i+1 < len(src) && src[i+1] == '\n' {
					line++
				}
				i++
				// A broken escape may be tokens of its own.
				tokens++
				text = false
			case c == '"' && m.kind == 's':
				tokens++
				text = false
				shut('"')
				md = md[:len(md)-1]
			case (c == '$' || c == '%') && i+2 < len(src) && src[i+1] == c && src[i+2] == '{':
				i += 2 // $${ and %%{ are literal, a token of their own
				tokens++
				text = false
			case (c == '$' || c == '%') && i+1 < len(src) && src[i+1] == '{':
				if c == '%' {
					switch directive(src, i+2) {
					case "if", "for":
						top().dirs++
					case "endif", "endfor":
						top().dirs = max(top().dirs-1, 0)
					}
				}
				i++
				tokens++
				text = false
				md = append(md, mode{kind: 'i'})
				if open('S') {
					return deepest, line, tokens
				}
			case c == '$' || c == '%' || c < 0x20:
				// HCL's lexer may make a token of a lone '$' or '%', or of
				// a control character.
				tokens++
				text = false
			}
		}
	}
	return deepest, line, tokens
}

func closer(c byte) byte {
	switch c {
	case '{':
		return '}'
	case '[':
		return ']'
	}
	return ')'
}

// isIdent: a byte of an HCL name; any byte of a multi-byte character
// counts (HCL's names are Unicode, and its lexer takes broken UTF-8 too).
func isIdent(c byte, first bool) bool {
	return c == '_' || c >= 0x80 || (c|0x20 >= 'a' && c|0x20 <= 'z') || (!first && (c == '-' || (c >= '0' && c <= '9')))
}

// heredocStart reads a heredoc's opening after its "<<" at i: an optional
// '-', a name and a newline; it returns the name and where the heredoc's
// first line starts.
func heredocStart(src []byte, i int) (marker []byte, next int, ok bool) {
	if i < len(src) && src[i] == '-' {
		i++
	}
	j := i
	for j < len(src) && isIdent(src[j], j == i) {
		j++
	}
	if j == i {
		return nil, 0, false
	}
	k := j
	if k < len(src) && src[k] == '\r' {
		k++
	}
	if k >= len(src) || src[k] != '\n' {
		return nil, 0, false
	}
	return src[i:j], k + 1, true
}

// heredocEnd reports whether the line at i is the heredoc's end (spaces,
// its marker, then the end of the line) and where the marker ends.
func heredocEnd(src []byte, i int, marker []byte) (int, bool) {
	for i < len(src) && (src[i] == ' ' || src[i] == '\t') {
		i++
	}
	if !bytes.HasPrefix(src[i:], marker) {
		return 0, false
	}
	j := i + len(marker)
	if j < len(src) && src[j] == '\r' {
		j++
	}
	return i + len(marker), j >= len(src) || src[j] == '\n'
}

// directive is the keyword of the template directive whose body starts at
// i (after "%{"): spaces and a strip marker '~' skipped.
func directive(src []byte, i int) string {
	for i < len(src) && (src[i] == ' ' || src[i] == '\t' || src[i] == '~') {
		i++
	}
	j := i
	for j < len(src) && isIdent(src[j], j == i) {
		j++
	}
	return string(src[i:j])
}

// UTF8 returns an error naming the line of the first byte of src that is
// not valid UTF-8, nil when every byte is; start is where src starts in
// its file. HCL's files (both syntaxes) are UTF-8.
func UTF8(src []byte, start hcl.Pos) error {
	if utf8.Valid(src) {
		return nil
	}
	line := start.Line
	for i := 0; i < len(src); {
		r, n := utf8.DecodeRune(src[i:])
		if r == utf8.RuneError && n <= 1 {
			return &EncodingError{Line: line}
		}
		if r == '\n' {
			line++
		}
		i += n
	}
	return nil
}

// EncodingError is an input that is not valid UTF-8.
type EncodingError struct{ Line int }

func (e *EncodingError) Error() string { return "not valid UTF-8" }

// JSONTokens returns how many tokens a JSON document src has: every
// string, every run of a number or literal, every bracket, comma and
// colon.
func JSONTokens(src []byte) int {
	_, _, tokens := jsonScan(src, int(^uint(0)>>1))
	return tokens
}

// ReadAll reads r to its end, refusing more than max bytes with a
// *LimitError before reading past the limit (one byte past it).
func ReadAll(r io.Reader, max int64) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > max {
		return nil, &LimitError{Limit: "size", Max: max}
	}
	return b, nil
}
