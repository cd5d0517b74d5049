package config

import (
	"time"

	"github.com/llmesh/llmesh/route"
)

// DefaultConfig returns a File holding every key's default, as Resolve
// applies it to a key left out. It is not a node's whole configuration:
// node.name, node.region, node.data_dir and regions have no default.
func DefaultConfig() *File {
	ex, h := route.DefaultExecutorConfig(), route.DefaultHealthConfig()
	return &File{
		Node: NodeSection{HTTP: DefaultHTTPAddr,
			Drain: DrainSection{Grace: Duration(5 * time.Second), Timeout: Duration(30 * time.Second)}},
		Limits: LimitsSection{
			MaxBodyBytes: DefaultMaxBodyBytes, MaxAttempts: ex.MaxAttempts, MaxResponseBytes: ex.MaxResponseBytes,
			MaxEventBytes: ex.MaxEventBytes, MaxHeaderBytes: 64 << 10, MaxMessages: 4096, MaxConcurrentPerTenant: 256,
			MaxStreamDuration: Duration(ex.MaxStreamDuration), AdmissionWait: Duration(2 * time.Second), AdmissionQueue: 1024,
			StoredResponsesBytes: DefaultStoredResponsesBytes,
		},
		Timeouts: TimeoutsSection{
			Connect: Duration(ex.ConnectTimeout), FirstByte: Duration(ex.FirstByteTimeout), Response: Duration(ex.ResponseTimeout),
			StreamIdle: Duration(ex.StreamIdleTimeout), ReadHeader: Duration(10 * time.Second), ReadBody: Duration(30 * time.Second),
			ClientWrite: Duration(30 * time.Second),
		},
		Outlier: OutlierSection{ConsecutiveFailures: h.EjectAfter, BaseEjection: Duration(h.BaseEjection), MaxEjection: Duration(h.MaxEjection)},
		Probes:  ProbesSection{Idle: Duration(30 * time.Second)},
		Audit:   AuditSection{MaxFileMB: 64},
		Cache:   CacheSection{TTL: Duration(DefaultCacheTTL), MaxBytes: DefaultCacheBytes},
	}
}

// DevConfig is `llmesh agent -dev`: DefaultConfig with one voter, dev, in
// eu-west of two regions (eu-west in eu, us-east in us), gossip, Raft and
// RPC on loopback ports of the system's choosing, a short drain, the dev
// stack's four providers and the tenant dev with $5 a day.
//
// It leaves to whoever starts the stack what cannot be known here: the
// data directory, each provider's base_url (sim/harness starts emulated
// providers) and the dev tenant's key_sha256 (a key made at start).
func DevConfig() *File {
	c := DefaultConfig()
	c.Node.Name, c.Node.Region = "dev", "eu-west"
	c.Node.Gossip, c.Node.Raft, c.Node.RPC = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	c.Node.Voter, c.Node.BootstrapExpect = true, 1
	// One node, no peers to hand requests to: stop soon.
	c.Node.Drain.Grace = Duration(500 * time.Millisecond)
	c.Regions = []RegionSection{{Name: "eu-west", Jurisdiction: "eu"}, {Name: "us-east", Jurisdiction: "us"}}
	c.Providers = devProviders()
	c.Tenants = []TenantSection{{Name: "dev", Budget: &BudgetSection{USD: 5, Period: "day"}}}
	// The response cache is on, for the requests that ask for it
	// (X-LLMesh-Cache: on); no tenant is opted in.
	c.Cache.Enabled = true
	return c
}

