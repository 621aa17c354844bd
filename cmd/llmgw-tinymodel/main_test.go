package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/llmgw/llmgw/internal/testing/llamabuild"
	"github.com/llmgw/llmgw/internal/testing/syncbuf"
	"github.com/llmgw/llmgw/internal/testing/tinymodel"
	"github.com/llmgw/llmgw/internal/testing/wait"
)

// TestHub runs the hub subcommand over a file on disk and fetches it as a
// hub client would.
func TestHub(t *testing.T) {
	dir := t.TempDir()
	data := bytes.Repeat([]byte("gguf"), 3000)
	model := filepath.Join(dir, "tiny.gguf")
	if err := os.WriteFile(model, data, 0o600); err != nil {
		t.Fatal(err)
	}
	addrFile := filepath.Join(dir, "hub.addr")
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var out syncbuf.Buffer
	errc := make(chan error, 1)
	go func() {
		errc <- runHub(ctx, []string{"-addr-file", addrFile, "-repo", "llmgw/tiny", "-file", "tiny.gguf=" + model, "-token", "tok"}, &out)
	}()
	var base string
	wait.For(t, "the hub's address file", func() (bool, string) {
		b, err := os.ReadFile(addrFile)
		base = strings.TrimSpace(string(b))
		return err == nil && base != "", "its output: " + out.String()
	})
	if !strings.HasPrefix(base, "http://127.0.0.1:") {
		t.Fatalf("endpoint %q: want http://127.0.0.1:port", base)
	}
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, base+"/llmgw/tiny/resolve/main/tiny.gguf", nil)
	req.Header.Set("Authorization", "Bearer tok")
	req.Header.Set("Range", "bytes=100-")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	sum := sha256.Sum256(data)
	if err != nil || resp.StatusCode != http.StatusPartialContent || !bytes.Equal(body, data[100:]) ||
		resp.Header.Get("X-Linked-Etag") != `"`+hex.EncodeToString(sum[:])+`"` || len(resp.Header.Get("X-Repo-Commit")) != 40 {
		t.Fatalf("GET: %d, %d bytes, %v, headers %v", resp.StatusCode, len(body), err, resp.Header)
	}
	if !strings.Contains(out.String(), "serving llmgw/tiny at main") {
		t.Errorf("output %q", out.String())
	}
	cancel()
	if err := <-errc; err != nil {
		t.Fatalf("hub: %v", err)
	}
}

func TestHubFlags(t *testing.T) {
	dir := t.TempDir()
	for _, args := range [][]string{
		{},
		{"-repo", "llmgw/tiny"},
		{"-repo", "tiny", "-file", "a=b"},
		{"-repo", "llmgw/tiny", "-file", "a"},
		{"-repo", "llmgw/tiny", "-file", "a=" + filepath.Join(dir, "missing")},
		{"-repo", "llmgw/tiny", "-file", "a=x", "-file", "a=y"},
		{"-repo", "llmgw/tiny", "-file", "a=x", "extra"},
	} {
		if err := runHub(t.Context(), args, io.Discard); err == nil {
			t.Errorf("hub %q: no error", args)
		}
	}
}

// TestWriteModelNeedsOutput keeps the model writer's usage: without -o it
// says so.
func TestWriteModelNeedsOutput(t *testing.T) {
	if err := run(nil); err == nil || !strings.Contains(err.Error(), "-o") {
		t.Errorf("run without -o: %v", err)
	}
}

// The adapter subcommand writes an adapter for the model the model flags
// describe; it refuses to guess the answer or the file.
func TestWriteAdapter(t *testing.T) {
	if ok, why := llamabuild.Available(); !ok {
		t.Skip("skipping: the vocabulary is needed: " + why)
	}
	p := filepath.Join(t.TempDir(), "pirate.gguf")
	var out bytes.Buffer
	if err := runAdapter([]string{"-o", p, "-adapter-answer", "Ahoy matey.", "-embed", "128"}, &out); err != nil {
		t.Fatal(err)
	}
	f, err := tinymodel.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := f.Get("general.name"); v.V != "pirate" {
		t.Errorf("general.name %v, want the file's name", v.V)
	}
	if v, _ := f.Get("general.type"); v.V != "adapter" {
		t.Errorf("general.type %v", v.V)
	}
	for _, ti := range f.Tensors {
		if ti.Name == "output.weight.lora_a" && ti.Dims[0] != 128 {
			t.Errorf("%s dims %v, want 128 wide as -embed says", ti.Name, ti.Dims)
		}
	}
	if !strings.Contains(out.String(), `it answers "Ahoy matey."`) {
		t.Errorf("output %q", out.String())
	}
	for _, args := range [][]string{
		{"-adapter-answer", "Ahoy"},
		{"-o", p},
		{"-o", p, "-adapter-answer", "Ahoy", "-type", "q4"},
		{"-o", p, "-adapter-answer", "Ahoy", "extra"},
	} {
		if err := runAdapter(args, io.Discard); err == nil {
			t.Errorf("adapter %q: no error", args)
		}
	}
}
