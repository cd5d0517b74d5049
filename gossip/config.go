package gossip

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/prometheus/client_golang/prometheus"
)

// Config is one node's gossip settings.
type Config struct {
	// Name is the node's unique, stable name in the mesh.
	Name string
	// BindAddr and BindPort are where memberlist listens (TCP and UDP);
	// port 0 picks a free port.
	BindAddr string
	BindPort int
	// AdvertiseAddr and AdvertisePort are what peers should dial; empty
	// and 0 mean the bound address.
	AdvertiseAddr string
	AdvertisePort int
	// Seeds are host:port addresses of nodes to join through. Start keeps
	// trying them, with backoff, until one answers.
	Seeds []string
	// SecretKey encrypts and authenticates all gossip (AES-256-GCM); nil
	// sends it in the clear.
	SecretKey []byte
	// Label scopes the gossip to one cluster: packets with another label
	// are refused.
	Label string
	// Meta is the metadata the node starts with.
	Meta Meta
	// Memberlist returns memberlist's base configuration, which sets the
	// probe, gossip and suspicion timings; nil means DefaultLANConfig.
	Memberlist func() *memberlist.Config
	// ObservationTTL is how long a published observation stays valid.
	// Observations are refreshed at a third of it while nothing changes.
	ObservationTTL time.Duration
	// PublishInterval is how often this node compares its tracker with
	// what it last published; a change of availability is published at
	// once regardless.
	PublishInterval time.Duration
	// SummaryInterval bounds how stale the planner's view of the peers'
	// observations may be.
	SummaryInterval time.Duration
	// RecentOK is how recent a success of this node's own must be to
	// outweigh peers that see a provider failing.
	RecentOK time.Duration
	// MaxQueued bounds the broadcast queue; the oldest messages beyond it
	// are pruned.
	MaxQueued int
	// JoinBackoff and JoinBackoffMax pace retries of the seeds.
	JoinBackoff, JoinBackoffMax time.Duration
	// ReconnectInterval is how often a failed member is tried again, so
	// that a partition heals by itself once the network does;
	// ReconnectTimeout is how long a failed member is tried before it is
	// given up. Members that left are not tried.
	ReconnectInterval, ReconnectTimeout time.Duration
	// KnownProvider says which providers peers may report on; nil
	// accepts any name. Reports on others are dropped.
	KnownProvider func(name string) bool
	// OnMembership, if set, is called when a member joins, leaves or
	// fails (a voter's leader reconciles Raft at once). It runs on
	// memberlist's event path: it must not block.
	OnMembership func()
	// MaxHold caps an ejection or a cooldown a peer reports.
	MaxHold time.Duration
	// LeaveTimeout bounds how long a graceful leave waits to be heard.
	LeaveTimeout time.Duration
	// Logger receives memberlist's and this package's logs.
	Logger *slog.Logger
	// Registerer receives the gossip metrics; nil registers nothing.
	Registerer prometheus.Registerer
}

// DefaultConfig returns LAN settings for name.
func DefaultConfig(name string) Config {
	return Config{
		Name:              name,
		BindAddr:          "0.0.0.0",
		BindPort:          7946,
		ObservationTTL:    30 * time.Second,
		PublishInterval:   500 * time.Millisecond,
		SummaryInterval:   100 * time.Millisecond,
		RecentOK:          10 * time.Second,
		MaxQueued:         4096,
		JoinBackoff:       500 * time.Millisecond,
		JoinBackoffMax:    30 * time.Second,
		ReconnectInterval: 10 * time.Second,
		ReconnectTimeout:  24 * time.Hour,
		MaxHold:           15 * time.Minute,
		LeaveTimeout:      5 * time.Second,
	}
}

// Validate reports the first setting that cannot work.
func (c *Config) Validate() error {
	switch {
	case c.Name == "":
		return errors.New("gossip: a node name is required")
	case c.BindPort < 0 || c.BindPort > 65535:
		return fmt.Errorf("gossip: bind port %d out of range", c.BindPort)
	case len(c.SecretKey) != 0 && len(c.SecretKey) != 32:
		return fmt.Errorf("gossip: the key must be 32 bytes, got %d", len(c.SecretKey))
	case c.ObservationTTL <= 0 || c.PublishInterval <= 0 || c.SummaryInterval <= 0:
		return errors.New("gossip: observation TTL, publish and summary intervals must be positive")
	case c.MaxQueued <= 0:
		return errors.New("gossip: MaxQueued must be positive")
	case c.ReconnectInterval <= 0 || c.MaxHold <= 0:
		return errors.New("gossip: ReconnectInterval and MaxHold must be positive")
	}
	if _, err := c.Meta.Encode(); err != nil {
		return err
	}
	return nil
}
