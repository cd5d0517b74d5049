package config

import (
	"io/fs"
	"strings"
	"testing"
)

const validConfig = `
node:
  name: eu-1
  region: eu-west
  data_dir: /var/lib/llmesh
  http: 127.0.0.1:0
  rpc: 0.0.0.0:7070
  gossip: 0.0.0.0:7946
  raft: 0.0.0.0:7947
  advertise: 10.0.0.5
  voter: true
  bootstrap_expect: 3
  join: ["10.0.0.6:7946"]
  admin_token_env: LLMESH_ADMIN_TOKEN
regions:
  - {name: eu-west, jurisdiction: eu}
  - {name: us-east, jurisdiction: us}
providers:
  - name: gpu-eu
    kind: openai
    region: eu-west
    reach: region
    jurisdictions: [eu]
    base_url: http://10.0.1.10:8000
    replicas: [http://10.0.1.10:8000, http://10.0.1.11:8000]
    api_key_env: GPU_EU_KEY
    priority: 0
    limits: {rpm: 600, tpm: 1000000}
    models:
      - {name: llama-3-8b, upstream: meta-llama/Meta-Llama-3-8B-Instruct, input_usd_per_mtok: 0.05, output_usd_per_mtok: 0.10}
  - name: azure-eu
    kind: azure
    region: eu-west
    base_url: https://example.openai.azure.com
    api_version: "2024-10-21"
    api_key_env: AZURE_KEY
    models:
      - {name: gpt-4o, deployment: gpt4o-prod, input_usd_per_mtok: 2.5, output_usd_per_mtok: 10}
tenants:
  - name: acme
    key_sha256: [ "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08" ]
    residency: eu
    budget: {usd: 500, period: month}
timeouts:
  stream_idle: 90s
`

var testEnv = map[string]string{"LLMESH_ADMIN_TOKEN": "admin", "GPU_EU_KEY": "gpu-secret", "AZURE_KEY": "az-secret"}

func getenv(k string) string { return testEnv[k] }

func testEnvOf() Env { return Env{Getenv: getenv, ReadFile: readFile} }

func readFile(name string) ([]byte, error) {
	if b, ok := testFiles[name]; ok {
		return []byte(b), nil
	}
	return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
}

var testFiles = map[string]string{"/etc/llmesh/gossip.key": "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=\n"}

func TestContractConfigIsAccepted(t *testing.T) {
	c, err := Parse([]byte(validConfig))
	if err != nil {
		t.Fatal(err)
	}
	s, err := Resolve(c, testEnvOf())
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Providers) != 2 || s.Providers[0].APIKey.Reveal() != "gpu-secret" || s.Providers[1].Jurisdictions.String() != "eu" {
		t.Fatalf("providers: %+v", s.Providers)
	}
	if s.Executor.StreamIdleTimeout.String() != "1m30s" || s.Tenants[0].Residency.String() != "eu" {
		t.Fatalf("settings: %+v", s)
	}
}

// cached_input_usd_per_mtok, as the contract writes it, prices cached
// prompt tokens; 0 is a free cache, and a model without the key is
// charged its input price for them.
func TestCachedInputPrice(t *testing.T) {
	for _, tc := range []struct {
		key  string
		want float64
	}{{", cached_input_usd_per_mtok: 0.01", 0.01}, {", cached_input_usd_per_mtok: 0", 0}, {"", 0.05}} {
		doc := strings.Replace(validConfig, "output_usd_per_mtok: 0.10}", "output_usd_per_mtok: 0.10"+tc.key+"}", 1)
		c, err := Parse([]byte(doc))
		if err != nil {
			t.Fatal(err)
		}
		s, err := Resolve(c, testEnvOf())
		if err != nil {
			t.Fatal(err)
		}
		m := s.Providers[0].Models[0]
		if got := m.CachedInputPrice(); got != tc.want || (tc.key == "") != (m.CachedInputUSDPerMTok == nil) {
			t.Errorf("%q: cached price %g (%v), want %g", tc.key, got, m.CachedInputUSDPerMTok, tc.want)
		}
	}
}

