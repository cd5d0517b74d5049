package gossip

import (
	"errors"
	"fmt"

	"github.com/hashicorp/memberlist"
)

// NodeState is a node's own account of whether it takes traffic.
type NodeState uint8

const (
	// StateAlive takes traffic.
	StateAlive NodeState = 0
	// StateDraining finishes what it has and forwards new requests.
	StateDraining NodeState = 1
	// StateLeaving is announced just before a graceful leave, so peers
	// can tell a node that left from one that failed: memberlist's leave
	// event does not say which it was.
	StateLeaving NodeState = 2
)

func (s NodeState) String() string {
	switch s {
	case StateAlive:
		return "alive"
	case StateDraining:
		return "draining"
	case StateLeaving:
		return "leaving"
	}
	return fmt.Sprintf("state(%d)", uint8(s))
}

// Meta is what a node tells every peer about itself, carried with its
// membership.
type Meta struct {
	Region       string
	Jurisdiction string
	Voter        bool      // holds a replica of the Raft ledger
	State        NodeState // alive or draining
	RPC          string    // host:port of its gRPC server
	HTTP         string    // host:port of its HTTP API
	Build        string    // build version
	Raft         string    // host:port of its Raft transport (voters)
	// APIs is the set of endpoints the node serves a forward of, one bit
	// an endpoint (route.API); 0 from a node before it was gossiped,
	// which serves chat alone.
	APIs uint64
	// LedgerVersion is the version of the Raft ledger's state machine
	// the node's build supports (consensus.LedgerVersion): the leader
	// agrees on the highest one every voter supports. 0 from a node
	// before it was gossiped.
	LedgerVersion int
}

// MetaLimit is the most bytes memberlist carries as node metadata.
const MetaLimit = memberlist.MetaMaxSize

// ErrMetaTooLarge is returned when encoded metadata would not fit.
var ErrMetaTooLarge = errors.New("gossip: node metadata exceeds 512 bytes")

const metaVersion = 1

// Encode returns m's wire form: a version byte, then the fields. It fails
// with ErrMetaTooLarge rather than hand memberlist something it would cut.
func (m Meta) Encode() ([]byte, error) {
	var e encoder
	e.byte1(metaVersion)
	e.str(m.Region)
	e.str(m.Jurisdiction)
	e.boolean(m.Voter)
	e.byte1(byte(m.State))
	e.str(m.RPC)
	e.str(m.HTTP)
	e.str(m.Build)
	e.str(m.Raft)
	e.uvarint(m.APIs)
	e.uvarint(uint64(max(m.LedgerVersion, 0)))
	if len(e.b) > MetaLimit {
		return nil, fmt.Errorf("%w (%d bytes)", ErrMetaTooLarge, len(e.b))
	}
	return e.b, nil
}

// DecodeMeta reads metadata written by Encode of this or a later version.
func DecodeMeta(b []byte) (Meta, error) {
	d := decoder{b: b}
	if v := d.byte1(); d.err == nil && v < metaVersion {
		return Meta{}, fmt.Errorf("gossip: metadata version %d is not supported", v)
	}
	m := Meta{
		Region:       d.str(),
		Jurisdiction: d.str(),
		Voter:        d.boolean(),
		State:        NodeState(d.byte1()),
		RPC:          d.str(),
		HTTP:         d.str(),
		Build:        d.str(),
	}
	if d.err == nil && len(d.b) > 0 { // added after the first release
		m.Raft = d.str()
	}
	if d.err == nil && len(d.b) > 0 { // added with the Responses API
		m.APIs = d.uvarint()
	}
	if d.err == nil && len(d.b) > 0 { // added with the ledger's version
		m.LedgerVersion = int(min(d.uvarint(), 1<<16))
	}
	if d.err != nil {
		return Meta{}, fmt.Errorf("gossip: decode metadata: %w", d.err)
	}
	return m, nil
}
