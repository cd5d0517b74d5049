// Package config is a node's configuration: the YAML file (File and its
// sections), its strict parsing (Parse, Load), the presets DefaultConfig
// and DevConfig, and Resolve, the one pure function that validates a File
// and translates it into what each component takes (Runtime). It may
// import route, region, gossip, consensus and node/pki, never node.
package config

import (
	"fmt"
	"time"

	"go.yaml.in/yaml/v3"
)

// File is the node's configuration file (docs/configuration.md). Every
// key is strict: an unknown key or an invalid value fails start-up with a
// message naming the field. Secrets are never in the file: only the names
// of the environment variables holding them.
type File struct {
	Node      NodeSection       `yaml:"node"`
	Regions   []RegionSection   `yaml:"regions"`
	Providers []ProviderSection `yaml:"providers"`
	Tenants   []TenantSection   `yaml:"tenants"`
	Groups    []GroupSection    `yaml:"groups"`
	Limits    LimitsSection     `yaml:"limits"`
	Timeouts  TimeoutsSection   `yaml:"timeouts"`
	Outlier   OutlierSection    `yaml:"outlier"`
	Probes    ProbesSection     `yaml:"probes"`
	Tracing   TracingSection    `yaml:"tracing"`
	Audit     AuditSection      `yaml:"audit"`
	// Journal is the spend journal, in the data directory by default.
	Journal JournalSection `yaml:"journal"`
	// Cache is the exact-match response cache, off by default.
	Cache CacheSection `yaml:"cache"`
}

// NodeSection describes this node.
type NodeSection struct {
	Name            string   `yaml:"name"`             // unique in the mesh
	Region          string   `yaml:"region"`           // one of regions[].name
	DataDir         string   `yaml:"data_dir"`         // where durable state lives
	HTTP            string   `yaml:"http"`             // OpenAI API, admin, /metrics; default 127.0.0.1:8080
	RPC             string   `yaml:"rpc"`              // gRPC between nodes
	Gossip          string   `yaml:"gossip"`           // memberlist, TCP and UDP
	Raft            string   `yaml:"raft"`             // Raft transport, voters only
	Advertise       string   `yaml:"advertise"`        // address peers should use
	Voter           bool     `yaml:"voter"`            // holds a replica of the ledger
	BootstrapExpect int      `yaml:"bootstrap_expect"` // voters to wait for before the first election
	Join            []string `yaml:"join"`             // gossip seeds
	AdminTokenEnv   string   `yaml:"admin_token_env"`  // environment variable holding the admin token
	GossipKeyEnv    string   `yaml:"gossip_key_env"`   // environment variable holding the base64 32-byte gossip key
	GossipKeyFile   string   `yaml:"gossip_key_file"`  // or a file holding it
	Cluster         string   `yaml:"cluster"`          // gossip label: nodes of other clusters are refused
	// TLS, when set, makes every connection between nodes (gRPC and the
	// Raft transport) mutual TLS with certificates from these files.
	TLS *TLSSection `yaml:"tls"`
	// Drain bounds a graceful stop (llmesh drain, leave, SIGTERM).
	Drain DrainSection `yaml:"drain"`
}

// DrainSection says how a node stops taking traffic.
type DrainSection struct {
	// Grace is how long a draining node keeps accepting connections,
	// handing new requests to peers, after it announced it drains and
	// /readyz turned 503: load balancers and clients polling readiness
	// move away meanwhile. Default 5s.
	Grace Duration `yaml:"grace"`
	// Timeout bounds the whole drain: requests and streams in flight
	// that have not finished by then are cut. Default 30s.
	Timeout Duration `yaml:"timeout"`
}

// TLSSection names the PEM files of a node's certificate, its key and the
// mesh's CA (`llmesh tls init` writes development ones).
type TLSSection struct {
	CAFile   string `yaml:"ca_file"`
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
}

// RegionSection maps a region to its jurisdiction.
type RegionSection struct {
	Name         string `yaml:"name"`
	Jurisdiction string `yaml:"jurisdiction"`
}

