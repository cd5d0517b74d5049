// Package sim is the home of what runs llmesh without real providers or
// real regions: the provider emulator (sim/emulator), the harness that
// composes emulators and nodes for development and tests (sim/harness),
// and the discrete-event simulator. sim may import route/, region/ and
// node/; nothing but cmd/ and tests imports sim.
package sim
