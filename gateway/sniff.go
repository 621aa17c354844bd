package gateway

import (
	"encoding/json"
	"errors"
	"unicode/utf8"
)

// Errors of the model scan. errShort is internal: the buffer ends before
// the answer does.
var (
	errShort          = errors.New("json: buffer ends early")
	errNotObject      = errors.New("request body is not a JSON object")
	errBadJSON        = errors.New("request body is not valid JSON")
	errNoModel        = errors.New("you must provide a model parameter")
	errModelNotString = errors.New("model must be a string")
)

// scanModel looks for the top-level member "model" of the JSON object that
// buf begins, starting at from (0, or a resume point an earlier call
// returned). It returns the model; or errShort with the offset of the first
// member not yet fully skipped, to resume from when buf has grown; or
// another error when buf cannot begin an object with a string model. The
// first "model" member wins. Only what it must read is checked: the rest of
// the document is the engine's to judge.
func scanModel(buf []byte, from int) (model string, resume int, err error) {
	i := from
	if i == 0 {
		i = skipSpace(buf, 0)
		if i >= len(buf) {
			return "", 0, errShort
		}
		if buf[i] != '{' {
			return "", 0, errNotObject
		}
		i = skipSpace(buf, i+1)
		if i >= len(buf) {
			return "", 0, errShort
		}
		if buf[i] == '}' {
			return "", 0, errNoModel
		}
	}
	for {
		// i is at a member's key, or the space before it.
		i = skipSpace(buf, i)
		start := i
		if i >= len(buf) {
			return "", start, errShort
		}
		if buf[i] != '"' {
			return "", 0, errBadJSON
		}
		end, escaped, err := scanString(buf, i)
		if err != nil {
			return "", start, err
		}
		isModel := isModelKey(buf[i:end], escaped)
		i = skipSpace(buf, end)
		if i >= len(buf) {
			return "", start, errShort
		}
		if buf[i] != ':' {
			return "", 0, errBadJSON
		}
		i = skipSpace(buf, i+1)
		if i >= len(buf) {
			return "", start, errShort
		}
		if isModel {
			if buf[i] != '"' {
				return "", 0, errModelNotString
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
				return "", 0, errBadJSON
			}
			return s, 0, nil
		}
		i, err = skipValue(buf, i)
		if err != nil {
			return "", start, err
		}
		i = skipSpace(buf, i)
		if i >= len(buf) {
			return "", start, errShort
		}
		switch buf[i] {
		case ',':
			i = skipSpace(buf, i+1)
		case '}':
			return "", 0, errNoModel
		default:
			return "", 0, errBadJSON
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

func skipSpace(buf []byte, i int) int {
	for i < len(buf) {
		switch buf[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// scanString returns the offset just past the string that starts at
// buf[i] (a quote), and whether it holds escapes.
func scanString(buf []byte, i int) (end int, escaped bool, err error) {
	for j := i + 1; j < len(buf); j++ {
		switch c := buf[j]; {
		case c == '"':
			return j + 1, escaped, nil
		case c == '\\':
			escaped = true
			j++ // the escaped byte; \uXXXX's hex digits need no care
		case c < 0x20:
			return 0, false, errBadJSON
		}
	}
	return 0, false, errShort
}

// skipValue returns the offset just past the value that starts at buf[i].
// Objects and arrays are skipped by bracket depth, strings by quotes;
// numbers and literals run to the next delimiter.
func skipValue(buf []byte, i int) (int, error) {
	switch buf[i] {
	case '"':
		end, _, err := scanString(buf, i)
		return end, err
	case '{', '[':
		depth := 0
		for j := i; j < len(buf); j++ {
			switch buf[j] {
			case '"':
				end, _, err := scanString(buf, j)
				if err != nil {
					return 0, err
				}
				j = end - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return j + 1, nil
				}
			}
		}
		return 0, errShort
	case '}', ']', ',', ':':
		return 0, errBadJSON
	default:
		for j := i; j < len(buf); j++ {
			switch buf[j] {
			case ',', '}', ']', ' ', '\t', '\n', '\r':
				if j == i {
					return 0, errBadJSON
				}
				return j, nil
			case '"', '{', '[', ':':
				return 0, errBadJSON
			}
		}
		return 0, errShort
	}
}
