package jsonscan

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/llmgw/llmgw/internal/bounded"
	"github.com/llmgw/llmgw/internal/testing/hostile"
)

func TestScanModel(t *testing.T) {
	tests := []struct {
		name    string
		body    string
		want    string
		wantErr error
	}{
		{"first", `{"model":"m","messages":[]}`, "m", nil},
		{"spaces", " \n{ \"model\" :\t\"m 1\" }", "m 1", nil},
		{"after nested", `{"messages":[{"role":"user","content":"a \"model\": \"x\" {[}"}],"n":1,"x":null,"model":"llama-3.1-8b"}`, "llama-3.1-8b", nil},
		{"nested model ignored", `{"extra":{"model":"no"},"model":"yes"}`, "yes", nil},
		{"escaped value", `{"model":"a\/b\u0041"}`, "a/bA", nil},
		{"escaped key", `{"mod\u0065l":"k"}`, "k", nil},
		{"first wins", `{"model":"a","model":"b"}`, "a", nil},
		{"numbers and literals", `{"t":-1.5e3,"b":true,"s":[1,2,{"a":[]}],"model":"m"}`, "m", nil},
		{"no model", `{"messages":[]}`, "", ErrNoModel},
		{"empty object", `{}`, "", ErrNoModel},
		{"model not string", `{"model":42}`, "", ErrModelNotString},
		{"model null", `{"model":null}`, "", ErrModelNotString},
		{"array", `["model"]`, "", ErrNotObject},
		{"garbage", `model=m`, "", ErrNotObject},
		{"bad separator", `{"a" 1}`, "", ErrBadJSON},
		{"bad member", `{"a":1 "model":"m"}`, "", ErrBadJSON},
		{"control char in string", "{\"model\":\"a\nb\"}", "", ErrBadJSON},
		{"truncated", `{"messages":[{"role":"us`, "", ErrShort},
		{"truncated value", `{"model":"ab`, "", ErrShort},
		{"empty", ``, "", ErrShort},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, _, err := scanModel([]byte(tt.body), 0)
			if !errors.Is(err, tt.wantErr) || got != tt.want {
				t.Errorf("scanModel(%q) = %q, %v; want %q, %v", tt.body, got, err, tt.want, tt.wantErr)
			}
		})
	}
}

// Resuming from what an ErrShort answer said finds what a whole scan does,
// for every place the buffer could have ended.
func TestScanModelResume(t *testing.T) {
	body := `{"messages":[{"role":"user","content":"hi, \"model\""}], "max_tokens": 5 , "stream":true,"model":"m-1","x":[]}`
	for cut := range len(body) {
		model, resume, err := scanModel([]byte(body[:cut]), 0)
		if err == nil {
			if model != "m-1" {
				t.Fatalf("cut %d: model %q", cut, model)
			}
			continue
		}
		if !errors.Is(err, ErrShort) {
			t.Fatalf("cut %d: %v", cut, err)
		}
		model, _, err = scanModel([]byte(body), resume)
		if err != nil || model != "m-1" {
			t.Fatalf("cut %d, resume %d: got %q, %v; want m-1", cut, resume, model, err)
		}
	}
}

// FuzzScanModel checks the scanner against encoding/json: whenever it
// finds a model in a valid JSON object, that object's first "model" member
// is that string; it never panics, and a resume point always resumes.
func FuzzScanModel(f *testing.F) {
	for _, s := range []string{`{"model":"m"}`, `{"a":[1,{"b":"}"}],"model":"x\u00e9"}`, `{"model":1}`, `[]`, `{"a":"\"`, ` {"m":{}, "model" : "q" }`} {
		f.Add(s)
	}
	for _, b := range hostile.JSONSeeds() {
		f.Add(string(b))
	}
	f.Fuzz(func(t *testing.T, body string) {
		model, resume, err := scanModel([]byte(body), 0)
		if errors.Is(err, ErrShort) && resume > len(body) {
			t.Fatalf("resume %d past the end %d", resume, len(body))
		}
		if err != nil {
			return
		}
		var obj map[string]json.RawMessage
		if json.Unmarshal([]byte(body), &obj) != nil {
			return // the scanner only checks what it reads
		}
		if strings.Count(body, `"model"`) > 1 {
			return // encoding/json keeps the last; the scanner the first
		}
		var want string
		if raw, ok := obj["model"]; ok && json.Unmarshal(raw, &want) == nil && want != model {
			t.Fatalf("scanModel(%q) = %q; encoding/json says %q", body, model, want)
		}
	})
}

