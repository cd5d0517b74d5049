package config

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/llmesh/llmesh/node/pki"
	"github.com/llmesh/llmesh/region"
	"github.com/llmesh/llmesh/route"
)

// Resolve validates c and translates it into a Runtime. env reads the
// environment variables and files that hold secrets. Every problem found
// is reported, each naming its field; no secret is ever part of a message.
func Resolve(c *File, env Env) (*Runtime, error) {
	getenv, readFile := env.Getenv, env.ReadFile
	privateIP := env.PrivateIP
	if privateIP == nil {
		privateIP = PrivateIP
	}
	var problems []error
	bad := func(field, format string, args ...any) {
		problems = append(problems, fmt.Errorf("%s: "+format, append([]any{field}, args...)...))
	}
	s := &Runtime{
		Name:           c.Node.Name,
		Region:         c.Node.Region,
		HTTPAddr:       c.Node.HTTP,
		Executor:       route.DefaultExecutorConfig(),
		Health:         route.DefaultHealthConfig(),
		MaxBodyBytes:   DefaultMaxBodyBytes,
		MaxHeaderBytes: 64 << 10,
		MaxMessages:    4096,
		MaxInFlight:    256,
		AdmissionWait:  2 * time.Second,
		AdmissionQueue: 1024,
		ReadHeader:     10 * time.Second,
		ReadBody:       30 * time.Second,
		ClientWrite:    30 * time.Second,
		DrainGrace:     5 * time.Second,
		DrainTimeout:   30 * time.Second,
	}

	// node
	n := &c.Node
	switch {
	case n.Name == "":
		bad("node.name", "is required")
	case !nodeNamePattern.MatchString(n.Name):
		bad("node.name", "%q must be 1-64 letters, digits, '.', '_' or '-'", n.Name)
	}
	if n.DataDir == "" {
		bad("node.data_dir", "is required")
	}
	if s.HTTPAddr == "" {
		s.HTTPAddr = DefaultHTTPAddr
	}
	checkHostPort("node.http", s.HTTPAddr, &problems)
	checkHostPort("node.rpc", n.RPC, &problems)
	checkHostPort("node.gossip", n.Gossip, &problems)
	checkHostPort("node.raft", n.Raft, &problems)
	for i, j := range n.Join {
		checkHostPort(fmt.Sprintf("node.join[%d]", i), j, &problems)
	}
	if n.BootstrapExpect < 0 {
		bad("node.bootstrap_expect", "must not be negative")
	}
	if n.BootstrapExpect > 0 && !n.Voter {
		bad("node.bootstrap_expect", "is for voters; set node.voter: true or remove it")
	}
	checkEnvName("node.admin_token_env", n.AdminTokenEnv, &problems)
	if n.AdminTokenEnv != "" {
		if s.AdminToken = route.Secret(getenv(n.AdminTokenEnv)); s.AdminToken == "" {
			bad("node.admin_token_env", "environment variable %s is empty or unset", n.AdminTokenEnv)
		}
	} else if !loopbackAddr(s.HTTPAddr) {
		// Without a token the admin API answers loopback clients only,
		// but a proxy on the same host makes every client loopback.
		bad("node.admin_token_env", "is required when node.http (%s) is not a loopback address: the admin API (drain, budgets, tenant keys) would be open to whoever reaches the port", s.HTTPAddr)
	}

	// regions
	if len(c.Regions) == 0 {
		bad("regions", "at least one region is required")
	}
	rs := make([]region.Region, len(c.Regions))
	for i, r := range c.Regions {
		rs[i] = region.Region{Name: r.Name, Jurisdiction: region.Jurisdiction(r.Jurisdiction)}
	}
	regions, err := region.NewMap(rs)
	if err != nil {
		problems = append(problems, err)
		regions, _ = region.NewMap(nil)
	}
	s.Regions = regions
	if n.Region == "" {
		bad("node.region", "is required")
	} else if r, ok := regions.Lookup(n.Region); !ok && len(c.Regions) > 0 {
		bad("node.region", "%q is not one of regions[].name", n.Region)
	} else {
		s.Jurisdiction = string(r.Jurisdiction)
	}
	s.Voter, s.RPCAddr, s.Advertise = n.Voter, n.RPC, n.Advertise
	if n.Advertise == "auto" {
		ip, err := privateIP()
		if err != nil {
			bad("node.advertise", "auto: %v", err)
		}
		s.Advertise = ip
	}
	s.RaftAddr, s.BootstrapExpect, s.DataDir = n.Raft, n.BootstrapExpect, n.DataDir
	if n.Voter {
		if n.Raft == "" {
			bad("node.raft", "is required for a voter")
		} else if host, _, err := net.SplitHostPort(n.Raft); err == nil && n.Advertise == "" && (host == "" || net.ParseIP(host).IsUnspecified()) {
			bad("node.advertise", "is required when node.raft binds every address (%s): peers need an address to dial", n.Raft)
		}
		if n.RPC == "" {
			bad("node.rpc", "is required for a voter: other nodes reach the ledger through it")
		}
	}
	if n.Advertise != "" && n.Advertise != "auto" && net.ParseIP(n.Advertise) == nil {
		bad("node.advertise", "%q is not an IP address (or auto)", n.Advertise)
	}
	s.Gossip = resolveGossip(n, getenv, readFile, bad)
	if n.TLS != nil {
		t, err := pki.Load(pki.Files{CAFile: n.TLS.CAFile, CertFile: n.TLS.CertFile, KeyFile: n.TLS.KeyFile}, readFile)
		if err != nil {
			bad("node.tls", "%v", err)
		}
		s.TLS = t
	}

	// providers
	names := map[string]bool{}
	for i, p := range c.Providers {
		f := fmt.Sprintf("providers[%d]", i)
		if p.Name == "" {
			bad(f+".name", "is required")
		} else if !nodeNamePattern.MatchString(p.Name) {
			bad(f+".name", "%q must be 1-64 letters, digits, '.', '_' or '-'", p.Name)
		} else if names[p.Name] {
			bad(f+".name", "%q is used by another provider", p.Name)
		}
		names[p.Name] = true
		rp := route.Provider{
			Name: p.Name, Kind: route.Kind(p.Kind), Region: p.Region, Reach: route.Reach(p.Reach),
			BaseURL: p.BaseURL, Replicas: p.Replicas, APIVersion: p.APIVersion, Priority: p.Priority,
			RPM: p.Limits.RPM, TPM: p.Limits.TPM,
		}
		switch rp.Kind {
		case "":
			rp.Kind = route.KindOpenAI
		case route.KindOpenAI, route.KindAzure:
		default:
			bad(f+".kind", "%q must be openai or azure", p.Kind)
		}
		switch rp.Reach {
		case "":
			rp.Reach = route.ReachGlobal
		case route.ReachGlobal, route.ReachRegion:
		default:
			bad(f+".reach", "%q must be global or region", p.Reach)
		}
		reg, ok := regions.Lookup(p.Region)
		if p.Region == "" {
			bad(f+".region", "is required")
		} else if !ok {
			bad(f+".region", "%q is not one of regions[].name", p.Region)
		}
		var js []region.Jurisdiction
		for j, name := range p.Jurisdictions {
			if !region.ValidName(name) {
				bad(fmt.Sprintf("%s.jurisdictions[%d]", f, j), "%q is not a valid jurisdiction", name)
			}
			js = append(js, region.Jurisdiction(name))
		}
		if len(js) == 0 && ok {
			js = []region.Jurisdiction{reg.Jurisdiction}
		}
		rp.Jurisdictions = region.NewSet(js...)
		if p.BaseURL == "" && len(p.Replicas) == 0 {
			bad(f+".base_url", "is required (or give replicas)")
		}
		if p.BaseURL != "" {
			checkURL(f+".base_url", p.BaseURL, &problems)
		}
		for j, r := range p.Replicas {
			checkURL(fmt.Sprintf("%s.replicas[%d]", f, j), r, &problems)
		}
		checkEnvName(f+".api_key_env", p.APIKeyEnv, &problems)
		if p.APIKeyEnv != "" {
			if rp.APIKey = route.Secret(getenv(p.APIKeyEnv)); rp.APIKey == "" {
				bad(f+".api_key_env", "environment variable %s is empty or unset", p.APIKeyEnv)
			}
		}
		if rp.Kind == route.KindAzure && p.APIVersion == "" {
			bad(f+".api_version", "is required for an azure provider")
		}
		if rp.Kind != route.KindAzure && p.APIVersion != "" {
			bad(f+".api_version", "is only for azure providers")
		}
		if p.Limits.RPM < 0 {
			bad(f+".limits.rpm", "must not be negative")
		}
		if p.Limits.TPM < 0 {
			bad(f+".limits.tpm", "must not be negative")
		}
		if len(p.Models) == 0 {
			bad(f+".models", "at least one model is required")
		}
		models := map[string]bool{}
		for j, m := range p.Models {
			mf := fmt.Sprintf("%s.models[%d]", f, j)
			switch {
			case m.Name == "":
				bad(mf+".name", "is required")
			case models[m.Name]:
				bad(mf+".name", "%q is listed twice", m.Name)
			}
			models[m.Name] = true
			if m.InputUSDPerMTok < 0 {
				bad(mf+".input_usd_per_mtok", "must not be negative")
			}
			if m.OutputUSDPerMTok < 0 {
				bad(mf+".output_usd_per_mtok", "must not be negative")
			}
			if m.MaxOutputTokens < 0 {
				bad(mf+".max_output_tokens", "must not be negative")
			}
			if rp.Kind == route.KindAzure && m.Deployment == "" {
				bad(mf+".deployment", "is required for an azure provider")
			}
			if rp.Kind != route.KindAzure && m.Deployment != "" {
				bad(mf+".deployment", "is only for azure providers")
			}
			rp.Models = append(rp.Models, route.Model{
				Name: m.Name, Upstream: m.Upstream, Deployment: m.Deployment,
				InputUSDPerMTok: m.InputUSDPerMTok, OutputUSDPerMTok: m.OutputUSDPerMTok,
				MaxOutputTokens: m.MaxOutputTokens,
			})
		}
		s.Providers = append(s.Providers, rp)
	}

	// model groups (what they name is checked against the catalog)
	for i, g := range c.Groups {
		f := fmt.Sprintf("groups[%d]", i)
		if !nodeNamePattern.MatchString(g.Name) {
			bad(f+".name", "%q must be 1-64 letters, digits, '.', '_' or '-'", g.Name)
		}
		if len(g.Members) == 0 {
			bad(f+".members", "at least one model is required")
		}
		rg := route.Group{Name: g.Name, Members: g.Members, Weights: g.Weights}
		for j, t := range g.Tiers {
			if t.MaxPromptTokens < 0 {
				bad(fmt.Sprintf("%s.tiers[%d].max_prompt_tokens", f, j), "must not be negative")
			}
			rg.Tiers = append(rg.Tiers, route.Tier{MaxPromptTokens: t.MaxPromptTokens, Members: t.Members})
		}
		s.Groups = append(s.Groups, rg)
	}

	// tenants
	tenantNames := map[string]bool{}
	keyOwner := map[[sha256.Size]byte]string{}
	known := regions.Jurisdictions()
	for i, t := range c.Tenants {
		f := fmt.Sprintf("tenants[%d]", i)
		switch {
		case t.Name == "":
			bad(f+".name", "is required")
		case !nodeNamePattern.MatchString(t.Name):
			bad(f+".name", "%q must be 1-64 letters, digits, '.', '_' or '-'", t.Name)
		case tenantNames[t.Name]:
			bad(f+".name", "%q is used by another tenant", t.Name)
		}
		tenantNames[t.Name] = true
		tt := Tenant{Name: t.Name}
		if len(t.KeySHA256) == 0 {
			bad(f+".key_sha256", "at least one key hash is required")
		}
		for j, h := range t.KeySHA256 {
			kf := fmt.Sprintf("%s.key_sha256[%d]", f, j)
			if !sha256Pattern.MatchString(h) {
				bad(kf, "must be 64 hex digits (the SHA-256 of the key, e.g. from `printf %%s KEY | sha256sum`)")
				continue
			}
			var sum [sha256.Size]byte
			_, _ = hex.Decode(sum[:], []byte(strings.ToLower(h)))
			if owner, dup := keyOwner[sum]; dup {
				bad(kf, "the same key is already given to tenant %q", owner)
			}
			keyOwner[sum] = t.Name
			tt.Keys = append(tt.Keys, sum)
		}
		if t.Residency != "" {
			if !slices.Contains(known, region.Jurisdiction(t.Residency)) {
				bad(f+".residency", "%q is not the jurisdiction of any region", t.Residency)
			}
			tt.Residency = region.Residency{Jurisdiction: region.Jurisdiction(t.Residency)}
		}
		if t.StrictTransit && t.Residency == "" {
			bad(f+".strict_transit", "needs a residency: it keeps requests on nodes of the residency's jurisdiction")
		}
		tt.StrictTransit = t.StrictTransit
		tt.Budget = t.Budget
		switch t.Priority {
		case "", "interactive":
			tt.Priority = route.PriorityInteractive
		case "batch":
			tt.Priority = route.PriorityBatch
		default:
			bad(f+".priority", "%q must be interactive or batch", t.Priority)
		}
		if b := t.Budget; b != nil {
			if b.USD <= 0 {
				bad(f+".budget.usd", "must be positive")
			}
			switch b.Period {
			case "day", "month", "total":
			case "":
				bad(f+".budget.period", "is required (day, month or total)")
			default:
				bad(f+".budget.period", "%q must be day, month or total", b.Period)
			}
		}
		s.Tenants = append(s.Tenants, tt)
	}

	// limits, timeouts, outlier detection
	if c.Limits.MaxBodyBytes < 0 {
		bad("limits.max_body_bytes", "must not be negative")
	} else if c.Limits.MaxBodyBytes > 0 {
		s.MaxBodyBytes = c.Limits.MaxBodyBytes
	}
	if c.Limits.MaxResponseBytes < 0 {
		bad("limits.max_response_bytes", "must not be negative")
	} else if c.Limits.MaxResponseBytes > 0 {
		s.Executor.MaxResponseBytes = c.Limits.MaxResponseBytes
	}
	if c.Limits.MaxEventBytes < 0 {
		bad("limits.max_event_bytes", "must not be negative")
	} else if c.Limits.MaxEventBytes > 0 {
		s.Executor.MaxEventBytes = c.Limits.MaxEventBytes
	}
	for _, l := range []struct {
		field string
		v     int
		dst   *int
	}{
		{"limits.max_header_bytes", c.Limits.MaxHeaderBytes, &s.MaxHeaderBytes},
		{"limits.max_messages", c.Limits.MaxMessages, &s.MaxMessages},
		{"limits.max_concurrent_per_tenant", c.Limits.MaxConcurrentPerTenant, &s.MaxInFlight},
		{"limits.admission_queue", c.Limits.AdmissionQueue, &s.AdmissionQueue},
	} {
		if l.v < 0 {
			bad(l.field, "must not be negative")
		} else if l.v > 0 {
			*l.dst = l.v
		}
	}
	switch w := time.Duration(c.Limits.AdmissionWait); {
	case w < 0:
		bad("limits.admission_wait", "must not be negative")
	case w > time.Minute:
		bad("limits.admission_wait", "%s is longer than a client should wait to be admitted; at most 1m", w)
	case w > 0:
		s.AdmissionWait = w
	}
	if c.Limits.MaxStreamDuration < 0 {
		bad("limits.max_stream_duration", "must not be negative")
	} else if c.Limits.MaxStreamDuration > 0 {
		s.Executor.MaxStreamDuration = time.Duration(c.Limits.MaxStreamDuration)
	}
	if c.Limits.MaxAttempts < 0 {
		bad("limits.max_attempts", "must not be negative")
	} else if c.Limits.MaxAttempts > 0 {
		s.Executor.MaxAttempts = c.Limits.MaxAttempts
	}
	override := func(dst *time.Duration, d Duration) {
		if d > 0 {
			*dst = time.Duration(d)
		}
	}
	t := c.Timeouts
	override(&s.Executor.ConnectTimeout, t.Connect)
	override(&s.Executor.FirstByteTimeout, t.FirstByte)
	override(&s.Executor.ResponseTimeout, t.Response)
	override(&s.Executor.StreamIdleTimeout, t.StreamIdle)
	override(&s.ReadHeader, t.ReadHeader)
	override(&s.ReadBody, t.ReadBody)
	override(&s.ClientWrite, t.ClientWrite)
	if c.Node.Drain.Grace < 0 {
		bad("node.drain.grace", "must not be negative")
	} else if c.Node.Drain.Grace > 0 {
		s.DrainGrace = time.Duration(c.Node.Drain.Grace)
	}
	override(&s.DrainTimeout, c.Node.Drain.Timeout)
	if s.DrainTimeout <= s.DrainGrace {
		bad("node.drain.timeout", "must be longer than node.drain.grace (%s)", s.DrainGrace)
	}
	o := c.Outlier
	if o.ConsecutiveFailures < 0 {
		bad("outlier.consecutive_failures", "must not be negative")
	} else if o.ConsecutiveFailures > 0 {
		s.Health.EjectAfter = o.ConsecutiveFailures
	}
	override(&s.Health.BaseEjection, o.BaseEjection)
	override(&s.Health.MaxEjection, o.MaxEjection)
	if s.Health.MaxEjection < s.Health.BaseEjection {
		bad("outlier.max_ejection", "must not be shorter than outlier.base_ejection")
	}
	s.Ledger = n.Voter || s.Gossip != nil
	for i, t := range c.Tenants {
		if t.Budget != nil && !s.Ledger {
			bad(fmt.Sprintf("tenants[%d].budget", i), "needs the Raft ledger: make this node a voter (node.voter) or let it find voters (node.gossip)")
		}
	}
	if s.Gossip != nil && len(s.Gossip.Key) > 0 {
		mac := hmac.New(sha256.New, s.Gossip.Key)
		mac.Write([]byte("llmesh rpc v1"))
		s.RPCToken = base64.RawStdEncoding.EncodeToString(mac.Sum(nil))
	}
	s.ProbeIdle = 30 * time.Second
	override(&s.ProbeIdle, c.Probes.Idle)
	if c.Probes.Disabled {
		s.ProbeIdle = 0
	}
	s.Tracing = resolveTracing(&c.Tracing, getenv, bad)
	if !c.Audit.Disabled {
		s.AuditDir, s.AuditMaxBytes = c.Audit.Dir, 64<<20
		if s.AuditDir == "" {
			s.AuditDir = filepath.Join(n.DataDir, "audit")
		}
		switch {
		case c.Audit.MaxFileMB < 0:
			bad("audit.max_file_mb", "must not be negative")
		case c.Audit.MaxFileMB > 0:
			s.AuditMaxBytes = int64(c.Audit.MaxFileMB) << 20
		}
	} else if c.Audit.Dir != "" {
		bad("audit.dir", "is set but audit.disabled is true: remove one")
	}
	s.Executor.NodeName = s.Name
	if s.Gossip == nil && (len(n.Join) > 0 || n.GossipKeyEnv != "" || n.GossipKeyFile != "" || n.Cluster != "") {
		bad("node.gossip", "is required with node.join, node.gossip_key_env, node.gossip_key_file or node.cluster")
	}
	if len(problems) > 0 {
		return nil, errors.Join(problems...)
	}
	return s, nil
}