// A replica is its URL, or a mapping with its name and max_concurrent,
// read as strictly as the rest.
func TestReplicasAsURLsOrMappings(t *testing.T) {
	doc := strings.Replace(validConfig, "replicas: [http://10.0.1.10:8000, http://10.0.1.11:8000]",
		"replica_policy: round_robin\n    replicas:\n      - http://10.0.1.10:8000\n      - {url: http://10.0.1.11:8000, name: a100-1, max_concurrent: 16}", 1)
	c, err := Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	s, err := Resolve(c, testEnvOf())
	if err != nil {
		t.Fatal(err)
	}
	p := s.Providers[0]
	if p.ReplicaPolicy != "round_robin" || len(p.Replicas) != 2 || p.Replicas[1] != "http://10.0.1.11:8000" ||
		p.ReplicaNames[1] != "a100-1" || p.ReplicaCapacity[0] != 0 || p.ReplicaCapacity[1] != 16 {
		t.Fatalf("replicas: %+v", p)
	}
	for _, tc := range []struct{ replica, want string }{
		{"{url: http://10.0.1.11:8000, max_conc: 4}", "providers[0].replicas[1].max_conc: unknown field (line 27)"},
		{"[http://10.0.1.11:8000]", "providers[0].replicas[1]: a seq is not a valid ReplicaSection (line 27)"},
		{"{url: http://10.0.1.11:8000, max_concurrent: many}", `providers[0].replicas[1].max_concurrent: "many" is not a valid int (line 27)`},
	} {
		doc := strings.Replace(validConfig, "replicas: [http://10.0.1.10:8000, http://10.0.1.11:8000]",
			"replicas:\n      - http://10.0.1.10:8000\n      - "+tc.replica, 1)
		if _, err := Parse([]byte(doc)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want %q", tc.replica, err, tc.want)
		}
	}
}

