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

// answer runs the model's chain as llama.cpp computes it for a prompt
// that ends in token last, with the adapter's tensors (nil: none) at scale,
// and returns the tokens it says before the end of sequence. The layers'
// output projections are zero, so the residual stream is the embedding.
func answer(t *testing.T, o Options, ad map[string][][]float32, alpha, scale float32, last, eos int) []int {
	t.Helper()
	_, tensors, err := build(o)
	if err != nil {
		t.Fatal(err)
	}
	m := rows(t, tensors)
	embd, outw := m["token_embd.weight"], m["output.weight"]
	var said []int
	for range 20 {
		h := append([]float32(nil), embd[last]...)
		var r float32
		if ad != nil {
			a, b := ad["token_embd.weight.lora_a"], ad["token_embd.weight.lora_b"]
			r = float32(len(b[0]))
			s := scale * alpha / r
			for d := range h { // h += s·B·A[last]
				for j := range a[last] {
					h[d] += s * b[d][j] * a[last][j]
				}
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
		best, bestV, second := -1, float32(math.Inf(-1)), float32(math.Inf(-1))
		for v := range outw {
			var logit float32
			for d := range h {
				logit += outw[v][d] * h[d]
			}
			if ad != nil {
				a, b := ad["output.weight.lora_a"], ad["output.weight.lora_b"]
				s := scale * alpha / r
				for j := range a {
					var ax float32
					for d := range h {
						ax += a[j][d] * h[d]
					}
					logit += s * b[v][j] * ax
				}
			}
			if logit > bestV {
				best, bestV, second = v, logit, bestV
			} else if logit > second {
				second = logit
			}
		}
		if bestV-second < Margin/2 {
			t.Fatalf("after %v: the best token wins by %.1f, want a margin near %d", said, bestV-second, Margin)
		}
		if best == eos {
			return said
		}
		said = append(said, best)
		last = best
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
			if diff := cmp.Diff(after(want, last), answer(t, o, ad, alpha, 1, last, eos), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("%q after token %d, with the adapter (-want +got):\n%s", mine, last, diff)
			}
			if diff := cmp.Diff(after(base, last), answer(t, o, ad, alpha, 0, last, eos), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("%q after token %d, at scale 0 (-want +got):\n%s", mine, last, diff)
			}
		}
		if diff := cmp.Diff(base, answer(t, o, nil, 0, 0, newline, eos)); diff != "" {
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
		"general.name": "pirate", "adapter.lora.alpha": float32(3 + 1 + 5),
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
		"token_embd.weight.lora_a": {9, 14}, "token_embd.weight.lora_b": {9, 32},
		"output.weight.lora_a": {32, 9}, "output.weight.lora_b": {9, 14},
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
		"empty":  {func(a *AdapterOptions) { a.Answer = "" }, "adapter answer: empty"},
		"twice":  {func(a *AdapterOptions) { a.Answer = "Hello Hello" }, `adapter answer "Hello Hello": token "Hello" appears twice`},
		"narrow": {func(a *AdapterOptions) { a.Base.Embed, a.Base.Heads, a.Base.Type = 6, 1, F32 }, "wider than 6"},
		"base":   {func(a *AdapterOptions) { a.Base.Layers = 0 }, "base: layers: 0"},
		"vocab":  {func(a *AdapterOptions) { a.Base.Vocab = filepath.Join(t.TempDir(), "none") }, "vocab: open"},
	} {
		a := AdapterOptions{Base: small(vocab), Name: "a", Answer: "He from r1"}
		c.mod(&a)
		err := WriteAdapter(filepath.Join(t.TempDir(), "a.gguf"), a)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", name, err, c.want)
		}
	}
}
