package route

// Charge is one settled cost as spend is attributed: an attempt this
// node admitted and the provider accepted, at the figure its budget hold
// settled (0 included). Nodes report charges to the ledger in batches.
type Charge struct {
	Tenant string
	// Key is the id of the API key the request came with ("" when
	// unknown); Tags its canonical tag set ("" for none, see ParseTags).
	Key, Tags string
	// Model is the mesh's name for the model that answered (a group's
	// member, not the group), Provider the provider that did.
	Model, Provider string
	USD             float64
}

// ChargeRecorder is told of every charge, once, as its attempt settles,
// on the node that called the provider (a forward's charge is the far
// node's). It must not block: it is on the request path.
type ChargeRecorder interface {
	Charged(Charge)
}