// ProviderSection is one upstream provider.
type ProviderSection struct {
	Name          string           `yaml:"name"`
	Kind          string           `yaml:"kind"`          // openai (default) | azure
	Region        string           `yaml:"region"`        // one of regions[].name
	Reach         string           `yaml:"reach"`         // global (default) | region
	Jurisdictions []string         `yaml:"jurisdictions"` // default: the region's
	BaseURL       string           `yaml:"base_url"`
	Replicas      []ReplicaSection `yaml:"replicas"`
	// ReplicaPolicy chooses among the replicas: prefix (the default),
	// session, least_loaded or round_robin.
	ReplicaPolicy string         `yaml:"replica_policy"`
	APIKeyEnv     string         `yaml:"api_key_env"`
	APIVersion    string         `yaml:"api_version"` // azure only, required there
	Priority      int            `yaml:"priority"`
	Limits        RateSection    `yaml:"limits"`
	Models        []ModelSection `yaml:"models"`
	// MetricsPath is where each replica serves its engine's Prometheus
	// metrics, below its base URL's host: /metrics by default for the
	// vllm, sglang and tgi kinds, none for the others; off scrapes none.
	MetricsPath string `yaml:"metrics_path"`
}

// ReplicaSection is one replica of a provider: its base URL, written as
// a string alone or as a mapping with its settings.
type ReplicaSection struct {
	URL string `yaml:"url"`
	// Name names it to clients (X-LLMesh-Replica) and operators;
	// default PROVIDER/INDEX.
	Name string `yaml:"name"`
	// MaxConcurrent bounds this node's requests in flight on it and
	// weighs it among the replicas; 0: unbounded.
	MaxConcurrent int `yaml:"max_concurrent"`
}

// ReplicaURLs is replicas given by their URLs alone.
func ReplicaURLs(urls ...string) []ReplicaSection {
	out := make([]ReplicaSection, len(urls))
	for i, u := range urls {
		out[i].URL = u
	}
	return out
}

// UnmarshalYAML reads a replica written as its URL or as a mapping, whose
// keys are checked as strictly as the rest of the file's.
func (r *ReplicaSection) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		*r = ReplicaSection{}
		return n.Decode(&r.URL)
	}
	// Errors in the decoder's own form, which Parse renders as paths.
	if n.Kind != yaml.MappingNode {
		return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: cannot unmarshal %s into config.ReplicaSection", n.Line, n.ShortTag())}}
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		switch k := n.Content[i]; k.Value {
		case "url", "name", "max_concurrent":
		default:
			return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: field %s not found in type config.ReplicaSection", k.Line, k.Value)}}
		}
	}
	type plain ReplicaSection // without this method
	return n.Decode((*plain)(r))
}

// RateSection is a provider's mesh-wide rate limits; 0 means none.
type RateSection struct {
	RPM int `yaml:"rpm"`
	TPM int `yaml:"tpm"`
}

// ModelSection is a model a provider serves.
type ModelSection struct {
	Name             string  `yaml:"name"`       // what clients ask for
	Upstream         string  `yaml:"upstream"`   // the provider's name for it; default name
	Deployment       string  `yaml:"deployment"` // azure deployment; required there
	InputUSDPerMTok  float64 `yaml:"input_usd_per_mtok"`
	OutputUSDPerMTok float64 `yaml:"output_usd_per_mtok"`
	// CachedInputUSDPerMTok prices the prompt tokens the provider serves
	// from its prompt cache; default (nil) the input price, no discount.
	// 0 is a free cache.
	CachedInputUSDPerMTok *float64 `yaml:"cached_input_usd_per_mtok"`
	MaxOutputTokens       int      `yaml:"max_output_tokens"` // default 4096
	// API is what the model serves: chat (the default) or embeddings.
	API string `yaml:"api"`
}

