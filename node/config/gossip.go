package config

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"

	"github.com/llmesh/llmesh/gossip"
	"github.com/llmesh/llmesh/route"
)

// resolveGossip is the membership's configuration: its address, seeds,
// cluster label and key, and the metadata the node announces. It leaves
// s.Gossip nil when node.gossip is not set.
func resolveGossip(c *File, env Env, s *Runtime, p *problems) {
	n := &c.Node
	if n.Gossip == "" {
		return
	}
	host, port, err := net.SplitHostPort(n.Gossip)
	if err != nil {
		return // reported by the address check
	}
	g := gossip.DefaultConfig(n.Name)
	g.Seeds, g.Label, g.AdvertiseAddr = n.Join, n.Cluster, s.Advertise
	g.Meta = gossip.Meta{Region: s.Region, Jurisdiction: s.Jurisdiction, Voter: s.Voter, RPC: s.RPCAddr, APIs: route.ServedAPIs}
	if g.BindAddr = host; g.BindAddr == "" {
		g.BindAddr = "0.0.0.0"
	}
	if net.ParseIP(g.BindAddr) == nil {
		p.bad("node.gossip", "%q must be an IP address and port", n.Gossip)
	}
	if g.BindPort, err = strconv.Atoi(port); err != nil || g.BindPort < 0 || g.BindPort > 65535 {
		p.bad("node.gossip", "%q has no valid port", n.Gossip)
	}
	if n.Cluster != "" && !nodeNamePattern.MatchString(n.Cluster) {
		p.bad("node.cluster", "%q must be 1-64 letters, digits, '.', '_' or '-'", n.Cluster)
	}
	g.SecretKey = gossipKey(n, env, p)
	s.Gossip = &g
}

// gossipKey reads the gossip key from the environment variable or the
// file the node section names; nil when it names neither or the key is
// not valid (reported).
func gossipKey(n *NodeSection, env Env, p *problems) []byte {
	var raw, field string
	switch {
	case n.GossipKeyEnv != "" && n.GossipKeyFile != "":
		p.bad("node.gossip_key_file", "give node.gossip_key_env or node.gossip_key_file, not both")
		return nil
	case n.GossipKeyEnv != "":
		field = "node.gossip_key_env"
		if !envNamePattern.MatchString(n.GossipKeyEnv) {
			p.bad(field, "%q is not an environment variable name", n.GossipKeyEnv)
			return nil
		}
		if raw = env.Getenv(n.GossipKeyEnv); raw == "" {
			p.bad(field, "environment variable %s is empty or unset", n.GossipKeyEnv)
			return nil
		}
	case n.GossipKeyFile != "":
		field = "node.gossip_key_file"
		b, err := env.ReadFile(n.GossipKeyFile)
		if err != nil {
			p.bad(field, "cannot read the key: %v", errors.Unwrap(err))
			return nil
		}
		raw = string(b)
	default:
		return nil
	}
	key, err := base64.StdEncoding.DecodeString(strings.TrimSpace(raw))
	switch {
	case err != nil:
		p.bad(field, "the key is not base64 (make one with `llmesh keygen`)")
	case len(key) != 32:
		p.bad(field, "the key must be 32 bytes once decoded, not %d (make one with `llmesh keygen`)", len(key))
	default:
		return key
	}
	return nil
}

// resolveLedger decides whether the node spends from the Raft ledger (a
// voter, or a node that can find voters by gossip), refuses budgets
// without one, and derives the token between nodes from the gossip key.
func resolveLedger(c *File, _ Env, s *Runtime, p *problems) {
	s.Ledger = c.Node.Voter || s.Gossip != nil
	for i, t := range c.Tenants {
		if t.Budget != nil && !s.Ledger {
			p.bad(fmt.Sprintf("tenants[%d].budget", i), "needs the Raft ledger: make this node a voter (node.voter) or let it find voters (node.gossip)")
		}
		for j, k := range t.Keys {
			if k.Budget != nil && !s.Ledger {
				p.bad(fmt.Sprintf("tenants[%d].keys[%d].budget", i, j), "needs the Raft ledger: make this node a voter (node.voter) or let it find voters (node.gossip)")
			}
		}
	}
	if s.Gossip != nil && len(s.Gossip.SecretKey) > 0 {
		mac := hmac.New(sha256.New, s.Gossip.SecretKey)
		mac.Write([]byte("llmesh rpc v1"))
		s.RPCToken = base64.RawStdEncoding.EncodeToString(mac.Sum(nil))
	}
}

// checkGossipKeys refuses gossip settings without node.gossip.
func checkGossipKeys(c *File, _ Env, s *Runtime, p *problems) {
	n := &c.Node
	if s.Gossip == nil && (len(n.Join) > 0 || n.GossipKeyEnv != "" || n.GossipKeyFile != "" || n.Cluster != "") {
		p.bad("node.gossip", "is required with node.join, node.gossip_key_env, node.gossip_key_file or node.cluster")
	}
}
