// Package gossip owns what the mesh knows softly and shares by gossip:
// membership (hashicorp/memberlist), each node's typed metadata (region,
// jurisdiction, role, addresses, state), what every node observes of the
// providers it calls and of its own load, and network coordinates
// (Vivaldi, hashicorp/serf/coordinate) that estimate the RTT to any peer.
//
// Everything here is soft, expiring state: observations carry their
// observer, a version and a time to live; the newest version wins; stale
// ones age out; a node that dies or leaves takes its observations with it.
// Nothing on a request's path waits on the network: the planner reads a
// snapshot (HealthView) that merges this node's own tracker with its
// peers' observations.
//
// gossip imports region/ and route/ types only. It must not import
// consensus/ or node/; node/ wires it in.
package gossip
