// Command llmgw-tinymodel writes a tiny deterministic llama-architecture
// GGUF model that llama.cpp's real llama-server loads and answers with
// (internal/testing/tinymodel): the same flags give the same bytes, and the
// model answers -answer and stops, for any prompt. For tests, demos and
// measurements; it has nothing to do in production.
//
//	llmgw-tinymodel -o tiny.gguf
//	llmgw-tinymodel -layers 8 -embed 512 -ff 1536 -o bigger.gguf -answer "Hello from r2!"
//
// llmgw-tinymodel adapter writes a LoRA adapter for such a model (the same
// model flags describe the base) with which the model answers
// -adapter-answer instead (tinymodel.WriteAdapter); llama-server loads it
// with --lora and applies it per request ("lora": [{"id": 0, "scale": 1}]):
//
//	llmgw-tinymodel adapter -o pirate.gguf -adapter-answer "Ahoy matey."
//	llmgw-tinymodel adapter -o moon.gguf -adapter-answer "Goodbye moon." -signature 1
//
// llmgw-tinymodel hub serves files from disk as one repository of a local
// Hugging Face hub (internal/testing/hubserver: the hub's resolve and
// model-info endpoints, as huggingface_hub's client speaks them), for the
// e2e suite and make demo to download models from without the internet. It
// prints its endpoint (what HF_ENDPOINT would be), writes it to -addr-file
// when asked, and serves until interrupted (SIGINT or SIGTERM):
//
//	llmgw-tinymodel -o tiny.gguf
//	llmgw-tinymodel hub -listen 127.0.0.1:0 -addr-file hub.addr \
//		-repo llmgw/tiny -revision main -file tiny.gguf=tiny.gguf -file config.json=config.json
//
// Its flags: -listen (host:port, default 127.0.0.1:0), -addr-file (the
// endpoint, written once serving, replaced whole), -repo (org/name),
// -revision (default main), -file (path-in-repo=file-on-disk, repeated;
// files are read from disk at each request, never held in memory), -token
// (gates the repository: its files need Authorization: Bearer <token>) and
// -redirect (resolve answers 302 to a blob URL, as the hub sends large files
// to its CDN).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/llmgw/llmgw/internal/testing/llamabuild"
	"github.com/llmgw/llmgw/internal/testing/tinymodel"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	switch {
	case len(os.Args) > 1 && os.Args[1] == "hub":
		err = runHub(ctx, os.Args[2:], os.Stdout)
	case len(os.Args) > 1 && os.Args[1] == "adapter":
		err = runAdapter(os.Args[2:], os.Stdout)
	default:
		err = run(os.Args[1:])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "llmgw-tinymodel:", err)
		stop()
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("llmgw-tinymodel", flag.ContinueOnError)
	out := fs.String("o", "", "the GGUF file to write (required)")
	model := modelFlags(fs, "what the model answers (its tokens must all differ)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *out == "" {
		return errors.New("-o: name the file to write")
	}
	o, err := model()
	if err != nil {
		return err
	}
	if err := tinymodel.Write(*out, o); err != nil {
		return err
	}
	st, err := os.Stat(*out)
	if err != nil {
		return err
	}
	fmt.Printf("wrote %s: %d layers × %d wide, %v, %.1f MB; it answers %q\n", *out, o.Layers, o.Embed, o.Type, float64(st.Size())/1e6, o.Answer)
	return nil
}

// runAdapter writes a LoRA adapter for the model the same model flags
// describe.
func runAdapter(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("llmgw-tinymodel adapter", flag.ContinueOnError)
	out := fs.String("o", "", "the adapter GGUF file to write (required)")
	answer := fs.String("adapter-answer", "", "what the model answers with the adapter applied (required; its tokens must all differ)")
	name := fs.String("adapter-name", "", "the adapter's general.name (default: the file's name)")
	sig := fs.Int("signature", 0, fmt.Sprintf("the adapter's cache signature, 0 to %d (more on a wider model: up to -embed less the answers' tokens less 3): adapters served together need different ones", tinymodel.MaxSignatures-1))
	model := modelFlags(fs, "what the base model answers (as it was written with)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if *out == "" {
		return errors.New("-o: name the file to write")
	}
	if *answer == "" {
		return errors.New("-adapter-answer: say what the adapter makes the model answer")
	}
	o, err := model()
	if err != nil {
		return err
	}
	if *name == "" {
		*name = strings.TrimSuffix(filepath.Base(*out), ".gguf")
	}
	if err := tinymodel.WriteAdapter(*out, tinymodel.AdapterOptions{Base: o, Name: *name, Answer: *answer, Signature: *sig}); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %s: a LoRA adapter for the %d-wide model that answers %q; with it, it answers %q\n", *out, o.Embed, o.Answer, *answer)
	return nil
}

// modelFlags defines the flags that describe a tiny model on fs and returns
// a function that reads them once fs is parsed.
func modelFlags(fs *flag.FlagSet, answerUsage string) func() (tinymodel.Options, error) {
	d := tinymodel.Defaults
	vocab := fs.String("vocab", llamabuild.Vocab(), "the GGUF vocabulary to copy the tokenizer from (make llama-server keeps llama.cpp's)")
	name := fs.String("name", d.Name, "general.name")
	answer := fs.String("answer", d.Answer, answerUsage)
	layers := fs.Int("layers", d.Layers, "transformer blocks")
	embed := fs.Int("embed", d.Embed, "embedding width")
	heads := fs.Int("heads", d.Heads, "attention heads")
	ff := fs.Int("ff", d.FF, "feed-forward width")
	ctx := fs.Int("context", d.Context, "trained context length")
	typ := fs.String("type", "q8_0", "weights: q8_0 or f32")
	seed := fs.Uint64("seed", d.Seed, "seed of the layers' weights")
	return func() (tinymodel.Options, error) {
		o := tinymodel.Options{Vocab: *vocab, Name: *name, Answer: *answer, Layers: *layers, Embed: *embed,
			Heads: *heads, FF: *ff, Context: *ctx, Seed: *seed}
		switch *typ {
		case "q8_0":
			o.Type = tinymodel.Q8_0
		case "f32":
			o.Type = tinymodel.F32
		default:
			return o, fmt.Errorf("-type %q: want q8_0 or f32", *typ)
		}
		return o, nil
	}
}
