package gateway

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

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
		{"no model", `{"messages":[]}`, "", errNoModel},
		{"empty object", `{}`, "", errNoModel},
		{"model not string", `{"model":42}`, "", errModelNotString},
		{"model null", `{"model":null}`, "", errModelNotString},
		{"array", `["model"]`, "", errNotObject},
		{"garbage", `model=m`, "", errNotObject},
		{"bad separator", `{"a" 1}`, "", errBadJSON},
		{"bad member", `{"a":1 "model":"m"}`, "", errBadJSON},
		{"control char in string", "{\"model\":\"a\nb\"}", "", errBadJSON},
		{"truncated", `{"messages":[{"role":"us`, "", errShort},
		{"truncated value", `{"model":"ab`, "", errShort},
		{"empty", ``, "", errShort},
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

// Resuming from what an errShort answer said finds what a whole scan does,
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
		if !errors.Is(err, errShort) {
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
		if errors.Is(err, errShort) && resume > len(body) {
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
