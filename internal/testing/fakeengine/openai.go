package fakeengine

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"strings"
)

// OpenAI request and response shapes, as far as fake-engine reads and
// writes them.

type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

type chatMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

type chatRequest struct {
	Model               string         `json:"model"`
	Messages            []chatMessage  `json:"messages"`
	MaxTokens           *int           `json:"max_tokens"`
	MaxCompletionTokens *int           `json:"max_completion_tokens"`
	Stream              bool           `json:"stream"`
	StreamOptions       *streamOptions `json:"stream_options"`
}

type completionRequest struct {
	Model         string          `json:"model"`
	Prompt        json.RawMessage `json:"prompt"`
	MaxTokens     *int            `json:"max_tokens"`
	Stream        bool            `json:"stream"`
	StreamOptions *streamOptions  `json:"stream_options"`
}

type embeddingRequest struct {
	Model          string          `json:"model"`
	Input          json.RawMessage `json:"input"`
	Dimensions     *int            `json:"dimensions"`
	EncodingFormat string          `json:"encoding_format"`
}

type usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

type message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

type delta struct {
	Role    string  `json:"role,omitempty"`
	Content *string `json:"content,omitempty"`
}

type chatChoice struct {
	Index        int       `json:"index"`
	Message      *message  `json:"message,omitempty"`
	Delta        *delta    `json:"delta,omitempty"`
	Logprobs     *struct{} `json:"logprobs"`
	FinishReason *string   `json:"finish_reason"`
}

type chatResponse struct {
	ID      string       `json:"id"`
	Object  string       `json:"object"`
	Created int64        `json:"created"`
	Model   string       `json:"model"`
	Choices []chatChoice `json:"choices"`
	Usage   *usage       `json:"usage,omitempty"`
}

type completionChoice struct {
	Index        int       `json:"index"`
	Text         string    `json:"text"`
	Logprobs     *struct{} `json:"logprobs"`
	FinishReason *string   `json:"finish_reason"`
}

type completionResponse struct {
	ID      string             `json:"id"`
	Object  string             `json:"object"`
	Created int64              `json:"created"`
	Model   string             `json:"model"`
	Choices []completionChoice `json:"choices"`
	Usage   *usage             `json:"usage,omitempty"`
}

type embedding struct {
	Object    string `json:"object"`
	Index     int    `json:"index"`
	Embedding any    `json:"embedding"`
}

type embeddingResponse struct {
	Object string      `json:"object"`
	Data   []embedding `json:"data"`
	Model  string      `json:"model"`
	Usage  usage       `json:"usage"`
}

type modelCard struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
	Root    string `json:"root"`
	// Parent is an adapter's base model (vLLM's LoRA cards).
	Parent      *string `json:"parent,omitempty"`
	MaxModelLen int     `json:"max_model_len,omitempty"`
}

type modelList struct {
	Object string      `json:"object"`
	Data   []modelCard `json:"data"`
}

type apiError struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    int     `json:"code"`
}

type errorResponse struct {
	Error apiError `json:"error"`
}

// errBadInput is the sentinel for request bodies fake-engine cannot read.
var errBadInput = errors.New("bad input")

// input is one prompt or embedding input: its text (or, for token arrays,
// their JSON) and its length in tokens.
type input struct {
	text   string
	tokens int
}

// parseInputs reads OpenAI's prompt/input union: a string, an array of
// strings, an array of token ids, or an array of arrays of token ids.
func parseInputs(raw json.RawMessage) ([]input, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil, fmt.Errorf("%w: missing input", errBadInput)
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return []input{textInput(s)}, nil
	}
	var ss []string
	if json.Unmarshal(raw, &ss) == nil && len(ss) > 0 {
		in := make([]input, len(ss))
		for i, s := range ss {
			in[i] = textInput(s)
		}
		return in, nil
	}
	var ids []int64
	if json.Unmarshal(raw, &ids) == nil && len(ids) > 0 {
		return []input{{text: string(raw), tokens: len(ids)}}, nil
	}
	var idss []json.RawMessage
	if json.Unmarshal(raw, &idss) == nil && len(idss) > 0 {
		in := make([]input, 0, len(idss))
		for _, r := range idss {
			if json.Unmarshal(r, &ids) != nil || len(ids) == 0 {
				return nil, fmt.Errorf("%w: input must be a string, strings, token ids or arrays of token ids", errBadInput)
			}
			in = append(in, input{text: string(r), tokens: len(ids)})
		}
		return in, nil
	}
	return nil, fmt.Errorf("%w: input must be a string, strings, token ids or arrays of token ids", errBadInput)
}

func textInput(s string) input {
	return input{text: s, tokens: max(1, len(strings.Fields(s)))}
}

// messageText flattens a chat message's content: a string, or an array of
// parts of which the text ones count.
func messageText(raw json.RawMessage) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return "", nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, nil
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", fmt.Errorf("%w: message content must be a string or an array of parts", errBadInput)
	}
	var texts []string
	for _, p := range parts {
		if p.Type == "text" {
			texts = append(texts, p.Text)
		}
	}
	return strings.Join(texts, " "), nil
}

// words are what fake models say.
var words = strings.Fields(`the quick brown fox jumps over a lazy dog while
llamas graze beside racks of humming GPUs and engineers watch power meters
tick upward as tokens stream out one by one from a model that knows nothing
at all but answers every prompt politely with calm deterministic prose`)

// seed hashes the model and prompt into a generator seed.
func seed(parts ...string) uint64 {
	h := fnv.New64a()
	for _, p := range parts {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	return h.Sum64()
}

// splitmix64 is a small, stable pseudo-random sequence: the same seed gives
// the same output on every platform and Go version.
type splitmix64 uint64

func (s *splitmix64) next() uint64 {
	*s += 0x9e3779b97f4a7c15
	z := uint64(*s)
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// Tokens returns the n tokens a fake model generates for a prompt: words,
// each after the first with a leading space, so they join into the text.
func Tokens(model, prompt string, n int) []string {
	r := splitmix64(seed(model, prompt))
	toks := make([]string, n)
	for i := range toks {
		w := words[r.next()%uint64(len(words))]
		if i > 0 {
			w = " " + w
		}
		toks[i] = w
	}
	return toks
}

// Embedding returns a deterministic unit vector of dim elements for text.
func Embedding(model, text string, dim int) []float32 {
	r := splitmix64(seed(model, text))
	v := make([]float32, dim)
	var sum float64
	for i := range v {
		f := float64(r.next()>>11)/float64(1<<53)*2 - 1
		v[i] = float32(f)
		sum += f * f
	}
	if norm := math.Sqrt(sum); norm > 0 {
		for i := range v {
			v[i] = float32(float64(v[i]) / norm)
		}
	}
	return v
}

// base64Floats encodes a vector as OpenAI's encoding_format "base64" does:
// little-endian float32s.
func base64Floats(v []float32) string {
	b := make([]byte, 4*len(v))
	for i, f := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(f))
	}
	return base64.StdEncoding.EncodeToString(b)
}

// ChatMessage is one chat message's role and text.
type ChatMessage struct{ Role, Content string }

// ChatPrompt is the prompt fake-engine reads a chat as, which its answer
// is drawn from (Tokens), and its length in tokens: each message's role
// and text on a line ("role: text"), a token per word and one per
// message.
func ChatPrompt(msgs []ChatMessage) (prompt string, tokens int) {
	lines := make([]string, len(msgs))
	for i, m := range msgs {
		lines[i] = m.Role + ": " + m.Content
		tokens += len(strings.Fields(m.Content)) + 1
	}
	return strings.Join(lines, "\n"), tokens
}
