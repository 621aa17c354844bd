package jsonscan

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/llmgw/llmgw/internal/testing/hostile"
)

func TestMember(t *testing.T) {
	body := `{"model":"m", "messages" : [{"role":"user","content":"a \"prompt\": 1"}],"prompt":"p"}`
	for _, tt := range []struct {
		buf, name, want string // want: the value's first bytes, "" for -1
	}{
		{body, "messages", `[{"role"`},
		{body, "prompt", `"p"`},
		{body, "model", `"m"`},
		{body, "content", ""}, // not top level
		{body, "stream", ""},
		{body[:strings.Index(body, `"prompt":"p"`)+10], "prompt", `"`}, // the value cut: still found
		{body[:strings.Index(body, `"prompt":"p"`)+5], "prompt", ""},   // the key cut
		{`[{"prompt":"p"}]`, "prompt", ""},
		{`{"a":tru`, "b", ""},
		{``, "model", ""},
	} {
		i := Member([]byte(tt.buf), tt.name)
		switch {
		case tt.want == "" && i != -1:
			t.Errorf("Member(%q, %q) = %d, want -1", tt.buf, tt.name, i)
		case tt.want != "" && (i < 0 || !strings.HasPrefix(tt.buf[i:], tt.want)):
			t.Errorf("Member(%q, %q) = %d, want the value %s…", tt.buf, tt.name, i, tt.want)
		}
	}
}

func TestMembers(t *testing.T) {
	type member struct{ key, value string }
	var got []member
	buf := []byte(` { "a" : 1 , "b\u0063":{"x":[1,"}"]}, "d":"e\"f" } `)
	if !Members(buf, func(key []byte, vs, ve int) bool {
		got = append(got, member{string(key), string(buf[vs:ve])})
		return true
	}) {
		t.Fatal("not an object")
	}
	want := []member{{"a", "1"}, {"bc", `{"x":[1,"}"]}`}, {"d", `"e\"f"`}}
	if len(got) != len(want) {
		t.Fatalf("members %q, want %q", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("member %d: %q, want %q", i, got[i], want[i])
		}
	}
	for _, bad := range []string{``, `[]`, `{"a"}`, `{"a":1,}`, `{"a":1 "b":2}`, `{"a":[1,2}`, `{"a":1`} {
		if Members([]byte(bad), func([]byte, int, int) bool { return true }) {
			t.Errorf("Members(%q) reported an object", bad)
		}
	}
}

// objectOf is body's members as encoding/json reads them, and whether the
// comparison with the scans holds its meaning: a valid JSON object of
// valid UTF-8 (encoding/json replaces bad bytes) with no escapes anywhere
// (a key the scans compare raw is then the key encoding/json gives).
func objectOf(body []byte) (map[string]json.RawMessage, bool) {
	var obj map[string]json.RawMessage
	if !utf8.Valid(body) || bytes.IndexByte(body, '\\') >= 0 || json.Unmarshal(body, &obj) != nil || obj == nil {
		return nil, false
	}
	return obj, true
}

func fuzzSeeds(f *testing.F) {
	for _, s := range []string{
		`{"model":"m","messages":[{"role":"system","content":"s"},{"role":"user","content":"u"}]}`,
		`{"usage":{"prompt_tokens":3,"prompt_tokens_details":{"cached_tokens":1}},"timings":{"cache_n":2}}`,
		`{"model":"m","prompt":"p","stream":true,"stream_options":{"include_usage":false}}`,
		` { "a" : [ 1 , { "b" : "}" } ] , "c" : null } `, `{"a":1,"a":2}`, `{}`, `[]`, `{"a":tr`,
	} {
		f.Add([]byte(s))
	}
	// The hostile shapes (deep nesting, a long string), cut to 4 KiB: the
	// member scans read bodies no larger than a prefix key's 32 KiB or an
	// answer's 1 MiB, and megabyte seeds would leave the fuzzer a few
	// thousand runs in its time (FuzzCheck takes them whole).
	for _, b := range hostile.JSONSeeds() {
		f.Add(b[:min(len(b), 4<<10)])
	}
}

