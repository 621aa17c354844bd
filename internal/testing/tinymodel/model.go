package tinymodel

import (
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
)

// Options are a tiny model's sizes and answer.
type Options struct {
	// Vocab is the GGUF file to copy the tokenizer from.
	Vocab string
	// Name is general.name (and what /v1/models shows without --alias).
	Name string
	// Answer is what the model says, and then stops. Its tokens (found by
	// longest match in the vocabulary) must all differ, and there must be
	// fewer of them than Embed.
	Answer string
	// Layers, Embed, Heads and FF are the transformer's block count,
	// embedding width, attention heads and feed-forward width.
	Layers, Embed, Heads, FF int
	// Context is the trained context length (llama.context_length).
	Context int
	// Type is the weights' type: F32 or Q8_0 (Q8_0 needs Embed and FF
	// multiples of 32). Norms are always F32.
	Type TensorType
	// Seed seeds the layers' weights.
	Seed uint64
}

// Defaults: the 2-layer, 64-wide model that loads in about 0.2 s.
var Defaults = Options{
	Name: "llmgw-tiny", Answer: "Hello world!",
	Layers: 2, Embed: 64, Heads: 4, FF: 128, Context: 4096, Type: Q8_0, Seed: 1,
}

// Margin is the logit by which the chain's next token beats every other.
const Margin = 64

// chatTemplate is ChatML, which llama.cpp recognises both as a Jinja
// template and by its own template detection.
const chatTemplate = "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"

// Token types (llama.h enum llama_token_type / gguf tokenizer.ggml.token_type).
const tokenNormal = 1

// Write writes the model o describes to path (through a temporary file in
// the same folder, so that a reader never sees half a model).
func Write(path string, o Options) error {
	kvs, tensors, err := build(o)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tinymodel-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) //nolint:errcheck // gone after the rename
	if err := Encode(tmp, kvs, tensors); err != nil {
		tmp.Close() //nolint:errcheck,gosec // the write error is the one to report
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return os.Rename(tmp.Name(), path)
}

// AnswerTokens returns the vocabulary ids the answer is spelled with.
func AnswerTokens(vocab *File, answer string) ([]int, error) {
	tokens, types, err := vocabOf(vocab)
	if err != nil {
		return nil, err
	}
	return spell(tokens, types, answer)
}

func vocabOf(vocab *File) ([]string, []int32, error) {
	tv, ok := vocab.Get("tokenizer.ggml.tokens")
	if !ok || tv.Type != TypeArray || tv.Elem != TypeString {
		return nil, nil, errors.New("no tokenizer.ggml.tokens string array")
	}
	xs := tv.V.([]any)
	tokens := make([]string, len(xs))
	for i, x := range xs {
		tokens[i] = x.(string)
	}
	types := make([]int32, len(tokens))
	for i := range types {
		types[i] = tokenNormal
	}
	if tt, ok := vocab.Get("tokenizer.ggml.token_type"); ok && tt.Type == TypeArray && tt.Elem == TypeInt32 {
		for i, x := range tt.V.([]any) {
			if i < len(types) {
				types[i] = x.(int32)
			}
		}
	}
	return tokens, types, nil
}

// spell splits answer into vocabulary tokens by longest match, spaces
// written as SentencePiece's '▁'.
func spell(tokens []string, types []int32, answer string) ([]int, error) {
	if answer == "" {
		return nil, errors.New("answer: empty")
	}
	byText := map[string]int{}
	longest := 0
	for i, t := range tokens {
		if types[i] != tokenNormal {
			continue
		}
		if _, dup := byText[t]; !dup {
			byText[t] = i
		}
		longest = max(longest, len(t))
	}
	s := strings.ReplaceAll(answer, " ", "▁")
	var ids []int
	for len(s) > 0 {
		found := false
		for n := min(longest, len(s)); n > 0; n-- {
			if id, ok := byText[s[:n]]; ok {
				ids = append(ids, id)
				s = s[n:]
				found = true
				break
			}
		}
		if !found {
			return nil, fmt.Errorf("answer: no vocabulary token starts %q", s)
		}
	}
	seen := map[int]bool{}
	for _, id := range ids {
		if seen[id] {
			return nil, fmt.Errorf("answer %q: token %q appears twice; the model's state is its last token, so every token of the answer must differ", answer, tokens[id])
		}
		seen[id] = true
	}
	return ids, nil
}

func (o Options) check() error {
	var errs []error
	if o.Layers < 1 {
		errs = append(errs, fmt.Errorf("layers: %d, want at least 1", o.Layers))
	}
	if o.Heads < 1 || o.Embed < 1 || o.Embed%o.Heads != 0 || (o.Embed/o.Heads)%2 != 0 {
		errs = append(errs, fmt.Errorf("embed %d, heads %d: the embedding must split into heads of an even width", o.Embed, o.Heads))
	}
	if o.FF < 1 {
		errs = append(errs, fmt.Errorf("ff: %d, want at least 1", o.FF))
	}
	if o.Context < 16 {
		errs = append(errs, fmt.Errorf("context: %d, want at least 16", o.Context))
	}
	switch o.Type {
	case F32:
	case Q8_0:
		if o.Embed%qk8 != 0 || o.FF%qk8 != 0 {
			errs = append(errs, fmt.Errorf("type q8_0: embed (%d) and ff (%d) must be multiples of %d", o.Embed, o.FF, qk8))
		}
	default:
		errs = append(errs, fmt.Errorf("type: %v, want f32 or q8_0", o.Type))
	}
	if o.Vocab == "" {
		errs = append(errs, errors.New("vocab: no vocabulary file given"))
	}
	return errors.Join(errs...)
}

