// Package fakeengine is fake-engine: an OpenAI-compatible stand-in for the
// inference engines llmgw runs (vLLM, SGLang, TGI, llama.cpp's server), for
// tests and demos on machines without GPUs or models.
//
// It takes vLLM's command shape (`serve MODEL --host H --port P
// --tensor-parallel-size N ...`) and the other engines' spellings of the
// same flags, ignoring flags it does not know. It behaves like an engine
// where llmgw's driver and gateway look: /health answers 503 while a
// simulated checkpoint load logs progress in vLLM's words, then 200;
// /v1/models, /v1/chat/completions, /v1/completions (whole or streamed as
// server-sent events, paced at a set number of tokens per second, with
// deterministic text) and /v1/embeddings (deterministic unit vectors) answer
// in OpenAI's shapes; /metrics serves Prometheus text under the names of
// the engine it impersonates, moving with its load. Flags make it crash
// after a delay with a chosen exit code, ignore SIGTERM, or refuse to start
// unless CUDA_VISIBLE_DEVICES holds the GPUs asked for.
//
// In strict mode (--strict vllm@v0.28.0, or FAKE_ENGINE_STRICT) it first
// walks the command line with the engine's contract (engine/contract) and
// refuses what that engine's parser would, with its message and exit status.
//
// Run is the whole program; cmd/fake-engine only wires the process to it.
// docs/fake-engine.md is the operator's page.
package fakeengine
