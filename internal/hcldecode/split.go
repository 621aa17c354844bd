package hcldecode

import (
	"bytes"
	"encoding/json"
	"io"
	"strconv"

	"github.com/hashicorp/hcl/v2"
)

// Part is a piece of a file that decodes on its own (SplitJSON,
// SplitNative): its source, and where that source starts in the file, so
// that its problems name the file's own lines.
type Part struct {
	Src   []byte
	Start hcl.Pos
}

// Whole is the part that is the whole of src.
func Whole(src []byte) Part { return Part{Src: src, Start: hcl.InitialPos} }

// SplitJSON splits a file in HCL's JSON syntax whose top-level object has
// the property name once, with an array for its value (how a program
// writes many blocks of one type: {"node": [{"n1": {…}}, {"n2": {…}}]}),
// so that its blocks can be decoded in parts at once. The first part is
// the file without that property (its other properties, at their places);
// each of at most n parts after it holds a run of the array's elements,
// the runs about the same size in bytes, as {"name": [ … ]}. Decoding the
// parts into the same struct type gives the blocks that decoding the file
// gives, the runs in file order, and their problems at the file's own
// lines.
//
// Only encoding/json reads src here, to find the elements' bounds; each
// part is parsed by hcl/v2/json like a whole file. ok is false, and src is
// to be decoded whole, when n < 2, when src is not JSON of that shape
// (decoding it whole reports what is wrong), or when the array has fewer
// than two elements.
func SplitJSON(src []byte, name string, n int) (parts []Part, ok bool) {
	if n < 2 {
		return nil, false
	}
	b, ok := arrayBounds(src, name)
	if !ok || len(b.ends) < 2 {
		return nil, false
	}
	open, closing, ends := b.open, b.closing, b.ends
	// The rest: the same bytes with the property blanked (HCL refuses an
	// empty array of labelled blocks), lines kept, so that every position
	// in it is the file's own. The property's comma goes with it: the one
	// before it, or for the first property the one after.
	rest := bytes.Clone(src)
	from, to := b.member, b.end
	if b.first {
		for to < len(rest) && isSpace(rest[to]) {
			to++
		}
		if to < len(rest) && rest[to] == ',' {
			to++
		}
	}
	for i := from; i < to; i++ {
		if rest[i] != '\n' && rest[i] != '\r' {
			rest[i] = ' '
		}
	}
	parts = append(parts, Whole(rest))

	prefix := []byte(`{` + strconv.Quote(name) + `:[`) // name is ours: ASCII, no escapes
	lines, counted := 1, 0                             // lines before offset counted
	target := (closing - open + n - 1) / n
	start := open
	for i := 0; i < len(ends); {
		// The run: elements from start until its size reaches target.
		j := i
		for j < len(ends)-1 && ends[j]-start < target {
			j++
		}
		end := ends[j]
		lines += bytes.Count(src[counted:start], []byte{'\n'})
		counted = start
		col := start - (bytes.LastIndexByte(src[:start], '\n') + 1) + 1
		run := make([]byte, 0, len(prefix)+end-start+2)
		run = append(run, prefix...)
		run = append(run, src[start:end]...)
		run = append(run, ']', '}')
		parts = append(parts, Part{Src: run, Start: hcl.Pos{
			Line: lines, Column: col - len(prefix), Byte: start - len(prefix),
		}})
		// The next run starts at its first element, past the comma.
		start = end
		for start < closing && (src[start] == ',' || isSpace(src[start])) {
			start++
		}
		i = j + 1
	}
	return parts, true
}

// arrayBounds finds, in the JSON object src, the one property name whose
// value is an array: where the property starts (after the comma before it,
// or the object's '{') and ends (after its ']'), the offsets just after its
// '[' and of its ']', and where each of its elements ends. ok is false when
// src is not a JSON object with exactly one such property.
func arrayBounds(src []byte, name string) (b bounds, ok bool) {
	dec := json.NewDecoder(bytes.NewReader(src))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return b, false
	}
	found := false
	for first := true; dec.More(); first = false {
		member := int(dec.InputOffset())
		t, err := dec.Token()
		key, isKey := t.(string)
		if err != nil || !isKey {
			return b, false
		}
		if key != name {
			if dec.Decode(&skip{}) != nil {
				return b, false
			}
			continue
		}
		if found {
			return b, false // twice: leave the merging to HCL
		}
		found = true
		b.member, b.first = member, first
		if t, err := dec.Token(); err != nil || t != json.Delim('[') {
			return b, false
		}
		b.open = int(dec.InputOffset())
		for dec.More() {
			if dec.Decode(&skip{}) != nil {
				return b, false
			}
			b.ends = append(b.ends, int(dec.InputOffset()))
		}
		if t, err := dec.Token(); err != nil || t != json.Delim(']') {
			return b, false
		}
		b.end = int(dec.InputOffset())
		b.closing = b.end - 1
	}
	if t, err := dec.Token(); err != nil || t != json.Delim('}') {
		return b, false
	}
	if _, err := dec.Token(); err != io.EOF {
		return b, false // something after the object
	}
	return b, found
}

// bounds is where arrayBounds found the property and its array.
type bounds struct {
	member, end   int // the property, with the comma before it
	first         bool
	open, closing int // after '[', at ']'
	ends          []int
}

// skip is a JSON value read only to be passed over.
type skip struct{}

func (*skip) UnmarshalJSON([]byte) error { return nil }

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// SplitNative splits a file in HCL's native syntax before lines that begin
// (in their first column) with a block of type name ("node \"n1\" {"), so
// that its blocks can be decoded in parts at once: at most n+1 parts, about
// the same size in bytes, each at its own place in the file. Nothing here
// reads HCL: the split only looks at the lines' first bytes, and a line
// that begins so inside a block, a comment or a heredoc makes the part
// before it not parse (it ends inside that construct), so that decoding a
// part fails and the caller reads the file whole. When every part parses,
// every split was between the file's top-level items, and the parts'
// blocks, in order, are the file's. ok is false when n < 2 or the file
// has fewer than two such lines.
func SplitNative(src []byte, name string, n int) (parts []Part, ok bool) {
	if n < 2 {
		return nil, false
	}
	var starts []int
	prefix := []byte(name)
	for i := 0; i < len(src); {
		if bytes.HasPrefix(src[i:], prefix) && len(src) > i+len(name) {
			switch src[i+len(name)] {
			case ' ', '\t', '"', '{':
				starts = append(starts, i)
			}
		}
		nl := bytes.IndexByte(src[i:], '\n')
		if nl < 0 {
			break
		}
		i += nl + 1
	}
	if len(starts) < 2 {
		return nil, false
	}
	target := (len(src) - starts[0] + n - 1) / n
	cuts := []int{0}
	for _, s := range starts[1:] {
		if s-cuts[len(cuts)-1] >= target {
			cuts = append(cuts, s)
		}
	}
	cuts = append(cuts, len(src))
	line := 1
	for i := 0; i+1 < len(cuts); i++ {
		a, b := cuts[i], cuts[i+1]
		parts = append(parts, Part{Src: src[a:b], Start: hcl.Pos{Line: line, Column: 1, Byte: a}})
		line += bytes.Count(src[a:b], []byte{'\n'})
	}
	return parts, len(parts) > 1
}
