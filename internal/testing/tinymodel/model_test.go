package tinymodel

import (
	"bytes"
	"crypto/sha256"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// writeVocab writes a small SentencePiece-like vocabulary file.
func writeVocab(t *testing.T) string {
	t.Helper()
	toks := []any{"<unk>", "<s>", "</s>", "Hello", "▁world", "!", "▁from", "▁r", "1", "2", "▁", "H", "e", "<0x0A>"}
	types := make([]any, len(toks))
	for i := range types {
		types[i] = int32(tokenNormal)
	}
	types[0], types[1], types[2], types[13] = int32(2), int32(3), int32(3), int32(6)
	scores := make([]any, len(toks))
	for i := range scores {
		scores[i] = float32(-i)
	}
	kvs := []KV{
		{"general.architecture", Value{Type: TypeString, V: "llama"}},
		{"tokenizer.ggml.model", Value{Type: TypeString, V: "llama"}},
		{"tokenizer.ggml.tokens", Value{Type: TypeArray, Elem: TypeString, V: toks}},
		{"tokenizer.ggml.scores", Value{Type: TypeArray, Elem: TypeFloat32, V: scores}},
		{"tokenizer.ggml.token_type", Value{Type: TypeArray, Elem: TypeInt32, V: types}},
		{"tokenizer.ggml.eos_token_id", Value{Type: TypeUint32, V: uint32(2)}},
		{"tokenizer.ggml.add_bos_token", Value{Type: TypeBool, V: true}},
		{"tokenizer.chat_template", Value{Type: TypeString, V: "theirs"}},
	}
	p := filepath.Join(t.TempDir(), "vocab.gguf")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := Encode(f, kvs, nil); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return p
}

func small(vocab string) Options {
	o := Defaults
	o.Vocab, o.Embed, o.FF, o.Heads = vocab, 32, 64, 2
	return o
}

func sum(t *testing.T, p string) [32]byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(b)
}

// The same options give the same bytes; another seed or answer does not.
func TestWriteDeterministic(t *testing.T) {
	t.Parallel()
	vocab := writeVocab(t)
	dir := t.TempDir()
	o := small(vocab)
	a, b, c := filepath.Join(dir, "a.gguf"), filepath.Join(dir, "b.gguf"), filepath.Join(dir, "c.gguf")
	for _, p := range []string{a, b} {
		if err := Write(p, o); err != nil {
			t.Fatal(err)
		}
	}
	o.Seed = 2
	if err := Write(c, o); err != nil {
		t.Fatal(err)
	}
	if sum(t, a) != sum(t, b) {
		t.Error("two writes with the same options differ")
	}
	if sum(t, a) == sum(t, c) {
		t.Error("another seed wrote the same bytes")
	}
}

// What Write wrote reads back: the hyperparameters, the copied tokenizer
// (without its chat template, which is ours), and every tensor at an
// aligned offset with the shape llama.cpp's llama architecture loads.
func TestWriteReadBack(t *testing.T) {
	t.Parallel()
	vocab := writeVocab(t)
	p := filepath.Join(t.TempDir(), "m.gguf")
	o := small(vocab)
	o.Layers = 3
	if err := Write(p, o); err != nil {
		t.Fatal(err)
	}
	f, err := ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	get := func(k string) any {
		v, ok := f.Get(k)
		if !ok {
			t.Fatalf("no %s", k)
		}
		return v.V
	}
	if got := get("llama.block_count"); got != uint32(3) {
		t.Errorf("block_count %v", got)
	}
	if got := get("llama.embedding_length"); got != uint32(32) {
		t.Errorf("embedding_length %v", got)
	}
	if got := get("tokenizer.chat_template"); !strings.Contains(got.(string), "<|im_start|>") {
		t.Errorf("chat template %q, want ours", got)
	}
	if got := len(get("tokenizer.ggml.tokens").([]any)); got != 14 {
		t.Errorf("%d tokens copied, want 14", got)
	}
	if len(f.Tensors) != 3+9*3 {
		t.Fatalf("%d tensors, want %d", len(f.Tensors), 3+9*3)
	}
	want := map[string][]uint64{
		"token_embd.weight":     {32, 14},
		"output.weight":         {32, 14},
		"output_norm.weight":    {32},
		"blk.2.ffn_down.weight": {64, 32},
		"blk.0.ffn_up.weight":   {32, 64},
	}
	for _, ti := range f.Tensors {
		if ti.Offset%ggufAlignment != 0 {
			t.Errorf("%s at offset %d, not aligned", ti.Name, ti.Offset)
		}
		if w, ok := want[ti.Name]; ok {
			if diff := cmp.Diff(w, ti.Dims); diff != "" {
				t.Errorf("%s dims (-want +got):\n%s", ti.Name, diff)
			}
			delete(want, ti.Name)
		}
	}
	if len(want) > 0 {
		t.Errorf("tensors missing: %v", want)
	}
}

