package config

import (
	"strings"
	"testing"
	"time"

	"github.com/llmesh/llmesh/consensus"
	"github.com/llmesh/llmesh/node/pki"
	"github.com/llmesh/llmesh/region"
)

func TestResolveNode(t *testing.T) {
	testSection(t, resolveNode, nil, []sectionCase{
		{name: "defaults", want: func(s *Runtime) { s.HTTPAddr = DefaultHTTPAddr }},
		{name: "token", edit: func(f *File) { f.Node.HTTP, f.Node.AdminTokenEnv = "0.0.0.0:8080", "ADMIN" },
			want: func(s *Runtime) { s.HTTPAddr, s.AdminToken = "0.0.0.0:8080", "admin-secret" }},
		{name: "no name", edit: func(f *File) { f.Node.Name = "" }, err: "node.name: is required"},
		{name: "bad name", edit: func(f *File) { f.Node.Name = "eu 1" },
			err: `node.name: "eu 1" must be 1-64 letters, digits, '.', '_' or '-'`},
		{name: "no data dir", edit: func(f *File) { f.Node.DataDir = "" }, err: "node.data_dir: is required"},
		{name: "addresses", edit: func(f *File) {
			f.Node.HTTP, f.Node.RPC, f.Node.Gossip, f.Node.Raft, f.Node.Join = "localhost", "x", "127.0.0.1", "[::1]", []string{"a:1", "b"}
		}, err: strings.Join([]string{
			`node.http: "localhost" is not a host:port address`, `node.rpc: "x" is not a host:port address`,
			`node.gossip: "127.0.0.1" is not a host:port address`, `node.raft: "[::1]" is not a host:port address`,
			`node.join[1]: "b" is not a host:port address`}, "\n")},
		{name: "bootstrap", edit: func(f *File) { f.Node.BootstrapExpect = -1 }, err: "node.bootstrap_expect: must not be negative"},
		{name: "bootstrap non-voter", edit: func(f *File) { f.Node.BootstrapExpect = 3 },
			err: "node.bootstrap_expect: is for voters; set node.voter: true or remove it"},
		{name: "token env name", edit: func(f *File) { f.Node.AdminTokenEnv = "sk-1" },
			err: "node.admin_token_env: \"sk-1\" is not an environment variable name\nnode.admin_token_env: environment variable sk-1 is empty or unset"},
		{name: "token unset", edit: func(f *File) { f.Node.AdminTokenEnv = "NOPE" },
			err: "node.admin_token_env: environment variable NOPE is empty or unset"},
		{name: "open admin", edit: func(f *File) { f.Node.HTTP = ":8080" },
			err: "node.admin_token_env: is required when node.http (:8080) is not a loopback address: the admin API (drain, budgets, tenant keys) would be open to whoever reaches the port"},
	})
}

func TestResolveRegions(t *testing.T) {
	testSection(t, resolveRegions, nil, []sectionCase{
		{name: "valid", want: func(s *Runtime) {
			s.Regions, _ = region.NewMap([]region.Region{{Name: "eu-west", Jurisdiction: "eu"}, {Name: "us-east", Jurisdiction: "us"}})
			s.Jurisdiction = "eu"
		}},
		{name: "none", edit: func(f *File) { f.Regions = nil }, err: "regions: at least one region is required"},
		{name: "no region", edit: func(f *File) { f.Node.Region = "" }, err: "node.region: is required"},
		{name: "unknown region", edit: func(f *File) { f.Node.Region = "mars" }, err: `node.region: "mars" is not one of regions[].name`},
	})
}

