// Package sim is the home of what runs llmesh without real providers or
// real regions: the provider emulator (sim/emulator), the harness that
// composes emulators and nodes for the demo and for tests (sim/harness,
// with sim/harness/wait for every package's tests), the discrete-event
// simulator (sim/des), the load generator (sim/bench) and the tests'
// balancer (sim/loadtest). This package itself holds only this doc;
// nothing but cmd/ and tests imports sim's packages.
package sim
