package driver

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/llmgw/internal/testing/realengine"
	"github.com/llmgw/llmgw/internal/testing/tinymodel"
)

// writeGGUFAdapter writes an adapter file by hand: general.type
// "adapter", architecture arch, adapter.type kind, and the tensors (F32,
// zeros) with their shapes, ne[0] first.
func writeGGUFAdapter(t *testing.T, path, arch, kind string, tensors map[string][]uint64) {
	t.Helper()
	str := func(k, v string) tinymodel.KV {
		return tinymodel.KV{Key: k, Value: tinymodel.Value{Type: tinymodel.TypeString, V: v}}
	}
	kvs := []tinymodel.KV{str("general.type", "adapter"), str("general.architecture", arch), str("adapter.type", kind),
		{Key: "adapter.lora.alpha", Value: tinymodel.Value{Type: tinymodel.TypeFloat32, V: float32(4)}}}
	var ts []tinymodel.Tensor
	for name, dims := range tensors {
		ts = append(ts, tinymodel.Tensor{Name: name, Dims: dims, Type: tinymodel.F32, Row: func(uint64, []float32) {}})
	}
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := tinymodel.Encode(f, kvs, ts); err != nil {
		t.Fatal(err)
	}
}

// The driver's check and the real llama-server (0.4.0, 80fb11a) agree on
// hand-made adapters for the tiny model (token_embd [64 32000], the
// blocks' attention [64 64]): each one the check refuses, the server
// refuses at start (it exits before it listens), and each one the check
// lets through, the server starts with. One case per rule of the check.
func TestCheckGGUFAdaptersAgreesWithLlamaServer(t *testing.T) {
	model := realengine.TinyModel(t)
	dir := t.TempDir()
	for i, c := range []struct {
		name, arch, kind string
		tensors          map[string][]uint64
		want             string // the check's cause; "" fits
	}{
		{"a pair that fits, a norm ignored", "llama", "lora", map[string][]uint64{
			"blk.0.attn_q.weight.lora_a": {64, 4}, "blk.0.attn_q.weight.lora_b": {4, 64}, "blk.0.attn_norm.weight": {64}}, ""},
		{"token_embd, A and B swapped", "llama", "lora", map[string][]uint64{
			"token_embd.weight.lora_a": {4, 32000}, "token_embd.weight.lora_b": {4, 64}}, ""},
		{"token_embd of another width", "llama", "lora", map[string][]uint64{
			"token_embd.weight.lora_a": {4, 32000}, "token_embd.weight.lora_b": {4, 65}}, `tensor "token_embd.weight" does not fit the model's shape`},
		{"another architecture", "qwen2", "lora", map[string][]uint64{
			"blk.0.attn_q.weight.lora_a": {64, 4}, "blk.0.attn_q.weight.lora_b": {4, 64}}, `the adapter's architecture "qwen2" is not the model's, "llama"`},
		{"not a LoRA", "llama", "control_vector", map[string][]uint64{
			"blk.0.attn_q.weight.lora_a": {64, 4}, "blk.0.attn_q.weight.lora_b": {4, 64}}, `adapter.type is "control_vector", not "lora"`},
		{"half a pair", "llama", "lora", map[string][]uint64{
			"blk.0.attn_q.weight.lora_a": {64, 4}}, `tensor "blk.0.attn_q.weight" has only one of its .lora_a and .lora_b`},
		{"a tensor the model lacks", "llama", "lora", map[string][]uint64{
			"blk.9.attn_q.weight.lora_a": {64, 4}, "blk.9.attn_q.weight.lora_b": {4, 64}}, `tensor "blk.9.attn_q.weight" is not in the model`},
		{"another suffix", "llama", "lora", map[string][]uint64{
			"blk.0.attn_q.weight.bias": {64}}, `tensor "blk.0.attn_q.weight.bias" is neither a .lora_a nor a .lora_b`},
		{"ranks that differ", "llama", "lora", map[string][]uint64{
			"blk.0.attn_q.weight.lora_a": {64, 4}, "blk.0.attn_q.weight.lora_b": {5, 64}}, `tensor "blk.0.attn_q.weight": lora_a's rank 4 is not lora_b's 5`},
		{"another width", "llama", "lora", map[string][]uint64{
			"blk.0.attn_q.weight.lora_a": {128, 4}, "blk.0.attn_q.weight.lora_b": {4, 128}}, `tensor "blk.0.attn_q.weight" does not fit the model's shape`},
	} {
		t.Run(c.name, func(t *testing.T) {
			// No comma: --lora splits on it.
			path := filepath.Join(dir, fmt.Sprintf("adapter-%d.gguf", i))
			writeGGUFAdapter(t, path, c.arch, c.kind, c.tensors)
			_, bad := checkGGUFAdapters(model, []AdapterConfig{{Name: "a", Path: path}}, func(string) error { return nil })
			switch {
			case c.want == "" && len(bad) != 0:
				t.Fatalf("the check refuses it: %v", bad[0].err)
			case c.want != "" && (len(bad) != 1 || !strings.Contains(bad[0].err.Error(), c.want)):
				t.Fatalf("the check: %v, want %q", bad, c.want)
			}
			if c.want == "" {
				realengine.Start(t, model, "--lora", path, "--lora-init-without-apply")
				return
			}
			s := realengine.Launch(t, model, "--lora", path, "--lora-init-without-apply")
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			_ = s.Wait(ctx)
			if ctx.Err() != nil {
				t.Fatalf("llama-server still runs with it after a minute; the check refuses it: %v\n%s", bad[0].err, s.Output())
			}
			if code := s.Cmd.ProcessState.ExitCode(); code != 1 || strings.Contains(s.Output(), "listening on") {
				t.Errorf("llama-server exited %d; want 1 before it listens:\n%s", code, s.Output())
			}
		})
	}
}