// resolveTracing reads the tracing section; nil when it sets no
// endpoint.
func resolveTracing(t *TracingSection, getenv func(string) string, bad func(field, format string, args ...any)) *Tracing {
	if t.OTLPEndpoint == "" {
		if t.HeadersEnv != "" || t.SampleRatio != nil || t.ServiceName != "" {
			bad("tracing.otlp_endpoint", "is required with the other tracing keys")
		}
		return nil
	}
	tc := &Tracing{Endpoint: t.OTLPEndpoint, Ratio: 1, Service: "llmesh", Headers: map[string]route.Secret{}}
	if u, err := url.Parse(t.OTLPEndpoint); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		bad("tracing.otlp_endpoint", "%q must be an http:// or https:// URL such as http://127.0.0.1:4318/v1/traces", t.OTLPEndpoint)
	} else if u.User != nil {
		bad("tracing.otlp_endpoint", "credentials belong in tracing.headers_env, not in the URL")
	} else if u.Path == "" || u.Path == "/" {
		tc.Endpoint = strings.TrimSuffix(t.OTLPEndpoint, "/") + "/v1/traces"
	}
	if t.SampleRatio != nil {
		if r := *t.SampleRatio; r < 0 || r > 1 || math.IsNaN(r) {
			bad("tracing.sample_ratio", "must be between 0 and 1")
		} else {
			tc.Ratio = r
		}
	}
	if t.ServiceName != "" {
		tc.Service = t.ServiceName
	}
	if t.HeadersEnv != "" {
		if !envNamePattern.MatchString(t.HeadersEnv) {
			bad("tracing.headers_env", "%q is not an environment variable name", t.HeadersEnv)
			return tc
		}
		v := getenv(t.HeadersEnv)
		if v == "" {
			bad("tracing.headers_env", "environment variable %s is empty or unset", t.HeadersEnv)
			return tc
		}
		for pair := range strings.SplitSeq(v, ",") {
			k, val, ok := strings.Cut(strings.TrimSpace(pair), "=")
			if k = strings.TrimSpace(k); !ok || k == "" || strings.ContainsAny(k, " \t\r\n:") {
				// The value is a secret: the message names the variable only.
				bad("tracing.headers_env", "environment variable %s must hold key=value pairs separated by commas", t.HeadersEnv)
				break
			}
			tc.Headers[http.CanonicalHeaderKey(k)] = route.Secret(strings.TrimSpace(val))
		}
	}
	return tc
}