func TestCheck(t *testing.T) {
	nest := func(n int) string {
		return `{"model":"m","x":` + strings.Repeat("[", n-1) + strings.Repeat("]", n-1) + `}`
	}
	tests := []struct {
		name      string
		body      string
		wantModel string
		wantErr   error // nil; or errLimit for a *bounded.LimitError
	}{
		{"ok", `{"messages":[{"role":"user","content":"hi"}],"model":"m"}`, "m", nil},
		{"64 levels", nest(64), "m", nil},
		{"65 levels", nest(65), "", errLimit},
		{"a megabyte of brackets", `{"model":"m","x":` + strings.Repeat("[", 1<<20), "", errLimit},
		{"brackets in a string do not nest", `{"model":"m","x":"` + strings.Repeat("[", 1000) + `"}`, "m", nil},
		{"truncated", `{"model":"m","x":[1,`, "", ErrBadJSON},
		{"trailing garbage", `{"model":"m"} x`, "", ErrBadJSON},
		{"model then garbage", `{"model":"m","x":}`, "", ErrBadJSON},
		{"not an object", `["model"]`, "", ErrNotObject},
		{"no model", `{"x":1}`, "", ErrNoModel},
		{"model not a string", `{"model":1}`, "", ErrModelNotString},
		{"empty", ``, "", ErrNoModel},
		{"model twice", `{"model":"base","messages":[],"model":"secret-adapter"}`, "", ErrModelTwice},
		{"model twice, escaped", `{"model":"base","mod\u0065l":"other"}`, "", ErrModelTwice},
		{"model twice, the second not a string", `{"model":"base","model":1}`, "", ErrModelTwice},
		{"model inside a value is another member's", `{"model":"m","x":{"model":"n"},"y":[{"model":"o"}]}`, "m", nil},
		{"a key that holds model", `{"model":"m","models":"n","xmodel":"o"}`, "m", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			model, err := Check([]byte(tt.body), 64)
			switch {
			case errors.Is(tt.wantErr, errLimit):
				if !bounded.IsLimit(err) || !strings.Contains(err.Error(), "64") {
					t.Errorf("got %q, %v; want the depth limit, naming 64", model, err)
				}
			case !errors.Is(err, tt.wantErr) || model != tt.wantModel:
				t.Errorf("got %q, %v; want %q, %v", model, err, tt.wantModel, tt.wantErr)
			}
		})
	}
}

var errLimit = errors.New("a *bounded.LimitError")

// FuzzCheck: what Check lets through to an engine is well-formed JSON
// nested at most the limit, an object whose "model" is the string it
// returns; deep and huge seeds included.
func FuzzCheck(f *testing.F) {
	f.Add(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`)
	f.Add(`{"model":"m","x":[[[[[[1]]]]]]}`)
	for _, b := range hostile.JSONSeeds() {
		f.Add(string(b))
	}
	f.Fuzz(func(t *testing.T, body string) {
		model, err := Check([]byte(body), 8)
		if err != nil {
			return
		}
		var v map[string]any
		if json.Unmarshal([]byte(body), &v) != nil {
			t.Fatalf("accepted %q, which is not a JSON object", body)
		}
		if m, _ := v["model"].(string); m != model {
			t.Fatalf("model %q, the body says %q", model, v["model"])
		}
		if bounded.JSONDepth([]byte(body), 8) != nil {
			t.Fatalf("accepted %q, deeper than 8", body)
		}
	})
}

// FuzzValidMatchesEncodingJSON: Check's test of form (fastjson's validator,
// then every string looked at for control characters) takes what
// encoding/json's Valid takes, and refuses what it refuses.
func FuzzValidMatchesEncodingJSON(f *testing.F) {
	for _, s := range []string{`{}`, `{"a":1}`, `[1,2]`, `"x"`, `1e5`, `01`, `-0.5E+3`, `{"a":"\u00zz"}`, "\"\xff\"",
		`{"a":1,}`, " 1 ", `nul`, `-`, `1.`, `"\t"`, "\"a\x01\"", "\"\x1d\\b\"", "{\"a\":\"\r\\b\"}", `[1 2]`, `{"a" 1}`,
		"\ufeff{}", `{"a":"\ud800"}`, `[[[[]]]]`, `tru`, `{"a":true,"b":[null,false]}`} {
		f.Add([]byte(s))
	}
	for _, b := range hostile.JSONSeeds() {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if bounded.JSONDepth(b, bounded.MaxDepth) != nil {
			return // Check refuses it before the test of form
		}
		if got, want := valid(b), json.Valid(b); got != want {
			t.Fatalf("%q: valid %v, encoding/json %v", b, got, want)
		}
	})
}

// BenchmarkCheck is what the gateway reads of a request's body before it
// sends it on: Check (nesting, form, the model) and the top-level members
// (Members, as the gateway's limits read them), of a one-line chat and of
// one with a 16 kB system prompt. docs/perf.md has the numbers.
func BenchmarkCheck(b *testing.B) {
	long := strings.Repeat("The quick brown fox jumps over the lazy dog. ", 350)
	for _, body := range []struct{ name, json string }{
		{"short", `{"model":"m","messages":[{"role":"user","content":"hello there"}],"max_tokens":1}`},
		{"16kB", `{"model":"m","messages":[{"role":"system","content":"` + long + `"},{"role":"user","content":"hello"}],"max_tokens":64,"stream":false}`},
	} {
		buf := []byte(body.json)
		b.Run("Check/"+body.name, func(b *testing.B) {
			b.SetBytes(int64(len(buf)))
			for b.Loop() {
				if _, err := Check(buf, bounded.MaxDepth); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("Members/"+body.name, func(b *testing.B) {
			b.SetBytes(int64(len(buf)))
			for b.Loop() {
				if !Members(buf, func([]byte, int, int) bool { return true }) {
					b.Fatal("not an object")
				}
			}
		})
	}
}
