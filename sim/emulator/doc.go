// Package emulator owns the provider emulator: an OpenAI, Azure OpenAI and
// Anthropic compatible server that dev mode, demos, tests and benchmarks
// use in place of real providers. It serves chat completions, embeddings
// (unit vectors of each model's dimension, Config.EmbeddingDimensions),
// legacy completions, the Responses API (with stored responses, which
// previous_response_id, GET, DELETE and cancel name; Config.NoResponses
// turns it off, as on vLLM-style servers), Anthropic Messages (and
// count_tokens) and GET /v1/models and /v1/models/{id}, OpenAI's and
// Azure's paths where both exist. It serves in process (Handler) or on a
// listener of its own (Start), and its behaviour — latency, time to first
// token, token rate, error rate, requests per minute, API key, models and
// prices — and its failure mode (refuse, error, hang, cut, or a refusal
// of every prompt by a content filter or for its length) can be changed
// while it runs, from Go (SetConfig, SetMode) or over HTTP
// (POST /emulator/mode, GET /emulator/stats) when it runs in another process.
// Every endpoint answers errors in its own API's shape.
//
// With Config.Engine it is an inference engine replica worth routing
// against (sim/engine, driven here in real time): requests queue for a
// place in a batch of at most MaxRunning sequences and for KV cache
// blocks for their prompt and output; the prompt's full blocks are
// looked up in a prefix cache by chained hashes of their token ids (the
// messages as route.Tokenizer.EncodeMessages lays them out, tools
// first), the first token comes once the tokens not found are computed
// at PrefillTokensPerSecond, and the others at the engine's steps,
// DecodeBase + DecodePerSeq × the batch each; blocks no request holds
// stay cached until evicted, least recently used first, and an answer's
// blocks are cached too, so that a conversation's next turn finds its
// whole history. Presets: engine.Llama8BOnH100 (a cold 4,000-token
// prompt's first token in about 170 ms, a warm one's in under 10 ms) and
// engine.Llama70BOn4H100 (about 420 ms and 17 ms). A client that goes
// away frees its place and its blocks at once. Usage reports the prompt
// tokens found (cached_tokens; Anthropic's cache_read_input_tokens, its
// input_tokens then those not read from the cache), and GET /metrics,
// served with or without an engine (zeros without), reports the engine
// under vLLM's names: vllm:num_requests_running, vllm:num_requests_waiting,
// vllm:kv_cache_usage_perc, vllm:prefix_cache_queries_total,
// vllm:prefix_cache_hits_total, vllm:time_to_first_token_seconds and a
// few more, labelled with model_name and engine as vLLM labels them.
//
// Chat requests are decoded and validated with route.ParseChatRequest and
// prompts of every API are counted with route.Tokenizer (Messages and
// Responses inputs as the chat messages they amount to), so the emulator
// accepts what the gateway accepts and reports usage as the gateway would
// count it. Generated text is made of words that are each one o200k token,
// so a completion of N tokens tokenises back to N. A request that offers
// tools is answered with a call to one, unless its last message is a
// tool's result, which is answered in text: an agent loop ends in two
// turns. Everything it generates (text, ids, which requests fail at the
// configured error rate) is a function of Config.Seed and the order in
// which requests arrive; embedding vectors of the seed, the model and the
// input alone; Responses ids also carry a random part drawn by New, so that
// two emulators of one configuration never hand out the same id.
//
// emulator imports only route/ (route/anthropic for Anthropic's error
// types), sim/engine, the Prometheus client and the standard library. It must not import node/ or anything
// that composes a node: sim/harness, cmd/ and tests import
// it. Its conformance/ folder is a module of its own that validates the
// answers against OpenAI's OpenAPI document.
package emulator
