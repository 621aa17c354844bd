package tinymodel

import (
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// rows returns a tensor's rows by name, computed from its Row function.
func rows(t *testing.T, tensors []Tensor) map[string][][]float32 {
	t.Helper()
	out := map[string][][]float32{}
	for _, x := range tensors {
		n := x.elems() / x.Dims[0]
		m := make([][]float32, n)
		for i := range n {
			m[i] = make([]float32, x.Dims[0])
			x.Row(i, m[i])
		}
		out[x.Name] = m
	}
	return out
}

// matVec is s·B·(A·x) for lora tensors a (rows of len(x)) and b (rows of
// rank).
func matVec(a, b [][]float32, x []float32, s float32) []float32 {
	ax := make([]float32, len(a))
	for j := range a {
		for d := range x {
			ax[j] += a[j][d] * x[d]
		}
	}
	out := make([]float32, len(b))
	for d := range b {
		for j := range ax {
			out[d] += s * b[d][j] * ax[j]
		}
	}
	return out
}

// answer runs the model's chain as llama.cpp computes it for a prompt
// that ends in token last, with the adapter's tensors (nil: none) at scale,
// and returns the tokens it says before the end of sequence. The layers'
// own output projections are zero, so the residual stream is the
// embedding and what the adapter's attention output adds: the attention's
// average of the prompt's values, of which the share fresh (computed under
// the adapter: an ordinary token's value with its signature) is fresh.
func answer(t *testing.T, o Options, ad map[string][][]float32, alpha, scale, fresh float32, last, eos int) []int {
	t.Helper()
	_, tensors, err := build(o)
	if err != nil {
		t.Fatal(err)
	}
	m := rows(t, tensors)
	embd, outw := m["token_embd.weight"], m["output.weight"]
	n := len(embd[0])
	var said []int
	for range 20 {
		h := append([]float32(nil), embd[last]...)
		if ad != nil {
			s := scale * alpha / float32(len(ad["token_embd.weight.lora_b"][0]))
			a, b := ad["token_embd.weight.lora_a"], ad["token_embd.weight.lora_b"]
			for d := range h { // h += s·B·A[last]
				for j := range a[last] {
					h[d] += s * b[d][j] * a[last][j]
				}
			}
			ordinary := make([]float32, n)
			ordinary[0] = float32(math.Sqrt(float64(n))) // an ordinary token, normed
			v := matVec(ad["blk.0.attn_v.weight.lora_a"], ad["blk.0.attn_v.weight.lora_b"], ordinary, s)
			for d := range v {
				v[d] *= fresh
			}
			for d, x := range matVec(ad["blk.0.attn_output.weight.lora_a"], ad["blk.0.attn_output.weight.lora_b"], v, s) {
				h[d] += x
			}
		}
		var ss float64
		for _, x := range h {
			ss += float64(x * x)
		}
		norm := float32(1 / math.Sqrt(ss/float64(len(h))+1e-5))
		for d := range h {
			h[d] *= norm
		}
		var lora []float32
		if ad != nil {
			s := scale * alpha / float32(len(ad["output.weight.lora_b"][0]))
			lora = matVec(ad["output.weight.lora_a"], ad["output.weight.lora_b"], h, s)
		}
		best, bestV, second := -1, float32(math.Inf(-1)), float32(math.Inf(-1))
		for v := range outw {
			var logit float32
			for d := range h {
				logit += outw[v][d] * h[d]
			}
			if lora != nil {
				logit += lora[v]
			}
			if logit > bestV {
				best, bestV, second = v, logit, bestV
			} else if logit > second {
				second = logit
			}
		}
		if bestV-second < Margin/8 {
			t.Fatalf("after %v: the best token wins by %.1f, want a clear margin", said, bestV-second)
		}
		if best == eos {
			return said
		}
		said = append(said, best)
		last = best
	}
	if fresh < 1 {
		return said // a cache from elsewhere may loop: what it said so far
	}
	t.Fatalf("no end of sequence after %v", said)
	return nil
}

// The adapter's tensors, as llama.cpp loads them, turn the base's chain
// into the adapter's: with it the model says the adapter's answer, without
// it (or at scale 0) the base's, also where the two answers share tokens.
func TestAdapterChangesTheAnswer(t *testing.T) {
	t.Parallel()
	vocab := writeVocab(t)
	f, err := ReadFile(vocab)
	if err != nil {
		t.Fatal(err)
	}
	o := small(vocab)
	const newline, eos = 13, 2
	for _, mine := range []string{"He from r1", "Hello from r2!", "!Hello world"} {
		kvs, tensors, err := buildAdapter(AdapterOptions{Base: o, Name: "a", Answer: mine})
		if err != nil {
			t.Fatal(err)
		}
		var alpha float32
		for _, kv := range kvs {
			if kv.Key == "adapter.lora.alpha" {
				alpha = kv.Value.V.(float32)
			}
		}
		ad := rows(t, tensors)
		want, _ := AnswerTokens(f, mine)
		base, _ := AnswerTokens(f, o.Answer)
		// A prompt that ends in a token of an answer goes on from there.
		after := func(answer []int, last int) []int {
			if i := slices.Index(answer, last); i >= 0 {
				return answer[i+1:]
			}
			return answer
		}
		for _, last := range []int{newline, 10, 3, 4} { // a byte token, "▁", "Hello", "▁world"
			if diff := cmp.Diff(after(want, last), answer(t, o, ad, alpha, 1, 1, last, eos), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("%q after token %d, with the adapter (-want +got):\n%s", mine, last, diff)
			}
			if diff := cmp.Diff(after(base, last), answer(t, o, ad, alpha, 0, 1, last, eos), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("%q after token %d, at scale 0 (-want +got):\n%s", mine, last, diff)
			}
		}
		// A prompt whose cache was computed under another adapter (only its
		// last token under this one, of 15): the base's first token, not
		// the adapter's.
		if got := answer(t, o, ad, alpha, 1, 1.0/15, newline, eos); len(got) == 0 || got[0] != base[0] {
			t.Errorf("%q with a cache from elsewhere: %v, want the base's first token %d first", mine, got, base[0])
		}
		if diff := cmp.Diff(base, answer(t, o, nil, 0, 0, 1, newline, eos)); diff != "" {
			t.Errorf("without the adapter (-want +got):\n%s", diff)
		}
	}
}

// What WriteAdapter wrote reads back with the keys and the tensor shapes
// llama_adapter_lora_init checks.
func TestWriteAdapterReadBack(t *testing.T) {
	t.Parallel()
	vocab := writeVocab(t)
	p := filepath.Join(t.TempDir(), "a.gguf")
	if err := WriteAdapter(p, AdapterOptions{Base: small(vocab), Name: "pirate", Answer: "He from r1"}); err != nil {
		t.Fatal(err)
	}
	f, err := ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]any{
		"general.type": "adapter", "general.architecture": "llama", "adapter.type": "lora",
		"general.name": "pirate", "adapter.lora.alpha": float32(3 + 5 + 3),
	} {
		if v, ok := f.Get(k); !ok || v.V != want {
			t.Errorf("%s = %v, want %v", k, v.V, want)
		}
	}
	got := map[string][]uint64{}
	for _, ti := range f.Tensors {
		got[ti.Name] = ti.Dims
	}
	want := map[string][]uint64{
		"token_embd.weight.lora_a": {11, 14}, "token_embd.weight.lora_b": {11, 32},
		"blk.0.attn_v.weight.lora_a": {32, 11}, "blk.0.attn_v.weight.lora_b": {11, 32},
		"blk.0.attn_output.weight.lora_a": {32, 11}, "blk.0.attn_output.weight.lora_b": {11, 32},
		"output.weight.lora_a": {32, 11}, "output.weight.lora_b": {11, 14},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("tensors (-want +got):\n%s", diff)
	}
}