// TenantSection is one tenant: who may call, where its data may go and
// what it may spend.
type TenantSection struct {
	Name      string   `yaml:"name"`
	KeySHA256 []string `yaml:"key_sha256"` // hex SHA-256 of each API key
	Residency string   `yaml:"residency"`  // optional jurisdiction
	// StrictTransit keeps the tenant's requests on nodes of its
	// residency's jurisdiction too, not only its providers.
	StrictTransit bool           `yaml:"strict_transit"`
	Budget        *BudgetSection `yaml:"budget"`
	// Priority orders the tenant's requests waiting for admission:
	// interactive (the default) ahead of batch.
	Priority string `yaml:"priority"`
	// MaxTTFT is the tenant's time-to-first-token objective: a provider
	// whose every replica is predicted to start later goes after the
	// other compliant providers (spill-over to a cloud fallback, back
	// when the queue drains). Optional; 0 or absent: none.
	MaxTTFT Duration `yaml:"max_ttft"`
	// Cache opts the tenant's reusable requests into the response cache
	// (cache.enabled must be true).
	Cache bool `yaml:"cache"`
	// Limits are the tenant's requests and tokens a minute across the
	// mesh, all its keys together. Optional.
	Limits *RateSection `yaml:"limits"`
	// Keys are settings of some of the tenant's keys (a key listed here
	// need not be in key_sha256 too). Optional.
	Keys []KeySection `yaml:"keys"`
}

// KeySection is one API key's own settings.
type KeySection struct {
	// Name is unique within the tenant: what operators, metrics and
	// refusals call the key. Optional.
	Name      string `yaml:"name"`
	KeySHA256 string `yaml:"key_sha256"` // hex SHA-256 of the key
	// Models are the models (or groups) the key may ask for, by the name
	// the client sends; absent: every model.
	Models []string `yaml:"models"`
	// Limits are the key's requests and tokens a minute across the mesh.
	Limits *RateSection `yaml:"limits"`
	// Budget is the key's own spending limit; its tenant's still applies.
	Budget *BudgetSection `yaml:"budget"`
}

// GroupSection is a model name standing for several models: the planner
// chooses among their providers by the same policy, within the tier the
// prompt's size picks, and by weight when weights are given (sticky per
// session).
type GroupSection struct {
	Name    string         `yaml:"name"`    // what clients ask for, e.g. auto
	Members []string       `yaml:"members"` // models some provider serves
	Tiers   []TierSection  `yaml:"tiers"`   // optional, in order; the first that fits applies
	Weights map[string]int `yaml:"weights"` // optional: member -> share of sessions
	// MaxTTFT is the group's time-to-first-token objective, as a
	// tenant's (the tighter of the two applies). Optional.
	MaxTTFT Duration `yaml:"max_ttft"`
	// FallbackOn lists the classes of a provider's answer before the
	// first byte that move the request to the next compliant target:
	// content_filter, context_length, rate_limited, server_error.
	// Optional; absent, a provider's 4xx is relayed as it is.
	FallbackOn []string `yaml:"fallback_on"`
	// ContextFallback names the larger-context models a context_length
	// refusal moves the request to. Optional; needs context_length in
	// FallbackOn.
	ContextFallback []string `yaml:"context_fallback"`
	// Cache opts the reusable requests naming the group into the
	// response cache (cache.enabled must be true).
	Cache bool `yaml:"cache"`
}

// TierSection routes prompts of up to MaxPromptTokens (0: any) to its
// members.
type TierSection struct {
	MaxPromptTokens int      `yaml:"max_prompt_tokens"`
	Members         []string `yaml:"members"`
}

// BudgetSection is a tenant's spending limit.
type BudgetSection struct {
	USD    float64 `yaml:"usd"`
	Period string  `yaml:"period"` // day | month | total
}

// LimitsSection bounds what a client may send and a provider may answer.
type LimitsSection struct {
	MaxBodyBytes     int64 `yaml:"max_body_bytes"`     // a request body; default 8 MiB
	MaxAttempts      int   `yaml:"max_attempts"`       // providers tried per request; default 3
	MaxResponseBytes int64 `yaml:"max_response_bytes"` // a non-streamed answer; default 32 MiB
	MaxEventBytes    int   `yaml:"max_event_bytes"`    // one streamed event; default 1 MiB
	MaxHeaderBytes   int   `yaml:"max_header_bytes"`   // a request's headers; default 64 KiB
	MaxMessages      int   `yaml:"max_messages"`       // messages in one request; default 4096
	// MaxConcurrentPerTenant bounds one tenant's requests in flight on
	// this node (forwards from peers are counted where they entered);
	// default 256.
	MaxConcurrentPerTenant int `yaml:"max_concurrent_per_tenant"`
	// MaxStreamDuration bounds one stream from its request to its end;
	// default 1h.
	MaxStreamDuration Duration `yaml:"max_stream_duration"`
	// AdmissionWait is the longest a request waits for budget escrow or
	// a rate share this node does not hold yet (a top-up in flight, a
	// share being renewed) before it is answered 429; default 2s. The
	// client's own deadline bounds it too.
	AdmissionWait Duration `yaml:"admission_wait"`
	// AdmissionQueue bounds the requests waiting so on this node at once;
	// default 1024.
	AdmissionQueue int `yaml:"admission_queue"`
	// StoredResponsesBytes bounds the Responses API responses this node
	// keeps in memory, those it relayed and the copies it holds for
	// peers together, the least recently used out; default 64MiB.
	StoredResponsesBytes ByteSize `yaml:"stored_responses_bytes"`
}

