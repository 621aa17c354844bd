// Package bounded holds the limits on input llmgw reads from outside (API
// bodies, the catalog, facility, fleet, configuration and key files) and
// the checks that enforce them before any recursive parser sees the input.
//
// HCL's parsers (native and JSON syntax) and many engines' JSON parsers
// recurse once per level of nesting: a few hundred kilobytes of brackets
// overflow the stack, which in Go is a fatal error no recover catches. The
// checks here are iterative: JSONDepth scans bytes, HCLDepth walks the
// tokens of HCL's own lexer (hclsyntax.LexConfig, a state machine), so
// their cost is linear in the input and their stack constant.
//
// The package is pure.
package bounded

import (
	"errors"
	"fmt"
	"io"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
)

// The limits on files and file-like API bodies (a catalog in POST
// /v1/plan). A real catalog nests four or five levels; a fleet file of
// 12,800 nodes is about 5 MB.
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
// src is well-formed (json.Valid does, iteratively): it only counts, so a
// malformed input passes when it is shallow. line is counted from 1.
func JSONDepth(src []byte, max int) error {
	depth, line := 0, 1
	inString, escaped := false, false
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
		case '"':
			inString = true
		case '{', '[':
			depth++
			if depth > max {
				return &LimitError{Limit: "nesting depth", Max: int64(max), Line: line}
			}
		case '}', ']':
			depth--
		case '\n':
			line++
		}
	}
	return nil
}

// HCLDepth returns a *LimitError when src, read as HCL's native syntax
// starting at start, nests deeper than max levels; nil otherwise, and nil
// when src does not lex (the parser then reports that, without recursing
// on it). It counts what HCL's parser recurses on: brackets, braces,
// parentheses, quotes, heredocs and template sequences, and, within one
// of those, each conditional (`?`) and unary operator (`!`, `-`) since
// the last comma or newline, which nest without a bracket.
func HCLDepth(src []byte, filename string, start hcl.Pos, max int) error {
	toks, _ := hclsyntax.LexConfig(src, filename, start)
	depth := 0
	// extra[i] counts the operators that nest at bracket level i.
	extra := make([]int, 1, 8)
	over := func(t hclsyntax.Token) error {
		if depth+extra[len(extra)-1] > max {
			return &LimitError{Limit: "nesting depth", Max: int64(max), Line: t.Range.Start.Line}
		}
		return nil
	}
	for _, t := range toks {
		switch t.Type {
		case hclsyntax.TokenOBrace, hclsyntax.TokenOBrack, hclsyntax.TokenOParen, hclsyntax.TokenOQuote,
			hclsyntax.TokenOHeredoc, hclsyntax.TokenTemplateInterp, hclsyntax.TokenTemplateControl:
			// The operators open at the outer level still nest around
			// what this opens.
			depth += 1 + extra[len(extra)-1]
			extra = append(extra, 0)
			if err := over(t); err != nil {
				return err
			}
		case hclsyntax.TokenCBrace, hclsyntax.TokenCBrack, hclsyntax.TokenCParen, hclsyntax.TokenCQuote,
			hclsyntax.TokenCHeredoc, hclsyntax.TokenTemplateSeqEnd:
			if len(extra) > 1 {
				extra = extra[:len(extra)-1]
				depth -= 1 + extra[len(extra)-1]
			}
		case hclsyntax.TokenQuestion, hclsyntax.TokenBang, hclsyntax.TokenMinus:
			extra[len(extra)-1]++
			if err := over(t); err != nil {
				return err
			}
		case hclsyntax.TokenComma, hclsyntax.TokenNewline:
			extra[len(extra)-1] = 0
		}
	}
	return nil
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