// resolveGossip reads the gossip address, seeds, key and label; nil when
// node.gossip is not set.
func resolveGossip(n *NodeSection, getenv func(string) string, readFile func(string) ([]byte, error), bad func(field, format string, args ...any)) *Gossip {
	if n.Gossip == "" {
		return nil
	}
	g := &Gossip{Seeds: n.Join, Label: n.Cluster}
	host, port, err := net.SplitHostPort(n.Gossip)
	if err != nil {
		return nil // reported by the address check
	}
	g.BindAddr = host
	if g.BindAddr == "" {
		g.BindAddr = "0.0.0.0"
	}
	if net.ParseIP(g.BindAddr) == nil {
		bad("node.gossip", "%q must be an IP address and port", n.Gossip)
	}
	if g.BindPort, err = strconv.Atoi(port); err != nil || g.BindPort < 0 || g.BindPort > 65535 {
		bad("node.gossip", "%q has no valid port", n.Gossip)
	}
	if n.Cluster != "" && !nodeNamePattern.MatchString(n.Cluster) {
		bad("node.cluster", "%q must be 1-64 letters, digits, '.', '_' or '-'", n.Cluster)
	}
	var raw, field string
	switch {
	case n.GossipKeyEnv != "" && n.GossipKeyFile != "":
		bad("node.gossip_key_file", "give node.gossip_key_env or node.gossip_key_file, not both")
		return g
	case n.GossipKeyEnv != "":
		field = "node.gossip_key_env"
		if !envNamePattern.MatchString(n.GossipKeyEnv) {
			bad(field, "%q is not an environment variable name", n.GossipKeyEnv)
			return g
		}
		if raw = getenv(n.GossipKeyEnv); raw == "" {
			bad(field, "environment variable %s is empty or unset", n.GossipKeyEnv)
			return g
		}
	case n.GossipKeyFile != "":
		field = "node.gossip_key_file"
		b, err := readFile(n.GossipKeyFile)
		if err != nil {
			bad(field, "cannot read the key: %v", errors.Unwrap(err))
			return g
		}
		raw = string(b)
	default:
		return g
	}
	key, err := base64.StdEncoding.DecodeString(strings.TrimSpace(raw))
	switch {
	case err != nil:
		bad(field, "the key is not base64 (make one with `llmesh keygen`)")
	case len(key) != 32:
		bad(field, "the key must be 32 bytes once decoded, not %d (make one with `llmesh keygen`)", len(key))
	default:
		g.Key = key
	}
	return g
}
