package route

import "time"

// EngineLoad is what a self-hosted replica's inference engine (vLLM,
// SGLang, TGI) last reported of its load, as the node scraped it from
// the engine's metrics endpoint or a peer of its region gossiped it.
type EngineLoad struct {
	Running int     // sequences being generated (vllm:num_requests_running)
	Waiting int     // requests queued for a batch slot (vllm:num_requests_waiting)
	KVUsage float64 // fraction of the KV cache in use, 0 to 1 (vllm:kv_cache_usage_perc)
	// PrefixHitRate is the engine's prefix-cache hits over queries since
	// the last scrape, 0 to 1; negative when it reported none.
	PrefixHitRate float64
	At            time.Time // when it was read
	// Stale means the last scrapes failed or returned nothing usable:
	// the figures are the last good ones, not to be relied on; routing
	// falls back to the node's own in-flight counts.
	Stale bool
}

// EngineSignals gives the engine load of a provider's replicas. A node
// implements it from its scrapes and its region's gossip; nil means no
// signals, and replicas are chosen from in-flight counts alone.
type EngineSignals interface {
	// Replica returns the load of replica i of provider, false when
	// nothing is known of it.
	Replica(provider string, i int) (EngineLoad, bool)
}

// RemoteEngine is what a node of a provider's region last reported of
// the provider's engines: the replicas with fresh figures and what they
// run and queue, summed, with the fullest one's KV cache.
type RemoteEngine struct {
	Replicas         int
	Running, Waiting int
	KVUsage          float64
}

// RemoteEngines gives the engine load of self-hosted providers this node
// does not call itself (another region's, reached through a via node),
// as nodes of their region gossip it. A node implements it from its mesh
// view; nil means none is known, and such providers are not predicted.
type RemoteEngines interface {
	// Engine returns the latest report of provider by a node of
	// regionName, false when none is fresh (or it has no replica with
	// fresh figures).
	Engine(provider, regionName string) (RemoteEngine, bool)
}
