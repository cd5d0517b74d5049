// Package emulator owns the provider emulator: an OpenAI, Azure OpenAI and
// Anthropic compatible server that dev mode, demos, tests and benchmarks
// use in place of real providers. It serves chat completions, embeddings
// (deterministic unit vectors of each model's dimension), legacy
// completions, the Responses API (with stored responses; Config.NoResponses
// turns it off, as on vLLM-style servers), Anthropic Messages and
// GET /v1/models[/{id}]. It serves in process (Handler)
// or on a listener of its own (Start), and its behaviour — latency, time to
// first token, token rate, error rate, requests per minute, API key, models
// and prices — and its failure mode (refuse, error, hang, cut) can be changed
// while it runs, from Go (SetConfig, SetMode) or over HTTP
// (POST /emulator/mode, GET /emulator/stats) when it runs in another process.
//
// Requests are decoded and validated with route.ParseChatRequest and prompts
// are counted with route.Tokenizer, so the emulator accepts what the gateway
// accepts and reports usage exactly as the gateway would count it. Generated
// text is made of words that are each one o200k token, so a completion of N
// tokens tokenises back to N. Everything it generates (text, ids, which
// requests fail at the configured error rate) is a function of Config.Seed
// and the order in which requests arrive.
//
// emulator imports only route/ and the standard library. It must not import
// node/ or anything that composes a node: sim/harness, cmd/ and tests import it.
package emulator
