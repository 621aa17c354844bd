// Package jsonscan reads what the gateway needs of a JSON request body or
// answer without decoding it: the top-level "model" of a body (Check, with
// the body's nesting and form checked first), the top-level members of an
// object (Members), the value of one member of a body that may be cut
// short (Member), and the bytes of a value (SkipValue). Every scan is one
// iterative pass over the bytes: a deeply nested document costs no stack,
// and nothing is allocated unless a string holds escapes.
//
// What the members mean (a prefix key, a usage count) is the caller's: the
// gateway's routing and usage code.
package jsonscan

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"unicode/utf8"

	"github.com/valyala/fastjson"

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
	// ErrModelTwice: the body names its model twice. JSON parsers keep
	// one or the other (Python's and Go's the last), so the gateway would
	// route and authorize by one model and the engine serve another (an
	// adapter the key does not allow, on the same replica).
	ErrModelTwice = errors.New("model is given twice")
)

// Check checks a whole request body before any part of llmgw or an engine
// parses it: nesting at most maxDepth levels (a *bounded.LimitError),
// well-formed JSON (ErrBadJSON), an object (ErrNotObject) with a string
// "model" (ErrNoModel, ErrModelNotString), which it returns. The nesting
// is counted first, iteratively, so that the checks after it (fastjson's
// recursive one among them) see at most maxDepth levels.
func Check(buf []byte, maxDepth int) (string, error) {
	if err := bounded.JSONDepth(buf, maxDepth); err != nil {
		return "", err
	}
	if !valid(buf) {
		if len(buf) == 0 {
			return "", ErrNoModel
		}
		return "", ErrBadJSON
	}
	model, end, err := scanModel(buf, 0)
	if errors.Is(err, ErrShort) {
		// Not expected of valid JSON: the scan reads a whole object.
		err = ErrBadJSON
	}
	if err != nil {
		return "", err
	}
	if modelAgain(buf, end) {
		return "", ErrModelTwice
	}
	return model, nil
}

// valid is json.Valid(buf) (FuzzValidMatchesEncodingJSON holds it to it)
// in a fraction of its time: fastjson's validator, which lets a control
// character through in some strings, then every string checked for one
// (scanString). Check has bounded buf's nesting first, and with it
// fastjson's recursion.
func valid(buf []byte) bool {
	if fastjson.ValidateBytes(buf) != nil {
		return false
	}
	// In valid JSON a quote outside a string opens one.
	for i := 0; ; {
		k := bytes.IndexByte(buf[i:], '"')
		if k < 0 {
			return true
		}
		end, _, err := scanString(buf, i+k)
		if err != nil {
			return false
		}
		i = end
	}
}

// modelAgain reports whether a top-level member after offset i (the end
// of the "model" member's value) of the valid JSON object buf is "model"
// too.
func modelAgain(buf []byte, i int) bool {
	for {
		i = SkipSpace(buf, i)
		if i >= len(buf) || buf[i] != ',' {
			return false
		}
		i = SkipSpace(buf, i+1)
		end, escaped, err := scanString(buf, i)
		if err != nil {
			return false
		}
		if isModelKey(buf[i:end], escaped) {
			return true
		}
		i = SkipSpace(buf, end)
		if i >= len(buf) || buf[i] != ':' {
			return false
		}
		if i, err = SkipValue(buf, SkipSpace(buf, i+1)); err != nil {
			return false
		}
	}
}

// scanModel looks for the top-level member "model" of the JSON object that
// buf begins, starting at from (0, or a resume point an earlier call
// returned). It returns the model and the offset just past its value; or
// ErrShort with the offset of the first member not yet fully skipped, to
// resume from when buf has grown; or another error when buf cannot begin
// an object with a string model. The first "model" member wins (Check
// refuses a second). Only what it must read is checked: the rest of
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
				return string(raw), vend, nil
			}
			var s string
			if err := json.Unmarshal(buf[i:vend], &s); err != nil {
				return "", 0, ErrBadJSON
			}
			return s, vend, nil
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

