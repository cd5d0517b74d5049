// Package consensus owns the mesh's strongly consistent state and the
// means of spending it without waiting on it: the Raft cluster of voters
// (hashicorp/raft, raft-boltdb/v2), the ledger state machine behind it
// (tenants, budget escrow, provider rate capacity), forwarding of writes
// to the leader over gRPC, the leader's rate-lease allocator, and the
// holders a node's hot path spends from: budget escrow and rate shares
// held locally and settled in batches.
//
// The state machine (Ledger) is pure and deterministic: no clock, no
// randomness, no map order in its outputs; time comes in each command,
// stamped by the leader. The raft.FSM is a thin adapter over it.
//
// consensus imports proto/ and region/ only: it returns its own errors
// (ErrBudgetExceeded, *RetryAfterError) and takes plain capacities
// (RateCapacity). node/ adapts its holders to route/'s gates and wires it
// to the membership.
package consensus
