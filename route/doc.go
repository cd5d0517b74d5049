// Package route owns everything a node does to move one chat completion
// request to a provider and back: the provider catalog and its adapters
// (OpenAI and every OpenAI-compatible server, Azure OpenAI), request
// decoding, token estimation, the planner and its policy, outlier detection
// and 429 cooldowns, the local rate limiter, and the executor that admits
// each attempt in one step (Executor.Admit: the guard, budget, health, rate
// share and replica ring, returning a ticket that settles once), fails over
// before the first byte and relays server-sent events chunk by chunk.
//
// route imports only the standard library, region/ and small leaf
// libraries (regexp2, and tiktoken-go-loader for the embedded o200k_base
// ranks; tiktoken-go itself is only the tests' reference). It must not
// import gossip/, consensus/ or node/: it declares the narrow interfaces
// it needs — HealthView for what the mesh knows of providers, QuotaGate
// for rate capacity, BudgetGate for spend — and node/ plugs the real
// implementations in. That keeps the planner pure,
// fast and testable, and lets sim/ drive it in virtual time.
package route