func build(o Options) ([]KV, []Tensor, error) {
	if err := o.check(); err != nil {
		return nil, nil, err
	}
	vocab, err := ReadFile(o.Vocab)
	if err != nil {
		return nil, nil, fmt.Errorf("vocab: %w", err)
	}
	tokens, types, err := vocabOf(vocab)
	if err != nil {
		return nil, nil, fmt.Errorf("vocab %s: %w", o.Vocab, err)
	}
	answer, err := spell(tokens, types, o.Answer)
	if err != nil {
		return nil, nil, err
	}
	if len(answer)+1 > o.Embed {
		return nil, nil, fmt.Errorf("answer %q: %d tokens need an embedding wider than %d", o.Answer, len(answer), o.Embed)
	}
	eos := -1
	if v, ok := vocab.Get("tokenizer.ggml.eos_token_id"); ok {
		if id, ok := v.V.(uint32); ok {
			eos = int(id)
		}
	}
	if eos < 0 || eos >= len(tokens) {
		return nil, nil, fmt.Errorf("vocab %s: no tokenizer.ggml.eos_token_id", o.Vocab)
	}

	fileType := uint32(0) // LLAMA_FTYPE_ALL_F32
	if o.Type == Q8_0 {
		fileType = 7 // LLAMA_FTYPE_MOSTLY_Q8_0
	}
	u32 := func(n int) Value { return Value{Type: TypeUint32, V: uint32(n)} }
	kvs := []KV{
		{"general.architecture", Value{Type: TypeString, V: "llama"}},
		{"general.name", Value{Type: TypeString, V: o.Name}},
		{"general.file_type", u32(int(fileType))},
		{"llama.vocab_size", u32(len(tokens))},
		{"llama.context_length", u32(o.Context)},
		{"llama.embedding_length", u32(o.Embed)},
		{"llama.block_count", u32(o.Layers)},
		{"llama.feed_forward_length", u32(o.FF)},
		{"llama.attention.head_count", u32(o.Heads)},
		{"llama.attention.head_count_kv", u32(o.Heads)},
		{"llama.rope.dimension_count", u32(o.Embed / o.Heads)},
		{"llama.attention.layer_norm_rms_epsilon", Value{Type: TypeFloat32, V: float32(1e-5)}},
	}
	for _, kv := range vocab.KVs {
		if strings.HasPrefix(kv.Key, "tokenizer.") && kv.Key != "tokenizer.chat_template" {
			kvs = append(kvs, kv)
		}
	}
	kvs = append(kvs, KV{"tokenizer.chat_template", Value{Type: TypeString, V: chatTemplate}})

	// state[t] is the direction token t embeds to: 0 for every token the
	// answer does not use, k+1 for the answer's k-th token.
	state := make(map[int]int, len(answer))
	for k, id := range answer {
		state[id] = k + 1
	}
	// next[s] is the token the output row picks from state s.
	next := make(map[int]int, len(answer)+1)
	for k, id := range answer {
		next[id] = k // from state k (0: any other token) to the answer's k-th token
	}
	next[eos] = len(answer)
	// After RMS norm a one-hot embedding is sqrt(Embed) in its direction,
	// so an output weight of Margin/sqrt(Embed) gives a logit of Margin.
	out := float32(Margin / math.Sqrt(float64(o.Embed)))

	n := uint64(o.Embed)
	v := uint64(len(tokens))
	ff := uint64(o.FF)
	ones := func(_ uint64, dst []float32) {
		for i := range dst {
			dst[i] = 1
		}
	}
	zeros := func(uint64, []float32) {}
	tensors := []Tensor{
		{Name: "token_embd.weight", Dims: []uint64{n, v}, Type: o.Type, Row: func(i uint64, dst []float32) {
			dst[state[int(i)]] = 1
		}},
		{Name: "output_norm.weight", Dims: []uint64{n}, Type: F32, Row: ones},
		{Name: "output.weight", Dims: []uint64{n, v}, Type: o.Type, Row: func(i uint64, dst []float32) {
			if s, ok := next[int(i)]; ok {
				dst[s] = out
			}
		}},
	}
	for l := range o.Layers {
		rnd := func(name string) func(uint64, []float32) {
			return func(i uint64, dst []float32) {
				r := rand.New(rand.NewPCG(o.Seed, uint64(l)<<40^uint64(len(name))<<32^i^hash(name)))
				for j := range dst {
					dst[j] = float32(r.Float64()*0.04 - 0.02)
				}
			}
		}
		p := fmt.Sprintf("blk.%d.", l)
		tensors = append(tensors,
			Tensor{Name: p + "attn_norm.weight", Dims: []uint64{n}, Type: F32, Row: ones},
			Tensor{Name: p + "attn_q.weight", Dims: []uint64{n, n}, Type: o.Type, Row: rnd("q")},
			Tensor{Name: p + "attn_k.weight", Dims: []uint64{n, n}, Type: o.Type, Row: rnd("k")},
			Tensor{Name: p + "attn_v.weight", Dims: []uint64{n, n}, Type: o.Type, Row: rnd("v")},
			Tensor{Name: p + "attn_output.weight", Dims: []uint64{n, n}, Type: o.Type, Row: zeros},
			Tensor{Name: p + "ffn_norm.weight", Dims: []uint64{n}, Type: F32, Row: ones},
			Tensor{Name: p + "ffn_gate.weight", Dims: []uint64{n, ff}, Type: o.Type, Row: rnd("gate")},
			Tensor{Name: p + "ffn_up.weight", Dims: []uint64{n, ff}, Type: o.Type, Row: rnd("up")},
			Tensor{Name: p + "ffn_down.weight", Dims: []uint64{ff, n}, Type: o.Type, Row: zeros},
		)
	}
	return kvs, tensors, nil
}

func hash(s string) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(s))
	return h.Sum64()
}