// devProviders are the dev stack's providers: the same gpt-4o and
// embedding models from OpenAI in the US and Azure OpenAI in the EU, and
// open chat and embedding models from a self-hosted GPU cluster that only
// the EU region can reach, cheaper than a hosted API serving them
// globally.
func devProviders() []ProviderSection {
	gpt := []ModelSection{
		{Name: "gpt-4o-mini", InputUSDPerMTok: 0.15, OutputUSDPerMTok: 0.60},
		{Name: "gpt-4o", InputUSDPerMTok: 2.50, OutputUSDPerMTok: 10},
	}
	azure := []ModelSection{
		{Name: "gpt-4o-mini", Deployment: "gpt-4o-mini", InputUSDPerMTok: 0.15, OutputUSDPerMTok: 0.60},
		{Name: "gpt-4o", Deployment: "gpt-4o", InputUSDPerMTok: 2.50, OutputUSDPerMTok: 10},
	}
	gpt = append(gpt, ModelSection{Name: "text-embedding-3-small", InputUSDPerMTok: 0.02, API: "embeddings"})
	azure = append(azure, ModelSection{Name: "text-embedding-3-small", Deployment: "text-embedding-3-small", InputUSDPerMTok: 0.02, API: "embeddings"})
	llama := func(in, out float64) []ModelSection {
		return []ModelSection{{Name: "llama-3-8b", Upstream: "meta-llama/Meta-Llama-3-8B-Instruct", InputUSDPerMTok: in, OutputUSDPerMTok: out},
			{Name: "bge-m3", Upstream: "BAAI/bge-m3", InputUSDPerMTok: in / 5, API: "embeddings"}}
	}
	return []ProviderSection{
		{Name: "openai-us", Kind: "openai", Region: "us-east", Reach: "global", Jurisdictions: []string{"us"}, Models: gpt},
		{Name: "azure-eu", Kind: "azure", Region: "eu-west", Reach: "global", Jurisdictions: []string{"eu"},
			APIVersion: "2024-10-21", Models: azure, Priority: 1},
		{Name: "gpu-eu", Kind: "vllm", Region: "eu-west", Reach: "region", Jurisdictions: []string{"eu"}, Models: llama(0.05, 0.10)},
		{Name: "together-us", Kind: "openai", Region: "us-east", Reach: "global", Jurisdictions: []string{"us"}, Models: llama(0.10, 0.20)},
	}
}

// DemoConfig is node name, in region, of `llmesh demo`'s three-region
// mesh: DevConfig with the regions eu-west (eu), us-east (us) and
// ap-south (ap), three voters bootstrapping together with the ledger in
// memory (node.data_dir is never written), the demo's providers and its
// tenants acme (eu, $5 a day), globex (us, $5 a day) and initech ($0.0001
// in all).
//
// As with DevConfig, the providers' addresses (gpu-eu has replicas), the
// tenants' key hashes, node.join and the audit directory are the
// caller's.
func DemoConfig(name, region string) *File {
	c := DevConfig()
	c.Node.Name, c.Node.Region = name, region
	c.Node.BootstrapExpect, c.Node.DataDir = 3, "/nonexistent"
	c.Journal.Disabled = true // a ledger in memory forgets what a journal would tell it
	c.Regions = append(c.Regions, RegionSection{Name: "ap-south", Jurisdiction: "ap"})
	mini := func(deployment string) []ModelSection {
		return []ModelSection{{Name: "gpt-4o-mini", Deployment: deployment, InputUSDPerMTok: 0.15, OutputUSDPerMTok: 0.60}}
	}
	llama := ModelSection{Name: "llama-3-8b", Upstream: "meta-llama/Meta-Llama-3-8B-Instruct", InputUSDPerMTok: 0.05, OutputUSDPerMTok: 0.10}
	c.Providers = []ProviderSection{
		{Name: "gpu-eu", Kind: "vllm", Region: "eu-west", Reach: "region", Jurisdictions: []string{"eu"}, Models: []ModelSection{llama}},
		{Name: "azure-eu", Kind: "azure", Region: "eu-west", Reach: "global", Jurisdictions: []string{"eu"},
			APIVersion: "2024-10-21", Models: mini("gpt-4o-mini")},
		{Name: "azure-us", Kind: "azure", Region: "us-east", Reach: "global", Jurisdictions: []string{"us"}, Priority: 1,
			APIVersion: "2024-10-21", Models: mini("gpt-4o-mini")},
		{Name: "openai-us", Kind: "openai", Region: "us-east", Reach: "global", Jurisdictions: []string{"us"},
			Models: append(mini(""), ModelSection{Name: "llama-3-8b", Upstream: llama.Upstream, InputUSDPerMTok: 0.20, OutputUSDPerMTok: 0.40})},
	}
	c.Tenants = []TenantSection{
		{Name: "acme", Residency: "eu", Budget: &BudgetSection{USD: 5, Period: "day"}},
		{Name: "globex", Residency: "us", Budget: &BudgetSection{USD: 5, Period: "day"}},
		{Name: "initech", Budget: &BudgetSection{USD: 0.0001, Period: "total"}},
	}
	return c
}
