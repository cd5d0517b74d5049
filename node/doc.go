// Package node is llmesh's composition root: the only package that imports
// every other one. It owns the configuration file and its translation into
// per-component settings, the wiring of the request path (tenants, planner,
// executor, metrics), the HTTP server (OpenAI API, health, /metrics), and
// the node's lifecycle: New builds without I/O, Start listens and serves,
// Shutdown reverses start-up and is idempotent.
//
// Gossip, the Raft ledger, forwarding between nodes and live operations
// plug into the seams route/ declares (HealthView, QuotaGate, BudgetGate);
// until they do, a node routes with its own observations and the whole
// configured rate limits.
package node
