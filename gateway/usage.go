package gateway

import (
	"bytes"
	"encoding/json"
	"strconv"

	"github.com/llmgw/llmgw/internal/jsonscan"
)

// Usage is the token usage an answer reports (OpenAI's "usage").
type Usage struct {
	PromptTokens     int64 `json:"prompt_tokens"`
	CompletionTokens int64 `json:"completion_tokens"`
	TotalTokens      int64 `json:"total_tokens"`
}

// total is the tokens the usage charges.
func (u Usage) total() int64 {
	if u.TotalTokens > 0 {
		return u.TotalTokens
	}
	return u.PromptTokens + u.CompletionTokens
}

// requestFields are what the gateway reads of a whole request body when
// keys are on: the completion tokens it may ask for, and whether it is a
// stream that asked for usage.
type requestFields struct {
	maxTokens    int64 // max_tokens or max_completion_tokens; -1: neither
	stream       bool
	includeUsage bool
	optsAt       [2]int // stream_options' value, {-1, -1} when absent
}

func readRequestFields(buf []byte) requestFields {
	f := requestFields{maxTokens: -1, optsAt: [2]int{-1, -1}}
	jsonscan.Members(buf, func(key []byte, vs, ve int) bool {
		switch string(key) {
		case "max_tokens", "max_completion_tokens":
			if n, err := strconv.ParseInt(string(buf[vs:ve]), 10, 64); err == nil && n > f.maxTokens {
				f.maxTokens = n
			}
		case "stream":
			f.stream = string(buf[vs:ve]) == "true"
		case "stream_options":
			f.optsAt = [2]int{vs, ve}
			var o struct {
				IncludeUsage bool `json:"include_usage"`
			}
			if json.Unmarshal(buf[vs:ve], &o) == nil {
				f.includeUsage = o.IncludeUsage
			}
		}
		return true
	})
	return f
}

// withIncludeUsage returns body with stream_options.include_usage set to
// true: stream_options added first in the object when absent, or its
// value replaced by the same object with include_usage true. ok is false
// when stream_options is there and is not an object (or null): the body is
// left alone.
func withIncludeUsage(body []byte, f requestFields) (out []byte, ok bool) {
	if f.optsAt[0] < 0 {
		return withMember(body, []byte(`"stream_options":{"include_usage":true},`)), true
	}
	raw := body[f.optsAt[0]:f.optsAt[1]]
	var opts map[string]json.RawMessage
	if err := json.Unmarshal(raw, &opts); err != nil {
		return body, false
	}
	if opts == nil {
		opts = map[string]json.RawMessage{}
	}
	opts["include_usage"] = json.RawMessage("true")
	val, err := json.Marshal(opts)
	if err != nil {
		return body, false
	}
	out = make([]byte, 0, len(body)+len(val))
	out = append(out, body[:f.optsAt[0]]...)
	out = append(out, val...)
	return append(out, body[f.optsAt[1]:]...), true
}

// responseUsage reads the top-level "usage" of a whole JSON answer.
func responseUsage(buf []byte) (Usage, bool) {
	u, found, _ := answerUsage(buf)
	return u, found
}

// answerUsage reads the top-level "usage" of a whole JSON answer (or
// stream chunk), and what it says of the engine's prompt cache: from
// "usage", or llama.cpp's "timings".
func answerUsage(buf []byte) (u Usage, found bool, c cacheUse) {
	var usage, timings []byte
	jsonscan.Members(buf, func(key []byte, vs, ve int) bool {
		switch string(key) {
		case "usage":
			usage = buf[vs:ve]
			u, found = parseUsage(usage)
		case "timings":
			timings = buf[vs:ve]
		}
		return true
	})
	return u, found, readCache(usage, timings)
}

// cacheUse is what an answer says of the engine's prompt cache: of its
// prompt tokens, how many the engine took from its cache. known is false
// when the answer does not say (no usage, or one without cached tokens):
// that is no miss.
type cacheUse struct {
	prompt, cached int64
	known          bool
}

// readCache reads the cached prompt tokens from an answer's usage
// (OpenAI's usage.prompt_tokens_details.cached_tokens) or, failing that,
// from llama.cpp's timings (cache_n of prompt_n + cache_n).
func readCache(usage, timings []byte) cacheUse {
	var c cacheUse
	jsonscan.Members(usage, func(key []byte, vs, ve int) bool {
		switch string(key) {
		case "prompt_tokens":
			c.prompt, _ = strconv.ParseInt(string(usage[vs:ve]), 10, 64)
		case "prompt_tokens_details":
			d := usage[vs:ve]
			jsonscan.Members(d, func(key []byte, vs, ve int) bool {
				if string(key) == "cached_tokens" {
					n, err := strconv.ParseInt(string(d[vs:ve]), 10, 64)
					c.cached, c.known = n, err == nil && n >= 0
					return false
				}
				return true
			})
		}
		return true
	})
	if c.known && c.cached <= c.prompt {
		return c
	}
	var t cacheUse
	var promptN int64
	var gotN bool
	jsonscan.Members(timings, func(key []byte, vs, ve int) bool {
		n, err := strconv.ParseInt(string(timings[vs:ve]), 10, 64)
		switch string(key) {
		case "cache_n":
			t.cached, t.known = n, err == nil && n >= 0
		case "prompt_n":
			promptN, gotN = n, err == nil && n >= 0
		}
		return true
	})
	if t.known && gotN {
		t.prompt = promptN + t.cached
		return t
	}
	return cacheUse{}
}