// SkipSpace returns the offset of the first byte at or after i that is not
// JSON white space (len(buf) when there is none).
func SkipSpace(buf []byte, i int) int {
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
// buf[i] (a quote), and whether it holds escapes: ErrBadJSON at a control
// character (below U+0020, which RFC 8259 §7 keeps out of strings) before
// its end, ErrShort when buf ends first. The byte after a backslash is
// taken as it is (\uXXXX's hex digits need no care). It looks for the
// quote and the backslashes with bytes.IndexByte and at the bytes between
// eight at a time: most of a request's bytes are in its strings.
func scanString(buf []byte, i int) (end int, escaped bool, err error) {
	// A short string (a key, a role) ends before the calls below pay.
	j := i + 1
	for n := min(len(buf), j+shortString); j < n; j++ {
		switch c := buf[j]; {
		case c == '"':
			return j + 1, escaped, nil
		case c == '\\':
			escaped = true
			j++
		case c < 0x20:
			return 0, false, ErrBadJSON
		}
	}
	q := -1 // the next quote at or after j, once found
	for j < len(buf) {
		if q < j {
			if k := bytes.IndexByte(buf[j:], '"'); k >= 0 {
				q = j + k
			} else {
				q = len(buf)
			}
		}
		run := buf[j:q]
		b := bytes.IndexByte(run, '\\')
		if b >= 0 {
			run = run[:b]
		}
		if hasControl(run) {
			return 0, false, ErrBadJSON
		}
		switch {
		case b >= 0:
			escaped = true
			j += b + 2 // past the backslash and the byte it escapes
		case q < len(buf):
			return q + 1, escaped, nil
		default:
			return 0, false, ErrShort
		}
	}
	return 0, false, ErrShort
}

// shortString is how many bytes of a string scanString reads one by one
// before it looks further with bytes.IndexByte.
const shortString = 16

// hasControl reports whether b holds a byte below 0x20, eight bytes at a
// time: a byte below 0x20 borrows from its top bit when 0x20 is taken
// from it, and a byte of 0x80 or more keeps its own top bit out (the
// "haszero"-style test, exact for a bound up to 0x80).
func hasControl(b []byte) bool {
	const lows, highs = 0x2020202020202020, 0x8080808080808080
	for len(b) >= 8 {
		x := binary.LittleEndian.Uint64(b)
		if (x-lows)&^x&highs != 0 {
			return true
		}
		b = b[8:]
	}
	for _, c := range b {
		if c < 0x20 {
			return true
		}
	}
	return false
}

// SkipValue returns the offset just past the value that starts at buf[i]:
// ErrShort when buf ends first, ErrBadJSON when no value can start there.
// Objects and arrays are skipped by bracket depth, strings by quotes;
// numbers and literals run to the next delimiter.
func SkipValue(buf []byte, i int) (int, error) {
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
		return 0, ErrShort
	case '}', ']', ',', ':':
		return 0, ErrBadJSON
	default:
		for j := i; j < len(buf); j++ {
			switch buf[j] {
			case ',', '}', ']', ' ', '\t', '\n', '\r':
				if j == i {
					return 0, ErrBadJSON
				}
				return j, nil
			case '"', '{', '[', ':':
				return 0, ErrBadJSON
			}
		}
		return 0, ErrShort
	}
}

// Members calls fn with the key and value of each top-level member of the
// JSON object buf holds whole (the value as offsets into buf), until fn
// returns false. It reports false when buf is not such an object.
func Members(buf []byte, fn func(key []byte, vs, ve int) bool) bool {
	i := SkipSpace(buf, 0)
	if i >= len(buf) || buf[i] != '{' {
		return false
	}
	i = SkipSpace(buf, i+1)
	if i < len(buf) && buf[i] == '}' {
		return true
	}
	for {
		i = SkipSpace(buf, i)
		if i >= len(buf) || buf[i] != '"' {
			return false
		}
		end, escaped, err := scanString(buf, i)
		if err != nil {
			return false
		}
		key := buf[i+1 : end-1]
		if escaped {
			var k string
			if json.Unmarshal(buf[i:end], &k) != nil {
				return false
			}
			key = []byte(k)
		}
		i = SkipSpace(buf, end)
		if i >= len(buf) || buf[i] != ':' {
			return false
		}
		i = SkipSpace(buf, i+1)
		if i >= len(buf) {
			return false
		}
		ve, err := SkipValue(buf, i)
		if err != nil {
			return false
		}
		if !fn(key, i, ve) {
			return true
		}
		i = SkipSpace(buf, ve)
		if i >= len(buf) {
			return false
		}
		switch buf[i] {
		case ',':
			i++
		case '}':
			return true
		default:
			return false
		}
	}
}

// Member returns the offset of the value of the top-level member name
// of the JSON object buf begins (buf may end early: the value may be cut),
// or -1 when buf has no such member as far as it goes.
func Member(buf []byte, name string) int {
	i := SkipSpace(buf, 0)
	if i >= len(buf) || buf[i] != '{' {
		return -1
	}
	i++
	for {
		i = SkipSpace(buf, i)
		if i >= len(buf) || buf[i] != '"' {
			return -1
		}
		end, _, err := scanString(buf, i)
		if err != nil {
			return -1
		}
		key := buf[i+1 : end-1]
		i = SkipSpace(buf, end)
		if i >= len(buf) || buf[i] != ':' {
			return -1
		}
		i = SkipSpace(buf, i+1)
		if i >= len(buf) {
			return -1
		}
		if string(key) == name {
			return i
		}
		if i, err = SkipValue(buf, i); err != nil {
			return -1
		}
		i = SkipSpace(buf, i)
		if i >= len(buf) || buf[i] != ',' {
			return -1
		}
		i++
	}
}