func TestConfigErrorsNameTheField(t *testing.T) {
	for _, tc := range []struct{ name, edit, want string }{
		{"unknown top-level key", "colour: blue\n", "colour: unknown field (line 46)"},
		{"unknown node key", strings.Replace(validConfig, "  voter: true", "  voter: true\n  votre: true", 1), "node.votre: unknown field (line 12)"},
		{"unknown model key", strings.Replace(validConfig, "output_usd_per_mtok: 0.10}", "output_usd_per_mtok: 0.10, price: 3}", 1), "providers[0].models[0].price: unknown field"},
		{"wrong type", strings.Replace(validConfig, "priority: 0", "priority: high", 1), `providers[0].priority: "high" is not a valid int (line 27)`},
		{"wrong type in list", strings.Replace(validConfig, `join: ["10.0.0.6:7946"]`, `join: [{a: b}]`, 1), "node.join[0]: a map is not a valid string (line 13)"},
		{"bad duration", strings.Replace(validConfig, "stream_idle: 90s", "stream_idle: soon", 1), `"soon" is not a duration`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			doc := tc.edit
			if !strings.Contains(doc, "node:") {
				doc = validConfig + doc
			}
			_, err := Parse([]byte(doc))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}

	for _, tc := range []struct{ name, from, to, want string }{
		{"no name", "name: eu-1", "name: ''", "node.name: is required"},
		{"unknown region", "region: eu-west\n  data_dir", "region: mars\n  data_dir", `node.region: "mars" is not one of regions[].name`},
		{"bad http", "http: 127.0.0.1:0", "http: localhost", `node.http: "localhost" is not a host:port`},
		{"kind", "kind: azure", "kind: bedrock", `providers[1].kind: "bedrock" must be openai, azure, anthropic, vllm, sglang or tgi`},
		{"reach", "reach: region", "reach: galaxy", `providers[0].reach: "galaxy"`},
		{"base url", "base_url: https://example.openai.azure.com", "base_url: example.com", `providers[1].base_url: "example.com" is not an absolute http(s) URL`},
		{"url with key", "base_url: https://example.openai.azure.com", "base_url: https://user:pw@example.com", "providers[1].base_url: credentials belong in api_key_env"},
		{"azure version", `api_version: "2024-10-21"`, "", "providers[1].api_version: is required for an azure provider"},
		{"azure deployment", "deployment: gpt4o-prod, ", "", "providers[1].models[0].deployment: is required"},
		{"negative price", "input_usd_per_mtok: 0.05", "input_usd_per_mtok: -1", "providers[0].models[0].input_usd_per_mtok: must not be negative"},
		{"negative cached price", "input_usd_per_mtok: 0.05", "input_usd_per_mtok: 0.05, cached_input_usd_per_mtok: -0.01", "providers[0].models[0].cached_input_usd_per_mtok: must not be negative"},
		{"bad hash", "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08", "secret-key", "tenants[0].key_sha256[0]: must be 64 hex digits"},
		{"residency", "residency: eu", "residency: mars", `tenants[0].residency: "mars" is not the jurisdiction of any region`},
		{"strict transit", "residency: eu", "strict_transit: true", "tenants[0].strict_transit: needs a residency"},
		{"tls files", "admin_token_env: LLMESH_ADMIN_TOKEN", "admin_token_env: LLMESH_ADMIN_TOKEN\n  tls: {ca_file: /nope/ca.pem, cert_file: a, key_file: b}", "node.tls: ca_file: "},
		{"tls half", "admin_token_env: LLMESH_ADMIN_TOKEN", "admin_token_env: LLMESH_ADMIN_TOKEN\n  tls: {ca_file: /etc/llmesh/gossip.key}", "node.tls: "},
		{"period", "period: month", "period: week", `tenants[0].budget.period: "week"`},
		{"bootstrap non-voter", "voter: true", "voter: false", "node.bootstrap_expect: is for voters"},
		{"env unset", "api_key_env: GPU_EU_KEY", "api_key_env: NOPE_KEY", "providers[0].api_key_env: environment variable NOPE_KEY is empty or unset"},
		{"env name", "api_key_env: GPU_EU_KEY", "api_key_env: sk-abc123", `providers[0].api_key_env: "sk-abc123" is not an environment variable name`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			doc := strings.Replace(validConfig, tc.from, tc.to, 1)
			if doc == validConfig {
				t.Fatalf("edit %q did not apply", tc.from)
			}
			c, err := Parse([]byte(doc))
			if err == nil {
				_, err = Resolve(c, testEnvOf())
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "gpu-secret") || strings.Contains(err.Error(), "az-secret") {
				t.Fatalf("error leaks a secret: %v", err)
			}
		})
	}
}

func TestConfigRejectsEmptyAndMultiDocument(t *testing.T) {
	if _, err := Parse(nil); err == nil || !strings.Contains(err.Error(), "empty") {
		t.Fatalf("empty: %v", err)
	}
	if _, err := Parse([]byte(validConfig + "\n---\nnode: {}\n")); err == nil || !strings.Contains(err.Error(), "more than one") {
		t.Fatalf("two documents: %v", err)
	}
}