// parseUsage reads a usage object's three counts without reflection (it
// runs on every answer with keys on); a count that is not an integer is
// left to encoding/json. null is no usage.
func parseUsage(v []byte) (Usage, bool) {
	var u Usage
	bad := false
	object := jsonscan.Members(v, func(key []byte, vs, ve int) bool {
		var dst *int64
		switch string(key) {
		case "prompt_tokens":
			dst = &u.PromptTokens
		case "completion_tokens":
			dst = &u.CompletionTokens
		case "total_tokens":
			dst = &u.TotalTokens
		default:
			return true
		}
		n, err := strconv.ParseInt(string(v[vs:ve]), 10, 64)
		if err != nil {
			bad = true
			return false
		}
		*dst = n
		return true
	})
	if object && !bad {
		return u, true
	}
	var p *Usage
	if json.Unmarshal(v, &p) != nil || p == nil {
		return Usage{}, false
	}
	return *p, true
}

// maxEvent bounds the bytes of one server-sent event the usage filter
// holds back while it waits for the event's end; a longer event passes
// through unread.
const maxEvent = 1 << 20

// sseUsage watches an event stream on its way to the client for the event
// carrying the usage (`"usage": {…}` with no choices, include_usage's last
// chunk) and, when strip is set (the gateway asked for the usage, the
// client did not), leaves that event out of what the client gets. Every
// other byte passes unchanged, each event whole once its end has arrived.
type sseUsage struct {
	strip   bool
	pending []byte
	off     bool // an event too long: pass everything on unread
	usage   Usage
	found   bool
	cache   cacheUse // the last event's that said
}

// feed takes the next bytes from the replica and returns what to send to
// the client now (appended to out).
func (s *sseUsage) feed(p, out []byte) []byte {
	if s.off {
		return append(out, p...)
	}
	s.pending = append(s.pending, p...)
	for {
		end := eventEnd(s.pending)
		if end < 0 {
			break
		}
		ev := s.pending[:end]
		if !s.usageEvent(ev) {
			out = append(out, ev...)
		}
		s.pending = s.pending[end:]
	}
	if len(s.pending) > maxEvent {
		s.off = true
		out = append(out, s.pending...)
		s.pending = nil
	}
	if len(s.pending) == 0 {
		s.pending = s.pending[:0]
	}
	return out
}

// rest returns what is held back at the end of the stream.
func (s *sseUsage) rest(out []byte) []byte {
	out = append(out, s.pending...)
	s.pending = nil
	return out
}

// eventEnd is the offset just past the first event's blank line, -1 when
// b holds no whole event.
func eventEnd(b []byte) int {
	for i := 0; i < len(b); {
		j := bytes.IndexByte(b[i:], '\n')
		if j < 0 {
			return -1
		}
		j += i
		// b[j] ends a line; a blank line follows when the next byte is
		// '\n', or "\r\n".
		switch {
		case j+1 < len(b) && b[j+1] == '\n':
			return j + 2
		case j+2 < len(b) && b[j+1] == '\r' && b[j+2] == '\n':
			return j + 3
		}
		i = j + 1
	}
	return -1
}

// usageEvent records the usage ev carries, if any, and reports whether ev
// is to be left out: a usage-only chunk, when stripping.
func (s *sseUsage) usageEvent(ev []byte) bool {
	hasUsage := bytes.Contains(ev, []byte(`"usage"`))
	if !hasUsage && !bytes.Contains(ev, []byte(`"timings"`)) {
		return false
	}
	var data []byte
	for line := range bytes.SplitSeq(ev, []byte("\n")) {
		line = bytes.TrimSuffix(line, []byte("\r"))
		if d, ok := bytes.CutPrefix(line, []byte("data:")); ok {
			data = append(data, bytes.TrimPrefix(d, []byte(" "))...)
		}
	}
	var chunk struct {
		Usage   json.RawMessage   `json:"usage"`
		Timings json.RawMessage   `json:"timings"`
		Choices []json.RawMessage `json:"choices"`
	}
	if json.Unmarshal(data, &chunk) != nil {
		return false
	}
	if c := readCache(chunk.Usage, chunk.Timings); c.known {
		s.cache = c
	}
	if !hasUsage {
		return false
	}
	u, ok := parseUsage(chunk.Usage)
	if !ok {
		return false
	}
	s.usage, s.found = u, true
	return s.strip && len(chunk.Choices) == 0
}