func TestAnswerSpelling(t *testing.T) {
	t.Parallel()
	f, err := ReadFile(writeVocab(t))
	if err != nil {
		t.Fatal(err)
	}
	ids, err := AnswerTokens(f, "Hello world from r1!")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]int{3, 4, 6, 7, 8, 5}, ids); diff != "" {
		t.Errorf("ids (-want +got):\n%s", diff)
	}
	for answer, want := range map[string]string{
		"Hello Hello": `token "Hello" appears twice`,
		"Hello ~":     `no vocabulary token starts "~"`,
		"":            "answer: empty",
	} {
		if _, err := AnswerTokens(f, answer); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("answer %q: %v, want %q", answer, err, want)
		}
	}
}

func TestBadOptions(t *testing.T) {
	t.Parallel()
	vocab := writeVocab(t)
	for name, c := range map[string]struct {
		mod  func(*Options)
		want string
	}{
		"heads":   {func(o *Options) { o.Heads = 3 }, "heads of an even width"},
		"q8":      {func(o *Options) { o.FF = 40 }, "multiples of 32"},
		"layers":  {func(o *Options) { o.Layers = 0 }, "layers: 0"},
		"vocab":   {func(o *Options) { o.Vocab = filepath.Join(t.TempDir(), "none") }, "vocab: open"},
		"narrow":  {func(o *Options) { o.Type, o.Embed, o.Heads, o.Answer = F32, 2, 1, "Hello world!" }, "wider than 2"},
		"notgguf": {func(o *Options) { o.Vocab = writeFile(t, "GGML") }, "not a GGUF file"},
		"short":   {func(o *Options) { o.Vocab = writeFile(t, "GGUF\x03\x00") }, "truncated GGUF header"},
	} {
		o := small(vocab)
		c.mod(&o)
		err := Write(filepath.Join(t.TempDir(), "m.gguf"), o)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", name, err, c.want)
		}
	}
}

func writeFile(t *testing.T, s string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// f32ToF16 against values whose half-precision bits are known.
func TestF16(t *testing.T) {
	t.Parallel()
	for f, want := range map[float32]uint16{
		0: 0, 1: 0x3c00, -2: 0xc000, 0.5: 0x3800, 65504: 0x7bff, 1e6: 0x7c00,
		float32(math.Ldexp(1, -24)): 0x0001, // the smallest subnormal
		0.1:                         0x2e66,
		1.0 / 127:                   0x2008,
	} {
		if got := f32ToF16(f); got != want {
			t.Errorf("f32ToF16(%g) = %#04x, want %#04x", f, got, want)
		}
	}
}

// Q8_0 rows come out as blocks of an f16 scale and 32 int8s.
func TestQ8Encoding(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	err := Encode(&buf, nil, []Tensor{{Name: "x", Dims: []uint64{32}, Type: Q8_0, Row: func(_ uint64, d []float32) {
		d[0], d[1] = 1.27, -0.635
	}}})
	if err != nil {
		t.Fatal(err)
	}
	b := buf.Bytes()
	data := b[len(b)-ggufAlignment*2:] // header padded to 32, then 34 bytes padded to 64
	if got := uint16(data[0]) | uint16(data[1])<<8; got != f32ToF16(0.01) {
		t.Errorf("scale bits %#04x, want %#04x", got, f32ToF16(0.01))
	}
	if int8(data[2]) != 127 || int8(data[3]) != -64 || data[4] != 0 {
		t.Errorf("quants %d %d %d, want 127 -64 0", int8(data[2]), int8(data[3]), data[4])
	}
}
