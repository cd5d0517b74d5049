package config

import (
	"time"

	"github.com/llmesh/llmesh/route"
)

// section validates one part of a File and fills its part of a Runtime.
// Sections run in order: a later one may read what an earlier one
// resolved (the regions, the node's advertised address, the gossip key).
type section func(c *File, env Env, s *Runtime, p *problems)

// Resolve validates c and translates it into a Runtime. env reads the
// environment variables and files that hold secrets and the interfaces
// for node.advertise "auto"; nothing else is read, and a nil function of
// env reads nothing: Resolve is pure. Every problem found is reported,
// each naming its field; no secret is ever part of a message.
func Resolve(c *File, env Env) (*Runtime, error) {
	env = env.orNothing()
	s := defaultRuntime(c.Node.Name, c.Node.Region)
	var p problems
	for _, resolve := range []section{
		resolveNode, resolveRegions, resolvePeers, resolveGossip, resolveTLS, resolveRaft,
		resolveProviders, resolveGroups, resolveTenants,
		resolveLimits, resolveTimeouts, resolveDrain, resolveOutlier, resolveLedger,
		resolveProbes, resolveTracing, resolveAudit, resolveJournal, checkGossipKeys, resolveCache,
	} {
		resolve(c, env, s, &p)
	}
	if err := p.err(); err != nil {
		return nil, err
	}
	return s, nil
}

// defaultRuntime is what a Runtime holds before any section: the
// components' defaults.
func defaultRuntime(name, region string) *Runtime {
	ex := route.DefaultExecutorConfig()
	ex.NodeName = name
	return &Runtime{
		Name:                 name,
		Region:               region,
		Executor:             ex,
		Health:               route.DefaultHealthConfig(),
		MaxBodyBytes:         DefaultMaxBodyBytes,
		MaxHeaderBytes:       64 << 10,
		MaxMessages:          4096,
		MaxInFlight:          256,
		AdmissionWait:        2 * time.Second,
		AdmissionQueue:       1024,
		StoredResponsesBytes: int64(DefaultStoredResponsesBytes),
		ReadHeader:           10 * time.Second,
		ReadBody:             30 * time.Second,
		ClientWrite:          30 * time.Second,
		DrainGrace:           5 * time.Second,
		DrainTimeout:         30 * time.Second,
		ProbeIdle:            30 * time.Second,
	}
}