// TimeoutsSection sets each phase's timeout separately.
type TimeoutsSection struct {
	Connect     Duration `yaml:"connect"`      // TCP+TLS to a provider; default 5s
	FirstByte   Duration `yaml:"first_byte"`   // to a stream's first event; default 60s
	Response    Duration `yaml:"response"`     // to a whole non-streamed answer; default 10m
	StreamIdle  Duration `yaml:"stream_idle"`  // between two events of a stream; default 60s
	ReadHeader  Duration `yaml:"read_header"`  // a client's request headers; default 10s
	ReadBody    Duration `yaml:"read_body"`    // a client's request body; default 30s
	ClientWrite Duration `yaml:"client_write"` // one write to a client that stopped reading; default 30s
}

// OutlierSection tunes outlier detection.
type OutlierSection struct {
	ConsecutiveFailures int      `yaml:"consecutive_failures"` // default 5
	BaseEjection        Duration `yaml:"base_ejection"`        // default 5s, doubling per ejection
	MaxEjection         Duration `yaml:"max_ejection"`         // default 5m
}

// ProbesSection tunes active health probes: a provider nobody in the
// region has called for Idle gets a one-token request from one node of
// the region.
type ProbesSection struct {
	Idle     Duration `yaml:"idle"`     // default 30s
	Disabled bool     `yaml:"disabled"` // no probes at all
}

// AuditSection places the audit trail: a line per routing decision for a
// tenant with a residency, appended to DIR/audit.jsonl and rotated at
// max_file_mb. On by default, in DATA_DIR/audit.
type AuditSection struct {
	Dir       string `yaml:"dir"`         // default DATA_DIR/audit
	MaxFileMB int    `yaml:"max_file_mb"` // default 64
	Disabled  bool   `yaml:"disabled"`    // no audit trail at all
}

// JournalSection places the spend journal: what a node restarted with
// its data recovers of its escrow, rate shares and spend attribution.
type JournalSection struct {
	Dir      string   `yaml:"dir"`      // default DATA_DIR/journal
	Flush    Duration `yaml:"flush"`    // the longest a change waits to be written; default 100ms
	Disabled bool     `yaml:"disabled"` // no journal: a crashed node's escrow is written off
}

// TracingSection sends a span per request to an OpenTelemetry collector
// (OTLP over HTTP, JSON encoding). Off unless otlp_endpoint is set; the
// W3C traceparent header is honoured and passed on either way.
type TracingSection struct {
	OTLPEndpoint string   `yaml:"otlp_endpoint"` // e.g. http://127.0.0.1:4318/v1/traces
	HeadersEnv   string   `yaml:"headers_env"`   // environment variable holding "key=value,..." headers for the collector
	SampleRatio  *float64 `yaml:"sample_ratio"`  // of the traces this node starts (a caller's sampled flag is followed); default 1
	ServiceName  string   `yaml:"service_name"`  // default llmesh
}

// Duration is a time.Duration written as "5s" or "10m" in YAML.
type Duration time.Duration

// UnmarshalYAML parses a Go duration string.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	var s string
	if err := n.Decode(&s); err != nil {
		return fmt.Errorf("line %d: want a duration such as \"5s\"", n.Line)
	}
	v, err := time.ParseDuration(s)
	if err != nil || v < 0 {
		return fmt.Errorf("line %d: %q is not a duration such as \"5s\"", n.Line, s)
	}
	*d = Duration(v)
	return nil
}