func TestResolvePeers(t *testing.T) {
	voter := func(f *File) { f.Node.Voter, f.Node.Raft, f.Node.RPC = true, "127.0.0.1:7947", "127.0.0.1:7070" }
	testSection(t, resolvePeers, nil, []sectionCase{
		{name: "voter", edit: voter, want: func(s *Runtime) { s.Voter, s.RPCAddr = true, "127.0.0.1:7070" }},
		{name: "auto", edit: func(f *File) { f.Node.Advertise = "auto" }, want: func(s *Runtime) { s.Advertise = "10.1.2.3" }},
		{name: "voter without raft", edit: func(f *File) { f.Node.Voter = true },
			err: "node.raft: is required for a voter\nnode.rpc: is required for a voter: other nodes reach the ledger through it"},
		{name: "raft on every address", edit: func(f *File) { voter(f); f.Node.Raft = "0.0.0.0:7947" },
			err: "node.advertise: is required when node.raft binds every address (0.0.0.0:7947): peers need an address to dial"},
		{name: "bad advertise", edit: func(f *File) { f.Node.Advertise = "host.example" },
			err: `node.advertise: "host.example" is not an IP address (or auto)`},
	})
}

func TestResolveTLS(t *testing.T) {
	now := time.Now()
	ca, err := pki.NewCA(now)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := pki.NewNodeCert(ca, "eu-1", nil, now)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{"ca.pem": ca.Cert, "node.pem": cert.Cert, "node-key.pem": cert.Key}
	run := func(sec *TLSSection) (*Runtime, error) {
		f := baseFile()
		f.Node.TLS = sec
		env := sectionEnv()
		read := env.ReadFile
		env.ReadFile = func(name string) ([]byte, error) {
			if b, ok := files[name]; ok {
				return b, nil
			}
			return read(name)
		}
		return runSections(f, env, resolveTLS)
	}
	s, err := run(&TLSSection{CAFile: "ca.pem", CertFile: "node.pem", KeyFile: "node-key.pem"})
	if err != nil || s.TLS == nil || s.TLS.Client.ServerName != pki.MeshServerName || len(s.TLS.Server.Certificates) != 1 {
		t.Fatalf("valid files: %v %+v", err, s.TLS)
	}
	for _, tc := range []struct {
		sec  TLSSection
		want string
	}{
		{TLSSection{CertFile: "node.pem", KeyFile: "node-key.pem"}, "node.tls: ca_file is required"},
		{TLSSection{CAFile: "ca.pem", CertFile: "node.pem"}, "node.tls: key_file is required"},
		{TLSSection{CAFile: "/nope", CertFile: "node.pem", KeyFile: "node-key.pem"}, "node.tls: ca_file: open /nope: file does not exist"},
		{TLSSection{CAFile: "node-key.pem", CertFile: "node.pem", KeyFile: "node-key.pem"}, "node.tls: ca_file node-key.pem holds no PEM certificate"},
	} {
		if s, err := run(&tc.sec); errString(err) != tc.want || s.TLS != nil {
			t.Errorf("%+v: got %v, want %q", tc.sec, err, tc.want)
		}
	}
}

func TestResolveRaft(t *testing.T) {
	voter := func(f *File) {
		f.Node.Voter, f.Node.Raft, f.Node.RPC, f.Node.BootstrapExpect = true, "0.0.0.0:7947", "0.0.0.0:7070", 3
	}
	testSection(t, resolveRaft, []section{resolvePeers}, []sectionCase{
		{name: "not a voter", want: func(*Runtime) {}},
		{name: "voter", edit: func(f *File) { voter(f); f.Node.Advertise = "10.0.0.5" }, want: func(s *Runtime) {
			s.Raft = &consensus.ServerConfig{ID: "eu-1", Bind: "0.0.0.0:7947", Advertise: "10.0.0.5:7947", DataDir: "/data", BootstrapExpect: 3}
		}},
		{name: "voter, bound address", edit: func(f *File) { voter(f); f.Node.Raft = "127.0.0.1:7947" }, want: func(s *Runtime) {
			s.Raft = &consensus.ServerConfig{ID: "eu-1", Bind: "127.0.0.1:7947", DataDir: "/data", BootstrapExpect: 3}
		}},
	})
}
