package des

import (
	"github.com/llmesh/llmesh/consensus"
	"github.com/llmesh/llmesh/route"
)

// rateCapacities are the limits of providers, as consensus's rate holder
// takes them.
func rateCapacities(providers []*route.Provider) []consensus.RateCapacity {
	caps := make([]consensus.RateCapacity, 0, len(providers))
	for _, p := range providers {
		caps = append(caps, consensus.RateCapacity{Provider: p.Name, RPM: int64(p.RPM), TPM: int64(p.TPM)})
	}
	return caps
}
