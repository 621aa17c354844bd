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
	// differ, and with the base answer's they must be fewer than Embed.
	Answer string
}

// An adapter is a pair of low-rank deltas in the form llama.cpp loads
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
// This adapter changes both:
//   - token_embd: it moves the base answer's tokens and its own answer's
//     tokens to the states of its own chain. Its answer's k-th token goes to
//     direction L+1+k (L: the base answer's length), directions no base
//     token uses; every other token the base embeds apart (the base
//     answer's) goes back to direction 0, "any other token".
//   - output: from direction 0 it picks its first token, from L+1+k the
//     next token of its answer (the last to the end of sequence), with a
//     logit of 2·Margin. The base still gives its own first token Margin
//     from direction 0, so the adapter's token wins by Margin.
//
// Both deltas have rank r = L+1+len(Answer), the directions they touch, and
// alpha = r, so that the adapter's scale is the whole factor.

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
	rank := nb + 1 + na
	if rank > o.Embed {
		return nil, nil, fmt.Errorf("adapter answer %q: with the base answer's %d tokens, its %d need an embedding wider than %d", a.Answer, nb, na, o.Embed)
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
	// next[t] lists the directions from which the adapter picks token t.
	next := map[int][]int{}
	for k, id := range mine {
		from := 0
		if k > 0 {
			from = nb + k // the direction of the previous answer token
		}
		next[id] = append(next[id], from)
	}
	next[eos] = append(next[eos], nb+na)
	out := float32(2 * Margin / math.Sqrt(float64(o.Embed)))

	n, v, r := uint64(o.Embed), uint64(len(tokens)), uint64(rank)
	kvs := []KV{
		{"general.architecture", Value{Type: TypeString, V: "llama"}},
		{"general.type", Value{Type: TypeString, V: "adapter"}},
		{"general.name", Value{Type: TypeString, V: a.Name}},
		{"adapter.type", Value{Type: TypeString, V: "lora"}},
		{"adapter.lora.alpha", Value{Type: TypeFloat32, V: float32(rank)}},
	}
	tensors := []Tensor{
		{Name: "token_embd.weight.lora_a", Dims: []uint64{r, v}, Type: F32, Row: func(i uint64, dst []float32) {
			if m, ok := move[int(i)]; ok && m[0] != m[1] {
				dst[m[0]] -= 1
				dst[m[1]] += 1
			}
		}},
		{Name: "token_embd.weight.lora_b", Dims: []uint64{r, n}, Type: F32, Row: func(i uint64, dst []float32) {
			if i < r {
				dst[i] = 1 // direction i of the rank's basis is the embedding's direction i
			}
		}},
		{Name: "output.weight.lora_a", Dims: []uint64{n, r}, Type: F32, Row: func(i uint64, dst []float32) {
			dst[i] = 1 // reads the state's direction i
		}},
		{Name: "output.weight.lora_b", Dims: []uint64{r, v}, Type: F32, Row: func(i uint64, dst []float32) {
			for _, from := range next[int(i)] {
				dst[from] = out
			}
		}},
	}
	return kvs, tensors, nil
}
