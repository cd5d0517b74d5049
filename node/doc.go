// Package node is llmesh's composition root: the only package that
// composes every other one. It wires the request path (tenant keys,
// planner, executor, the ledger's gates, gossip's health view, the
// forwarding hop), runs the one request pipeline every entry goes through
// (pipeline.go: inbound → admit; serve.go: execute, account, audit,
// trace), serves HTTP (the OpenAI API, the admin API, /metrics, the
// dashboard) and gRPC (forwards and the ledger), and owns the node's
// lifecycle: New builds without I/O, Start listens and serves, Drain hands
// requests and leadership over and leaves, Shutdown reverses start-up and
// is idempotent.
//
// The separable parts are sub-packages taking narrow inputs: config (the
// file and its pure translation into each component's config), pki,
// ledger, forward, tenant, metrics, decisions, audit, tracing, probe, ui
// and views. None of them imports node.
package node
