package config

import (
	"crypto/sha256"
	"errors"
	"io/fs"
	"time"

	"github.com/llmesh/llmesh/consensus"
	"github.com/llmesh/llmesh/gossip"
	"github.com/llmesh/llmesh/node/pki"
	"github.com/llmesh/llmesh/region"
	"github.com/llmesh/llmesh/route"
)

// Runtime is a File translated into what each component takes, with
// defaults applied and secrets read. Resolve produces it.
type Runtime struct {
	// Name is the node's name, unique in the mesh; Region its region and
	// Jurisdiction that region's jurisdiction.
	Name, Region, Jurisdiction string
	// HTTPAddr is where the OpenAI API, the admin API, /metrics and /ui
	// listen.
	HTTPAddr string
	// Regions maps every configured region to its jurisdiction.
	Regions *region.Map
	// Providers and Groups are the catalog's inputs: what route.NewCatalog
	// checks and indexes.
	Providers []route.Provider
	Groups    []route.Group
	// TLS makes connections between nodes mutual TLS; nil: they are not.
	TLS *pki.MeshTLS
	// Tenants are the file's tenants with their key hashes decoded.
	Tenants []Tenant
	// Executor and Health configure the request path and outlier
	// detection.
	Executor route.ExecutorConfig
	Health   route.HealthConfig
	// MaxBodyBytes, MaxHeaderBytes and MaxMessages bound what a client
	// may send.
	MaxBodyBytes   int64
	MaxHeaderBytes int
	MaxMessages    int
	// MaxInFlight bounds one tenant's requests in flight on this node.
	MaxInFlight int
	// AdmissionWait bounds a request's wait for escrow or a rate share;
	// AdmissionQueue the requests waiting at once.
	AdmissionWait  time.Duration
	AdmissionQueue int
	// StoredResponsesBytes bounds the stored Responses API responses
	// held in memory, this node's and the copies it holds for peers.
	StoredResponsesBytes int64
	// ReadHeader and ReadBody bound reading a client's request;
	// ClientWrite one write to a client.
	ReadHeader, ReadBody, ClientWrite time.Duration
	// DrainGrace is how long a draining node still accepts requests;
	// DrainTimeout bounds the whole drain.
	DrainGrace, DrainTimeout time.Duration
	// AdminToken guards the admin API; empty: loopback clients only.
	AdminToken route.Secret
	// Voter holds a replica of the ledger.
	Voter bool
	// RPCAddr is the gRPC address between nodes; "" for none.
	RPCAddr string
	// Advertise is the host peers should use; "" for the bound one.
	Advertise string
	// Gossip is the membership's configuration, without the callbacks,
	// logger and registerer the node adds; nil: this node does not
	// gossip.
	Gossip *gossip.Config
	// ProbeIdle is how long a provider may go uncalled before it is
	// probed; 0: no probes.
	ProbeIdle time.Duration
	// Raft is a voter's Raft server configuration, without the seed,
	// membership, logger and clock the node adds; nil on other nodes.
	Raft *consensus.ServerConfig
	// Ledger is set when the node spends from the Raft ledger: it is a
	// voter, or it gossips and so can find voters.
	Ledger bool
	// RPCToken is the shared secret between nodes, derived from the
	// gossip key; "" without one.
	RPCToken string
	// Tracing is the span exporter's settings; nil: no spans are
	// exported.
	Tracing *Tracing
	// AuditDir is where the audit trail is written, "" for none;
	// AuditMaxBytes is the size a file is rotated at.
	AuditDir      string
	AuditMaxBytes int64
	// JournalDir is where the spend journal is kept, "" for none;
	// JournalFlush the longest a change waits to be written.
	JournalDir   string
	JournalFlush time.Duration
	// Cache is the response cache's settings.
	Cache Cache
}

// Tracing is the tracing section, resolved.
type Tracing struct {
	// Endpoint is the collector's OTLP/HTTP traces URL.
	Endpoint string
	// Headers are sent to the collector with every export; they may
	// hold a key.
	Headers map[string]route.Secret
	// Ratio is the share of the traces this node starts that are
	// sampled.
	Ratio float64
	// Service is the service.name the spans carry.
	Service string
}

// Tenant is a configured tenant with its key hashes decoded.
type Tenant struct {
	// Name is the tenant's name, unique among the file's tenants.
	Name string
	// Keys are the SHA-256 sums of the tenant's API keys.
	Keys [][sha256.Size]byte
	// Residency, when set, keeps the tenant's requests in one
	// jurisdiction; StrictTransit keeps them on its nodes too.
	Residency     region.Residency
	StrictTransit bool
	// Budget is the file's spending limit; nil for none.
	Budget *BudgetSection
	// Priority is route.PriorityInteractive or route.PriorityBatch.
	Priority int
	// MaxTTFT is its time-to-first-token objective; zero: none.
	MaxTTFT time.Duration
	// Limits are its mesh-wide rates; nil for none.
	Limits *consensus.Limits
	// KeySettings are its keys' own settings from the file, in its
	// order: what seeds the ledger, and holds until the ledger is read.
	KeySettings []consensus.KeySettings
}

// Env is what Resolve reads besides the file: the environment variables
// and files that hold secrets, and the interfaces node.advertise "auto"
// picks an address from. Resolve does no other I/O. A nil function reads
// nothing: every variable is unset, every file missing, and "auto" is
// refused.
type Env struct {
	// Getenv reads the variables *_env keys name.
	Getenv func(string) string
	// ReadFile reads the files node.gossip_key_file and node.tls name.
	ReadFile func(string) ([]byte, error)
	// PrivateIP returns the address node.advertise "auto" stands for
	// (the node passes PrivateIP).
	PrivateIP func() (string, error)
}

// orNothing fills e's nil functions with ones that read nothing.
func (e Env) orNothing() Env {
	if e.Getenv == nil {
		e.Getenv = func(string) string { return "" }
	}
	if e.ReadFile == nil {
		e.ReadFile = func(name string) ([]byte, error) {
			return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
		}
	}
	if e.PrivateIP == nil {
		e.PrivateIP = func() (string, error) {
			return "", errors.New("this node's interfaces are not available to the configuration")
		}
	}
	return e
}

// Defaults applied by Resolve.
const (
	DefaultHTTPAddr     = "127.0.0.1:8080"
	DefaultMaxBodyBytes = 8 << 20
	// DefaultStoredResponsesBytes is limits.stored_responses_bytes's
	// default.
	DefaultStoredResponsesBytes = ByteSize(64 << 20)
)
