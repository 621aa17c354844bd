package jsonscan

import (
	"encoding/json"
	"errors"
	"unicode/utf8"

	"github.com/llmgw/llmgw/internal/bounded"
)

// Errors of the scans. ErrShort says the buffer ends before the answer
// does: a cut buffer, not a wrong one.
var (
	ErrShort          = errors.New("json: buffer ends early")
	ErrNotObject      = errors.New("request body is not a JSON object")
	ErrBadJSON        = errors.New("request body is not valid JSON")
	ErrNoModel        = errors.New("you must provide a model parameter")
	ErrModelNotString = errors.New("model must be a string")
)

// Check checks a whole request body before any part of llmgw or an engine
// parses it: nesting at most maxDepth levels (a *bounded.LimitError),
// well-formed JSON (ErrBadJSON), an object (ErrNotObject) with a string
// "model" (ErrNoModel, ErrModelNotString), which it returns. Both checks
// are iterative: a deeply nested body costs no stack.
func Check(buf []byte, maxDepth int) (string, error) {
	if err := bounded.JSONDepth(buf, maxDepth); err != nil {
		return "", err
	}
	if !json.Valid(buf) {
		if len(buf) == 0 {
			return "", ErrNoModel
		}
		return "", ErrBadJSON
	}
	model, _, err := scanModel(buf, 0)
	if errors.Is(err, ErrShort) {
		// Not expected of valid JSON: the scan reads a whole object.
		err = ErrBadJSON
	}
	return model, err
}

// scanModel looks for the top-level member "model" of the JSON object that
// buf begins, starting at from (0, or a resume point an earlier call
// returned). It returns the model; or ErrShort with the offset of the first
// member not yet fully skipped, to resume from when buf has grown; or
// another error when buf cannot begin an object with a string model. The
// first "model" member wins. Only what it must read is checked: the rest of
// the document is the engine's to judge.
func scanModel(buf []byte, from int) (model string, resume int, err error) {
	i := from
	if i == 0 {
		i = SkipSpace(buf, 0)
		if i >= len(buf) {
			return "", 0, ErrShort
		}
		if buf[i] != '{' {
			return "", 0, ErrNotObject
		}
		i = SkipSpace(buf, i+1)
		if i >= len(buf) {
			return "", 0, ErrShort
		}
		if buf[i] == '}' {
			return "", 0, ErrNoModel
		}
	}
	for {
		// i is at a member's key, or the space before it.
		i = SkipSpace(buf, i)
		start := i
		if i >= len(buf) {
			return "", start, ErrShort
		}
		if buf[i] != '"' {
			return "", 0, ErrBadJSON
		}
		end, escaped, err := scanString(buf, i)
		if err != nil {
			return "", start, err
		}
		isModel := isModelKey(buf[i:end], escaped)
		i = SkipSpace(buf, end)
		if i >= len(buf) {
			return "", start, ErrShort
		}
		if buf[i] != ':' {
			return "", 0, ErrBadJSON
		}
		i = SkipSpace(buf, i+1)
		if i >= len(buf) {
			return "", start, ErrShort
		}
		if isModel {
			if buf[i] != '"' {
				return "", 0, ErrModelNotString
			}
			vend, vesc, err := scanString(buf, i)
			if err != nil {
				return "", start, err
			}
			if raw := buf[i+1 : vend-1]; !vesc && utf8.Valid(raw) {
				return string(raw), 0, nil
			}
			var s string
			if err := json.Unmarshal(buf[i:vend], &s); err != nil {
				return "", 0, ErrBadJSON
			}
			return s, 0, nil
		}
		i, err = SkipValue(buf, i)
		if err != nil {
			return "", start, err
		}
		i = SkipSpace(buf, i)
		if i >= len(buf) {
			return "", start, ErrShort
		}
		switch buf[i] {
		case ',':
			i = SkipSpace(buf, i+1)
		case '}':
			return "", 0, ErrNoModel
		default:
			return "", 0, ErrBadJSON
		}
	}
}

func isModelKey(quoted []byte, escaped bool) bool {
	if !escaped {
		return string(quoted) == `"model"`
	}
	var k string
	return json.Unmarshal(quoted, &k) == nil && k == "model"
}