func TestGossipSettings(t *testing.T) {
	withNode := func(extra string) string {
		return strings.Replace(validConfig, "  admin_token_env: LLMESH_ADMIN_TOKEN", "  admin_token_env: LLMESH_ADMIN_TOKEN\n"+extra, 1)
	}
	c, _ := Parse([]byte(withNode("  gossip_key_file: /etc/llmesh/gossip.key\n  cluster: prod")))
	s, err := Resolve(c, testEnvOf())
	if err != nil {
		t.Fatal(err)
	}
	g := s.Gossip
	if g == nil || g.BindAddr != "0.0.0.0" || g.BindPort != 7946 || len(g.SecretKey) != 32 || g.Label != "prod" || len(g.Seeds) != 1 {
		t.Fatalf("gossip settings %+v", g)
	}
	for _, tc := range []struct{ extra, env, want string }{
		{"  gossip_key_env: K\n  gossip_key_file: /etc/llmesh/gossip.key", "", "give node.gossip_key_env or node.gossip_key_file, not both"},
		{"  gossip_key_env: K", "not base64!", "node.gossip_key_env: the key is not base64"},
		{"  gossip_key_env: K", "c2hvcnQ=", "node.gossip_key_env: the key must be 32 bytes once decoded, not 5"},
		{"  gossip_key_file: /nope", "", "node.gossip_key_file: cannot read the key"},
		{"  cluster: 'two words'", "", `node.cluster: "two words"`},
	} {
		testEnv["K"] = tc.env
		c, err := Parse([]byte(withNode(tc.extra)))
		if err == nil {
			_, err = Resolve(c, testEnvOf())
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: got %v, want %q", tc.extra, err, tc.want)
		}
		if tc.env != "" && err != nil && strings.Contains(err.Error(), tc.env) {
			t.Errorf("the key appears in the error: %v", err)
		}
	}
	delete(testEnv, "K")
	// Gossip settings without node.gossip make no sense.
	c, _ = Parse([]byte(strings.Replace(validConfig, "  gossip: 0.0.0.0:7946\n", "", 1)))
	if _, err := Resolve(c, testEnvOf()); err == nil || !strings.Contains(err.Error(), "node.gossip: is required with node.join") {
		t.Fatalf("join without gossip: %v", err)
	}
}

// The agent refuses to open its admin API beyond loopback without a
// token; on loopback, or with a token, it starts.
func TestAdminTokenRequiredBeyondLoopback(t *testing.T) {
	noToken := strings.Replace(validConfig, "  admin_token_env: LLMESH_ADMIN_TOKEN\n", "", 1)
	for _, tc := range []struct {
		doc, http, want string
	}{
		{noToken, "0.0.0.0:8080", "node.admin_token_env: is required when node.http (0.0.0.0:8080) is not a loopback address"},
		{noToken, ":8080", "node.admin_token_env: is required when node.http (:8080)"},
		{noToken, "10.0.0.5:8080", "node.admin_token_env: is required"},
		{noToken, "127.0.0.1:8080", ""},
		{noToken, "[::1]:8080", ""},
		{noToken, "localhost:8080", ""},
		{validConfig, "0.0.0.0:8080", ""},
	} {
		c, err := Parse([]byte(strings.Replace(tc.doc, "http: 127.0.0.1:0", "http: \""+tc.http+"\"", 1)))
		if err == nil {
			_, err = Resolve(c, testEnvOf())
		}
		if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("http %s, token %v: got %v, want %q", tc.http, tc.doc == validConfig, err, tc.want)
		}
	}
}

// FuzzParseConfig: whatever the file holds, parsing and resolving it
// never panics, and no error quotes a secret the environment holds.
func FuzzParseConfig(f *testing.F) {
	f.Add([]byte(validConfig))
	f.Add([]byte(validConfig + "tracing:\n  otlp_endpoint: http://127.0.0.1:4318\n  headers_env: GPU_EU_KEY\n"))
	f.Add([]byte(strings.Replace(validConfig, "residency: eu", "residency: [eu, us]", 1)))
	f.Add([]byte("node: {name: a}\nlimits: {max_messages: -1, max_stream_duration: 1h}\naudit: {dir: x, disabled: true}\n"))
	f.Fuzz(func(t *testing.T, doc []byte) {
		c, err := Parse(doc)
		if err == nil {
			_, err = Resolve(c, testEnvOf())
		}
		for _, secret := range []string{"gpu-secret", "az-secret"} {
			if err != nil && strings.Contains(err.Error(), secret) && !strings.Contains(string(doc), secret) {
				t.Fatalf("an error quotes the secret %q: %v", secret, err)
			}
		}
	})
}
