package tinymodel

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
)

// AdapterOptions describe a LoRA adapter for the tiny model Base describes:
// with the adapter applied at scale 1 the model answers Answer (and then the
// end of sequence) instead of Base.Answer.
type AdapterOptions struct {
	// Base is the model the adapter is for. Its Vocab, Answer and Embed
	// decide the adapter's tensors; an adapter written for one Embed is
	// refused by a model of another (llama.cpp checks the shapes).
	Base Options
	// Name is general.name.
	Name string
	// Answer is what the model says with the adapter. Its tokens must all
	// differ, and with the base answer's they must be fewer than Embed
	// less MaxSignatures and 2.
	Answer string
	// Signature is the attention value direction the adapter marks the
	// prompt's cache with; adapters served together need different ones,
	// or a cache computed under one reads as the other's. 0 to
	// MaxSignatures-1 always fit; a wider model takes more: any below
	// Embed-2-q, q the gate direction (the base answer's tokens plus the
	// adapter's plus 1), so that its direction lies above every direction
	// the adapter's answer uses.
	Signature int
}

// MaxSignatures is how many adapters with different signatures every
// model an adapter can be written for has room for (an answer too long to
// leave MaxSignatures of them is refused); a wider model has room for
// more (AdapterOptions.Signature).
const MaxSignatures = 8

// Attention constants of the adapters' cache signature: an ordinary
// prompt token's value gains sigValue in the adapter's signature direction,
// and the attention output's signature comes back into the residual
// stream's gate direction times sigGain, so a prompt computed wholly under
// the adapter gives the gate about sigValue × sigGain = 3.
const (
	sigValue = 4
	sigGain  = 0.75
)

// An adapter is a set of low-rank deltas in the form llama.cpp loads
// (src/llama-adapter.cpp, llama_adapter_lora_init_impl, at 80fb11a):
// metadata general.type = "adapter", general.architecture equal to the
// model's, adapter.type = "lora", adapter.lora.alpha; tensors named after
// the model tensor they change with ".lora_a" and ".lora_b". For a matrix
// W of shape [n_in, n_out] (ne[0] first), lora_a is [n_in, r] and lora_b
// [r, n_out], and W·x becomes W·x + s·B·(A·x) (llm_graph_context::
// build_lora_mm) with s = scale·alpha/r. The token embedding is the
// exception: lora_a is [r, n_vocab] and lora_b [r, n_embd], and a token's
// row gains s·B·A[token] (build_inp_embd).
//
// This adapter changes four tensors. Let L be the base answer's length and
// La the adapter's, and q = L+La+1 its gate direction and σ = Embed-1-
// Signature its signature direction.
//   - token_embd: it moves its answer's k-th token to direction L+1+k,
//     which no base token uses, and every other token the base embeds
//     apart (the base answer's) back to direction 0, "any other token".
//   - blk.0.attn_v: an ordinary token (direction 0) gains sigValue in
//     value direction σ, so every position of a prompt computed under the
//     adapter carries its signature in the cache.
//   - blk.0.attn_output (zero in the base): the attention output's σ comes
//     back into the residual's direction q times sigGain. So the gate is
//     about 3 when the prompt was computed under the adapter, and about
//     3/N when only its last token was, the rest coming from a cache
//     computed under another adapter (N the prompt's tokens).
//   - output: from direction 0 it picks its first token with Margin/2 for
//     the state and Margin/2 per unit of gate, so it beats the base's first
//     token (Margin) when the gate is above 1, not when the prompt's cache
//     came from elsewhere; from L+1+k the next token of its answer (the
//     last to the end of sequence) with 3·Margin, which the gate's pull
//     towards the first token never reaches.
//
// The deltas share one basis of rank r = L+La+3: basis j is direction j
// for j ≤ q, and the last is σ. alpha = r, so the adapter's scale is the
// whole factor.

