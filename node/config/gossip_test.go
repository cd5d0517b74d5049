package config

import (
	"testing"

	"github.com/llmesh/llmesh/gossip"
	"github.com/llmesh/llmesh/route"
)

func TestResolveGossip(t *testing.T) {
	withGossip := func(f *File) {
		f.Node.Gossip, f.Node.Join, f.Node.Cluster = ":7946", []string{"10.0.0.6:7946"}, "prod"
		f.Node.Advertise, f.Node.Voter, f.Node.RPC, f.Node.Raft = "10.0.0.5", true, "10.0.0.5:7070", "10.0.0.5:7947"
	}
	key := []byte("0123456789abcdef0123456789abcdef")
	want := func(key []byte) func(*Runtime) {
		return func(s *Runtime) {
			g := gossip.DefaultConfig("eu-1")
			g.BindAddr, g.BindPort, g.AdvertiseAddr = "0.0.0.0", 7946, "10.0.0.5"
			g.Seeds, g.Label, g.SecretKey = []string{"10.0.0.6:7946"}, "prod", key
			g.Meta = gossip.Meta{Region: "eu-west", Jurisdiction: "eu", Voter: true, RPC: "10.0.0.5:7070", APIs: route.ServedAPIs}
			s.Gossip = &g
		}
	}
	pre := []section{resolveRegions, resolvePeers}
	testSection(t, resolveGossip, pre, []sectionCase{
		{name: "none", want: func(*Runtime) {}},
		{name: "no key", edit: withGossip, want: want(nil)},
		{name: "key from env", edit: func(f *File) { withGossip(f); f.Node.GossipKeyEnv = "GOSSIP_KEY" }, want: want(key)},
		{name: "bad host", edit: func(f *File) { f.Node.Gossip = "gossip.example:7946" },
			err: `node.gossip: "gossip.example:7946" must be an IP address and port`},
		{name: "bad port", edit: func(f *File) { f.Node.Gossip = "127.0.0.1:http" }, err: `node.gossip: "127.0.0.1:http" has no valid port`},
		{name: "bad label", edit: func(f *File) { f.Node.Gossip, f.Node.Cluster = ":1", "a b" },
			err: `node.cluster: "a b" must be 1-64 letters, digits, '.', '_' or '-'`},
		{name: "both keys", edit: func(f *File) { f.Node.Gossip, f.Node.GossipKeyEnv, f.Node.GossipKeyFile = ":1", "GOSSIP_KEY", "/k" },
			err: "node.gossip_key_file: give node.gossip_key_env or node.gossip_key_file, not both"},
		{name: "key env name", edit: func(f *File) { f.Node.Gossip, f.Node.GossipKeyEnv = ":1", "a-b" },
			err: `node.gossip_key_env: "a-b" is not an environment variable name`},
		{name: "key env unset", edit: func(f *File) { f.Node.Gossip, f.Node.GossipKeyEnv = ":1", "NOPE" },
			err: "node.gossip_key_env: environment variable NOPE is empty or unset"},
		{name: "key not base64", edit: func(f *File) { f.Node.Gossip, f.Node.GossipKeyEnv = ":1", "ADMIN" },
			err: "node.gossip_key_env: the key is not base64 (make one with `llmesh keygen`)"},
		{name: "key file", edit: func(f *File) { f.Node.Gossip, f.Node.GossipKeyFile = ":1", "/nope" },
			err: "node.gossip_key_file: cannot read the key: file does not exist"},
	})
}

func TestResolveLedger(t *testing.T) {
	budget := func(f *File) {
		f.Tenants = []TenantSection{{Name: "a"}, {Name: "b", Budget: &BudgetSection{USD: 1, Period: "day"}}}
	}
	testSection(t, resolveLedger, []section{resolveGossip}, []sectionCase{
		{name: "alone", want: func(*Runtime) {}},
		{name: "voter", edit: func(f *File) { f.Node.Voter = true }, want: func(s *Runtime) { s.Ledger = true }},
		{name: "gossip with a key", edit: func(f *File) { f.Node.Gossip, f.Node.GossipKeyEnv = ":1", "GOSSIP_KEY" }, want: func(s *Runtime) {
			s.Ledger, s.RPCToken = true, "kIgRf6HqtcBt2h2bLhuK6AwDm6WN7EpGIqZHcTU4XYw"
		}},
		{name: "budget without ledger", edit: budget,
			err: "tenants[1].budget: needs the Raft ledger: make this node a voter (node.voter) or let it find voters (node.gossip)"},
	})
}

func TestCheckGossipKeys(t *testing.T) {
	for _, edit := range []func(*File){
		func(f *File) { f.Node.Join = []string{"a:1"} },
		func(f *File) { f.Node.GossipKeyEnv = "K" },
		func(f *File) { f.Node.GossipKeyFile = "/k" },
		func(f *File) { f.Node.Cluster = "prod" },
	} {
		f := baseFile()
		edit(f)
		_, err := runSections(f, sectionEnv(), resolveGossip, checkGossipKeys)
		if want := "node.gossip: is required with node.join, node.gossip_key_env, node.gossip_key_file or node.cluster"; errString(err) != want {
			t.Errorf("%+v: got %v", f.Node, err)
		}
	}
}
