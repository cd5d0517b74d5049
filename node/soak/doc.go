// Package soak holds minutes-long tests of whole meshes under load: nodes
// in-process on loopback, real Raft, emulated providers, driven for up to
// a couple of minutes to show that a guarantee holds over time (keys' and
// providers' mesh-wide rate limits in every 60 s window, a rate share
// spilling to peers through a leader's death, a ramp to a hundred
// requests a second never refused, tens of thousands of streams relayed
// whole). It has no code but its tests, kept apart from node's so that
// each package's tests stay well within go test's default timeout; the
// longest skip under -short. The rate tests run in parallel with one
// another: each spends its minutes waiting on the clock at a few
// requests a second, not on the CPU. The ramp and the stream soak, which
// are bound by the CPU, run before them, each alone.
package soak