// FuzzMembers checks Members against encoding/json: on any input it stays
// within the buffer; on a valid object it reports every member, in order,
// each value the bytes encoding/json keeps for it.
func FuzzMembers(f *testing.F) {
	fuzzSeeds(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		var keys []string
		var values [][]byte
		ok := Members(body, func(key []byte, vs, ve int) bool {
			if vs < 0 || vs > ve || ve > len(body) {
				t.Fatalf("member %q at %d:%d of %d bytes", key, vs, ve, len(body))
			}
			keys, values = append(keys, string(key)), append(values, body[vs:ve])
			return true
		})
		obj, comparable := objectOf(body)
		if !comparable {
			return
		}
		if !ok {
			t.Fatalf("Members(%q) refused a valid object", body)
		}
		if len(keys) != len(obj) {
			return // a key repeated: encoding/json keeps the last
		}
		for i, k := range keys {
			if want, found := obj[k]; !found || !bytes.Equal(values[i], want) {
				t.Fatalf("Members(%q): %q is %q; encoding/json says %q (found %v)", body, k, values[i], want, found)
			}
		}
	})
}

// FuzzMember checks Member against encoding/json on valid objects (every
// top-level key that occurs once is found, at its value), and on any input
// that a body cut short finds a member at the offset the whole body has it,
// or not at all.
func FuzzMember(f *testing.F) {
	fuzzSeeds(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		var names []string
		if obj, comparable := objectOf(body); comparable {
			for k, want := range obj {
				names = append(names, k)
				if bytes.Count(body, []byte(`"`+k+`"`)) != 1 {
					continue // the key is repeated, or also a string elsewhere
				}
				i := Member(body, k)
				if i < 0 {
					t.Fatalf("Member(%q, %q) found nothing", body, k)
				}
				end, err := SkipValue(body, i)
				if err != nil || !bytes.Equal(body[i:end], want) {
					t.Fatalf("Member(%q, %q) is at %q (%v); encoding/json says %q", body, k, body[i:min(end, len(body))], err, want)
				}
			}
		}
		if len(body) > 512 { // every cut of a longer body costs the fuzzer too many runs
			return
		}
		for _, name := range append(names, "model", "messages", "prompt") {
			whole := Member(body, name)
			for n := range len(body) {
				if i := Member(body[:n], name); i != -1 && i != whole {
					t.Fatalf("Member(%q, %q) = %d, but %d of the whole %q", body[:n], name, i, whole, body)
				}
			}
		}
	})
}

// scanStringBytewise is scanString one byte at a time, as it was written
// first: the oracle FuzzScanString holds the faster one to.
func scanStringBytewise(buf []byte, i int) (end int, escaped bool, err error) {
	for j := i + 1; j < len(buf); j++ {
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
	return 0, false, ErrShort
}

// scanString answers as the byte-at-a-time scan does, whatever follows a
// quote: escapes next to the end, control characters on either side of a
// backslash or of an eight-byte boundary, bytes of 0x80 and more.
func FuzzScanString(f *testing.F) {
	for _, s := range []string{`"abc"`, `"a\"b"`, `"a\\"`, `"a\`, "\"abcdefgh\x1fijk\"", "\"abcdefg\\\x01h\"", "\"\xff\xfe\x80\x1f\"",
		`"` + strings.Repeat(`\n`, 40) + `x"`, "\"" + strings.Repeat("é", 20) + "\x00\"", `"never ends`, `"\u00e9"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		buf := append([]byte{'"'}, b...)
		e1, x1, err1 := scanString(buf, 0)
		e2, x2, err2 := scanStringBytewise(buf, 0)
		if e1 != e2 || x1 != x2 || !errors.Is(err1, err2) || !errors.Is(err2, err1) {
			t.Fatalf("%q: scanString = %d, %v, %v; byte by byte %d, %v, %v", buf, e1, x1, err1, e2, x2, err2)
		}
	})
}

func TestHasControl(t *testing.T) {
	for c := range 256 {
		for at := range 17 {
			b := []byte(strings.Repeat("a", 17))
			b[at] = byte(c)
			if got := hasControl(b); got != (c < 0x20) {
				t.Fatalf("byte %#x at %d of %q: hasControl %v", c, at, b, got)
			}
		}
	}
}
