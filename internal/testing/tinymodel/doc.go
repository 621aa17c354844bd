// Package tinymodel writes small llama-architecture GGUF models that
// llama.cpp's real llama-server loads and answers with, for tests and the
// demo: no weights can be downloaded here, and random weights are a trap
// (they emit byte tokens that are not UTF-8, and the server's chat endpoint
// answers 500).
//
// The model is deterministic: the same Options give the same bytes, and it
// answers Options.Answer ("Hello world!" by default) and then the end of
// sequence, for any prompt and any sampling settings. The answer is a state
// machine in the embeddings and the output rows: every token the answer
// does not use embeds to one direction, which the output maps to the
// answer's first token; each answer token embeds to a direction of its own,
// which the output maps to the next answer token, the last one to the end of
// sequence, with a logit margin of Margin. The transformer layers are
// really there and really computed (small seeded weights in the attention
// and feed-forward inputs), but their output projections are zero, so
// nothing they compute disturbs the chain; the cost of a prompt and of a
// token grows with Layers and Embed as a real model's does.
//
// WriteAdapter writes a LoRA adapter for such a model, in the GGUF form
// llama.cpp loads with --lora: applied at scale 1 it makes the model answer
// AdapterOptions.Answer instead, and at scale 0 it changes nothing, so a
// test sees which adapter (if any) answered. It changes the token
// embeddings (its answer's tokens get states of their own), the output (a
// chain of its own through those states), and the first layer's attention:
// every prompt position computed under the adapter carries its signature
// in the attention's values, and its first token needs that signature, so
// a prompt whose cache was computed under another adapter is answered
// wrong, visibly (llama.cpp issue 26207); adapter.go says how. An adapter
// written for another Embed is refused by the model, as llama.cpp refuses
// an adapter for another base model.
//
// The tokenizer (every tokenizer.ggml.* key) is copied from a vocabulary
// file of llama.cpp's source tree, models/ggml-vocab-llama-spm.gguf by
// default (the 32,000-token SentencePiece vocabulary), which make
// llama-server keeps beside the binary (internal/testing/realengine finds
// it).
package tinymodel