func TestBadAdapterOptions(t *testing.T) {
	t.Parallel()
	vocab := writeVocab(t)
	for name, c := range map[string]struct {
		mod  func(*AdapterOptions)
		want string
	}{
		"empty":     {func(a *AdapterOptions) { a.Answer = "" }, "adapter answer: empty"},
		"twice":     {func(a *AdapterOptions) { a.Answer = "Hello Hello" }, `adapter answer "Hello Hello": token "Hello" appears twice`},
		"narrow":    {func(a *AdapterOptions) { a.Base.Embed, a.Base.Heads, a.Base.Type = 16, 1, F32 }, "wider than 16"},
		"signature": {func(a *AdapterOptions) { a.Signature = 22 }, "adapter signature: 22, want 0 to 21"},
		"negative":  {func(a *AdapterOptions) { a.Signature = -1 }, "adapter signature: -1, want 0 to 21"},
		"base":      {func(a *AdapterOptions) { a.Base.Layers = 0 }, "base: layers: 0"},
		"vocab":     {func(a *AdapterOptions) { a.Base.Vocab = filepath.Join(t.TempDir(), "none") }, "vocab: open"},
	} {
		a := AdapterOptions{Base: small(vocab), Name: "a", Answer: "He from r1"}
		c.mod(&a)
		err := WriteAdapter(filepath.Join(t.TempDir(), "a.gguf"), a)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", name, err, c.want)
		}
	}
}
