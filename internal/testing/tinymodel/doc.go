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
// The tokenizer (every tokenizer.ggml.* key) is copied from a vocabulary
// file of llama.cpp's source tree, models/ggml-vocab-llama-spm.gguf by
// default (the 32,000-token SentencePiece vocabulary), which make
// llama-server keeps beside the binary (internal/testing/realengine finds
// it).
package tinymodel
