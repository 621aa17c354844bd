// Package llamabuild finds the llama.cpp server that make llama-server
// builds (scripts/llama-server.sh), at the pinned version, and installs a
// copy of it with a tiny model where another user can run it. It imports
// no testing code, so that the development binaries (make demo,
// llmgw-tinymodel) can use it; internal/testing/realengine holds the test
// helpers over it.
package llamabuild

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/llmgw/llmgw/internal/testing/tinymodel"
)

// The pinned llama.cpp: the npm package node-llama-cpp@3.21.1 ships this
// commit's source (scripts/llama-server.sh, which must name the same commit;
// a test checks).
const (
	Version = "0.4.0"
	Commit  = "80fb11a"
)

// Dir is where make llama-server keeps the pinned build: bin/llama-server
// and src/, the source tree (its models/ hold the tokenizer vocabularies).
// The same rule as scripts/llama-server.sh: $LLMGW_CACHE, else
// $XDG_CACHE_HOME/llmgw, else ~/.cache/llmgw, then llama.cpp/<commit>.
func Dir() string {
	root := os.Getenv("LLMGW_CACHE")
	if root == "" {
		if x := os.Getenv("XDG_CACHE_HOME"); x != "" {
			root = filepath.Join(x, "llmgw")
		} else if home, err := os.UserHomeDir(); err == nil {
			root = filepath.Join(home, ".cache", "llmgw")
		}
	}
	return filepath.Join(root, "llama.cpp", Commit)
}

// Binary is the llama-server to run: $LLAMA_SERVER, else Dir()/bin/llama-server.
func Binary() string {
	if b := os.Getenv("LLAMA_SERVER"); b != "" {
		return b
	}
	return filepath.Join(Dir(), "bin", "llama-server")
}

// Vocab is the SentencePiece vocabulary file tiny models copy their
// tokenizer from.
func Vocab() string {
	if v := os.Getenv("LLAMA_VOCAB"); v != "" {
		return v
	}
	return filepath.Join(Dir(), "src", "models", "ggml-vocab-llama-spm.gguf")
}

// Available reports whether the binary and the vocabulary are there, and if
// not, why, in words that say how to get them.
func Available() (bool, string) {
	var missing []string
	if st, err := os.Stat(Binary()); err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
		missing = append(missing, "llama-server at "+Binary())
	}
	if _, err := os.Stat(Vocab()); err != nil {
		missing = append(missing, "the tokenizer vocabulary "+Vocab())
	}
	if len(missing) == 0 {
		return true, ""
	}
	return false, "the real llama.cpp engine is not built (missing " + strings.Join(missing, " and ") +
		"): run `make llama-server` (about 13 minutes on 2 cores), or set LLAMA_SERVER and LLAMA_VOCAB"
}

// Installed is a copy of the real engine and a tiny model where an engine
// running as another user (the driver's default, nobody) can read them.
type Installed struct {
	Binary, Model string
}

// Install copies the built llama-server into dir and writes a tiny model
// there with o (Vocab filled in), making dir and both files world-readable
// (the binary executable): the cache that make llama-server fills is under
// the building user's home, which engines run as nobody cannot reach.
func Install(dir string, o tinymodel.Options) (Installed, error) {
	if ok, why := Available(); !ok {
		return Installed{}, errors.New(why)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return Installed{}, err
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return Installed{}, err
	}
	in := Installed{Binary: filepath.Join(dir, "llama-server"), Model: filepath.Join(dir, "model.gguf")}
	if err := copyFile(in.Binary, Binary(), 0o755); err != nil {
		return Installed{}, err
	}
	if o.Vocab == "" {
		o.Vocab = Vocab()
	}
	if err := tinymodel.Write(in.Model, o); err != nil {
		return Installed{}, fmt.Errorf("tiny model: %w", err)
	}
	return in, os.Chmod(in.Model, 0o644)
}

// Describe names the pinned engine, for what the demo prints.
func Describe() string {
	return "llama.cpp's own llama-server " + Version + " (" + Commit + ")"
}

// WaitReady polls url's /health until it answers 200, exited is closed, or
// limit passes; each probe waits at most a second.
func WaitReady(ctx context.Context, url string, exited <-chan struct{}, limit time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	probe := &http.Client{Timeout: time.Second}
	for {
		select {
		case <-exited:
			return fmt.Errorf("llama-server exited before it was ready")
		default:
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url+"/health", nil)
		if resp, err := probe.Do(req); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-exited:
			return fmt.Errorf("llama-server exited before it was ready")
		case <-ctx.Done():
			return fmt.Errorf("no 200 from %s/health within %s", url, limit)
		case <-tick.C:
		}
	}
}

// copyFile copies src to dst, created with mode.
func copyFile(dst, src string, mode os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer func() { _ = in.Close() }()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		_ = out.Close()
		return fmt.Errorf("copy %s: %w", src, err)
	}
	return out.Close()
}
