package config

import (
	"fmt"
	"net"

	"github.com/llmesh/llmesh/consensus"
	"github.com/llmesh/llmesh/node/pki"
	"github.com/llmesh/llmesh/region"
)

// resolveNode checks the node's name, data directory, addresses and admin
// token.
func resolveNode(c *File, env Env, s *Runtime, p *problems) {
	n := &c.Node
	switch {
	case n.Name == "":
		p.bad("node.name", "is required")
	case !nodeNamePattern.MatchString(n.Name):
		p.bad("node.name", "%q must be 1-64 letters, digits, '.', '_' or '-'", n.Name)
	}
	if n.DataDir == "" {
		p.bad("node.data_dir", "is required")
	}
	if s.HTTPAddr = n.HTTP; s.HTTPAddr == "" {
		s.HTTPAddr = DefaultHTTPAddr
	}
	p.hostPort("node.http", s.HTTPAddr)
	p.hostPort("node.rpc", n.RPC)
	p.hostPort("node.gossip", n.Gossip)
	p.hostPort("node.raft", n.Raft)
	for i, j := range n.Join {
		p.hostPort(fmt.Sprintf("node.join[%d]", i), j)
	}
	if n.BootstrapExpect < 0 {
		p.bad("node.bootstrap_expect", "must not be negative")
	}
	if n.BootstrapExpect > 0 && !n.Voter {
		p.bad("node.bootstrap_expect", "is for voters; set node.voter: true or remove it")
	}
	p.envName("node.admin_token_env", n.AdminTokenEnv)
	if n.AdminTokenEnv != "" {
		s.AdminToken = p.secret("node.admin_token_env", n.AdminTokenEnv, env.Getenv)
	} else if !loopbackAddr(s.HTTPAddr) {
		// Without a token the admin API answers loopback clients only,
		// but a proxy on the same host makes every client loopback.
		p.bad("node.admin_token_env", "is required when node.http (%s) is not a loopback address: the admin API (drain, budgets, tenant keys) would be open to whoever reaches the port", s.HTTPAddr)
	}
}

// resolveRegions builds the region map and finds the node's region in it.
func resolveRegions(c *File, _ Env, s *Runtime, p *problems) {
	if len(c.Regions) == 0 {
		p.bad("regions", "at least one region is required")
	}
	rs := make([]region.Region, len(c.Regions))
	for i, r := range c.Regions {
		rs[i] = region.Region{Name: r.Name, Jurisdiction: region.Jurisdiction(r.Jurisdiction)}
	}
	regions, err := region.NewMap(rs)
	if err != nil {
		p.add(err)
		regions, _ = region.NewMap(nil)
	}
	s.Regions = regions
	if c.Node.Region == "" {
		p.bad("node.region", "is required")
	} else if r, ok := regions.Lookup(c.Node.Region); !ok && len(c.Regions) > 0 {
		p.bad("node.region", "%q is not one of regions[].name", c.Node.Region)
	} else {
		s.Jurisdiction = string(r.Jurisdiction)
	}
}

// resolvePeers settles how peers reach the node: its advertised address
// (auto: a private address of its interfaces) and, for a voter, its Raft
// and RPC addresses.
func resolvePeers(c *File, env Env, s *Runtime, p *problems) {
	n := &c.Node
	s.Voter, s.RPCAddr, s.Advertise = n.Voter, n.RPC, n.Advertise
	if n.Advertise == "auto" {
		ip, err := env.PrivateIP()
		if err != nil {
			p.bad("node.advertise", "auto: %v", err)
		}
		s.Advertise = ip
	}
	if n.Voter {
		if n.Raft == "" {
			p.bad("node.raft", "is required for a voter")
		} else if host, _, err := net.SplitHostPort(n.Raft); err == nil && n.Advertise == "" && (host == "" || net.ParseIP(host).IsUnspecified()) {
			p.bad("node.advertise", "is required when node.raft binds every address (%s): peers need an address to dial", n.Raft)
		}
		if n.RPC == "" {
			p.bad("node.rpc", "is required for a voter: other nodes reach the ledger through it")
		}
	}
	if n.Advertise != "" && n.Advertise != "auto" && net.ParseIP(n.Advertise) == nil {
		p.bad("node.advertise", "%q is not an IP address (or auto)", n.Advertise)
	}
}

// resolveTLS loads the node's certificate, key and CA when node.tls is
// set.
func resolveTLS(c *File, env Env, s *Runtime, p *problems) {
	t := c.Node.TLS
	if t == nil {
		return
	}
	m, err := pki.Load(pki.Files{CAFile: t.CAFile, CertFile: t.CertFile, KeyFile: t.KeyFile}, env.ReadFile)
	if err != nil {
		p.bad("node.tls", "%v", err)
	}
	s.TLS = m
}

// resolveRaft is a voter's Raft server configuration: its transport, data
// directory, bootstrap and TLS.
func resolveRaft(c *File, _ Env, s *Runtime, _ *problems) {
	n := &c.Node
	if !n.Voter {
		return
	}
	rc := &consensus.ServerConfig{ID: n.Name, Bind: n.Raft, DataDir: n.DataDir, BootstrapExpect: n.BootstrapExpect}
	if s.TLS != nil {
		rc.TLS = &consensus.TLSConfig{Server: s.TLS.Server, Client: s.TLS.Client}
	}
	if s.Advertise != "" {
		_, port, _ := net.SplitHostPort(n.Raft)
		rc.Advertise = net.JoinHostPort(s.Advertise, port)
	}
	s.Raft = rc
}