// WriteAdapter writes the adapter a describes to path (through a temporary
// file in the same folder).
func WriteAdapter(path string, a AdapterOptions) error {
	kvs, tensors, err := buildAdapter(a)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tinyadapter-*")
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

func buildAdapter(a AdapterOptions) ([]KV, []Tensor, error) {
	o := a.Base
	if err := o.check(); err != nil {
		return nil, nil, fmt.Errorf("base: %w", err)
	}
	if a.Answer == "" {
		return nil, nil, errors.New("adapter answer: empty")
	}
	vocab, err := ReadFile(o.Vocab)
	if err != nil {
		return nil, nil, fmt.Errorf("vocab: %w", err)
	}
	tokens, types, err := vocabOf(vocab)
	if err != nil {
		return nil, nil, fmt.Errorf("vocab %s: %w", o.Vocab, err)
	}
	base, err := spell(tokens, types, o.Answer)
	if err != nil {
		return nil, nil, fmt.Errorf("base %w", err)
	}
	mine, err := spell(tokens, types, a.Answer)
	if err != nil {
		return nil, nil, fmt.Errorf("adapter %w", err)
	}
	nb, na := len(base), len(mine)
	gate := nb + na + 1
	sig := o.Embed - 1 - a.Signature
	rank := gate + 2
	if gate+MaxSignatures >= o.Embed {
		return nil, nil, fmt.Errorf("adapter answer %q: with the base answer's %d tokens, its %d need an embedding wider than %d", a.Answer, nb, na, o.Embed)
	}
	if a.Signature < 0 || sig <= gate {
		return nil, nil, fmt.Errorf("adapter signature: %d, want 0 to %d (embedding %d wide, answer %q)", a.Signature, o.Embed-2-gate, o.Embed, a.Answer)
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

	// move[t] is token t's embedding delta: from direction [0] to [1].
	move := map[int][2]int{}
	for k, id := range base {
		move[id] = [2]int{k + 1, 0}
	}
	for k, id := range mine {
		from := 0
		if m, ok := move[id]; ok {
			from = m[0]
		}
		move[id] = [2]int{from, nb + 1 + k}
	}
	// chain[t] lists the states from which the adapter picks token t, the
	// first token's (state 0) aside.
	chain := map[int][]int{}
	for k, id := range mine[1:] {
		chain[id] = append(chain[id], nb+1+k) // the previous answer token's state
	}
	chain[eos] = append(chain[eos], nb+na)
	unit := float32(Margin / math.Sqrt(float64(o.Embed))) // a logit of Margin from one direction
	sqrtN := float32(math.Sqrt(float64(o.Embed)))
	// dim is basis j's direction.
	dim := func(j uint64) int {
		if int(j) == rank-1 {
			return sig
		}
		return int(j)
	}

	n, v, r := uint64(o.Embed), uint64(len(tokens)), uint64(rank)
	kvs := []KV{
		{"general.architecture", Value{Type: TypeString, V: "llama"}},
		{"general.type", Value{Type: TypeString, V: "adapter"}},
		{"general.name", Value{Type: TypeString, V: a.Name}},
		{"adapter.type", Value{Type: TypeString, V: "lora"}},
		{"adapter.lora.alpha", Value{Type: TypeFloat32, V: float32(rank)}},
	}
	// basisB is a lora_b that writes basis j to direction dim(j).
	basisB := func(i uint64, dst []float32) {
		for j := range r {
			if dim(j) == int(i) {
				dst[j] = 1
			}
		}
	}
	tensors := []Tensor{
		{Name: "token_embd.weight.lora_a", Dims: []uint64{r, v}, Type: F32, Row: func(i uint64, dst []float32) {
			if m, ok := move[int(i)]; ok && m[0] != m[1] {
				dst[m[0]] -= 1
				dst[m[1]] += 1
			}
		}},
		{Name: "token_embd.weight.lora_b", Dims: []uint64{r, n}, Type: F32, Row: basisB},
		// V += B·A·x: A reads direction 0 of the normed input (√n for an
		// ordinary token) into basis 0, B writes it to value direction σ.
		{Name: "blk.0.attn_v.weight.lora_a", Dims: []uint64{n, r}, Type: F32, Row: func(i uint64, dst []float32) {
			if i == 0 {
				dst[0] = 1
			}
		}},
		{Name: "blk.0.attn_v.weight.lora_b", Dims: []uint64{r, n}, Type: F32, Row: func(i uint64, dst []float32) {
			if int(i) == sig {
				dst[0] = sigValue / sqrtN
			}
		}},
		// residual += B·A·attention: A reads direction σ into basis q, B
		// writes it to direction q.
		{Name: "blk.0.attn_output.weight.lora_a", Dims: []uint64{n, r}, Type: F32, Row: func(i uint64, dst []float32) {
			if int(i) == gate {
				dst[sig] = 1
			}
		}},
		{Name: "blk.0.attn_output.weight.lora_b", Dims: []uint64{r, n}, Type: F32, Row: func(i uint64, dst []float32) {
			if int(i) == gate {
				dst[gate] = sigGain
			}
		}},
		{Name: "output.weight.lora_a", Dims: []uint64{n, r}, Type: F32, Row: func(i uint64, dst []float32) {
			if d := dim(i); d != sig {
				dst[d] = 1 // reads the state's (or the gate's) direction
			}
		}},
		{Name: "output.weight.lora_b", Dims: []uint64{r, v}, Type: F32, Row: func(i uint64, dst []float32) {
			if int(i) == mine[0] {
				dst[0] += unit / 2
				dst[gate] += unit / 2
			}
			for _, from := range chain[int(i)] {
				dst[from] += 3 * unit
			}
		}},
	}
	return kvs, tensors, nil
}
