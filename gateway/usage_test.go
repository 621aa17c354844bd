package gateway

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestWithIncludeUsage(t *testing.T) {
	for _, tt := range []struct {
		name, in, want string
		ok             bool
	}{
		{"absent", `{"model":"m","stream":true}`, `{"stream_options":{"include_usage":true},"model":"m","stream":true}`, true},
		{"space before", ` { "model":"m","stream":true}`, ` {"stream_options":{"include_usage":true}, "model":"m","stream":true}`, true},
		{"other options kept", `{"model":"m","stream":true,"stream_options":{"continuous_usage_stats":false}}`,
			`{"model":"m","stream":true,"stream_options":{"continuous_usage_stats":false,"include_usage":true}}`, true},
		{"asked false", `{"stream_options":{"include_usage":false},"model":"m","stream":true}`,
			`{"stream_options":{"include_usage":true},"model":"m","stream":true}`, true},
		{"null", `{"model":"m","stream":true,"stream_options":null}`, `{"model":"m","stream":true,"stream_options":{"include_usage":true}}`, true},
		{"not an object", `{"model":"m","stream":true,"stream_options":7}`, `{"model":"m","stream":true,"stream_options":7}`, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := readRequestFields([]byte(tt.in))
			if !f.stream || f.includeUsage {
				t.Fatalf("fields %+v", f)
			}
			got, ok := withIncludeUsage([]byte(tt.in), f)
			if string(got) != tt.want || ok != tt.ok {
				t.Errorf("got %s %v, want %s %v", got, ok, tt.want, tt.ok)
			}
			if !json.Valid(got) {
				t.Errorf("not JSON: %s", got)
			}
		})
	}
}

func TestReadRequestFields(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want requestFields
	}{
		{`{"model":"m","max_tokens":12,"messages":[{"max_tokens":99}]}`, requestFields{maxTokens: 12, optsAt: [2]int{-1, -1}}},
		{`{"max_completion_tokens":40,"model":"m","max_tokens":1}`, requestFields{maxTokens: 40, optsAt: [2]int{-1, -1}}},
		{`{"model":"m","stream":false}`, requestFields{maxTokens: -1, optsAt: [2]int{-1, -1}}},
		{`{"model":"m","stream":true,"stream_options":{"include_usage":true}}`, requestFields{maxTokens: -1, stream: true, includeUsage: true, optsAt: [2]int{44, 66}}},
	} {
		if diff := cmp.Diff(tt.want, readRequestFields([]byte(tt.in)), cmp.AllowUnexported(requestFields{})); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tt.in, diff)
		}
	}
}

func TestResponseUsage(t *testing.T) {
	u, ok := responseUsage([]byte(`{"id":"x","choices":[{"usage":{"total_tokens":1}}],"usage":{"prompt_tokens":3,"completion_tokens":4,"total_tokens":7}}`))
	if !ok || u != (Usage{3, 4, 7}) {
		t.Errorf("usage %+v %v", u, ok)
	}
	if u, ok := responseUsage([]byte(`{"usage":{"prompt_tokens":2,"completion_tokens":1e1}}`)); ok {
		t.Errorf("usage with a float count: %+v", u)
	}
	if u, ok := responseUsage([]byte(`{"usage":{"prompt_tokens":2,"prompt_tokens_details":{"cached_tokens":1},"completion_tokens":5}}`)); !ok || u != (Usage{2, 5, 0}) || u.total() != 7 {
		t.Errorf("usage with details: %+v %v", u, ok)
	}
	if _, ok := responseUsage([]byte(`{"id":"x","usage":null}`)); ok {
		t.Error("null usage found")
	}
	if _, ok := responseUsage([]byte(`not json`)); ok {
		t.Error("usage in not JSON")
	}
}

// TestSSEUsageSplit: the usage chunk is found and stripped however the
// stream is cut into reads; every other byte reaches the client as sent.
func TestSSEUsageSplit(t *testing.T) {
	events := []string{
		"data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}],\"usage\":null}\n\n",
		"data: {\"choices\":[{\"delta\":{\"content\":\"b\"}}]}\r\n\r\n",
		"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":2,\"completion_tokens\":2,\"total_tokens\":4}}\n\n",
		"data: [DONE]\n\n",
	}
	stream := strings.Join(events, "")
	want := events[0] + events[1] + events[3]
	for _, strip := range []bool{true, false} {
		for cut := 1; cut <= len(stream); cut++ {
			s := &sseUsage{strip: strip}
			var out []byte
			for i := 0; i < len(stream); i += cut {
				out = s.feed([]byte(stream[i:min(i+cut, len(stream))]), out)
			}
			out = s.rest(out)
			w := want
			if !strip {
				w = stream
			}
			if string(out) != w {
				t.Fatalf("strip %v, reads of %d: got %q", strip, cut, out)
			}
			if !s.found || s.usage != (Usage{2, 2, 4}) {
				t.Fatalf("strip %v, reads of %d: usage %+v %v", strip, cut, s.usage, s.found)
			}
		}
	}
}

// FuzzSSEUsage: however a stream is cut into reads, the filter passes it
// through byte for byte when not stripping, and when stripping leaves out
// only whole events that carry usage.
func FuzzSSEUsage(f *testing.F) {
	f.Add("data: {\"choices\":[],\"usage\":{\"prompt_tokens\":1}}\n\ndata: [DONE]\n\n", 3)
	f.Add("data: {\"choices\":[{}],\"usage\":null}\r\n\r\n: comment\n\n", 1)
	f.Fuzz(func(t *testing.T, stream string, cut int) {
		cut = max(1, cut%64+1)
		for _, strip := range []bool{false, true} {
			s := &sseUsage{strip: strip}
			var out []byte
			for i := 0; i < len(stream); i += cut {
				out = s.feed([]byte(stream[i:min(i+cut, len(stream))]), out)
			}
			out = s.rest(out)
			if !strip && string(out) != stream {
				t.Fatalf("not stripping, got %q from %q", out, stream)
			}
			if strip && len(out) > len(stream) {
				t.Fatalf("stripping grew the stream: %q from %q", out, stream)
			}
		}
	})
}
