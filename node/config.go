package node

import "github.com/llmesh/llmesh/node/config"

// Config is the node's configuration file; package config defines it and
// its sections. The aliases keep node.Config and its sections usable by
// the node's callers.
type Config = config.File

// The sections of Config.
type (
	NodeSection     = config.NodeSection
	DrainSection    = config.DrainSection
	TLSSection      = config.TLSSection
	RegionSection   = config.RegionSection
	ProviderSection = config.ProviderSection
	ReplicaSection  = config.ReplicaSection
	RateSection     = config.RateSection
	ModelSection    = config.ModelSection
	TenantSection   = config.TenantSection
	KeySection      = config.KeySection
	GroupSection    = config.GroupSection
	TierSection     = config.TierSection
	BudgetSection   = config.BudgetSection
	LimitsSection   = config.LimitsSection
	TimeoutsSection = config.TimeoutsSection
	OutlierSection  = config.OutlierSection
	ProbesSection   = config.ProbesSection
	AuditSection    = config.AuditSection
	JournalSection  = config.JournalSection
	TracingSection  = config.TracingSection
	CacheSection    = config.CacheSection
	Duration        = config.Duration
)

// Defaults applied to a configuration.
const (
	DefaultHTTPAddr     = config.DefaultHTTPAddr
	DefaultMaxBodyBytes = config.DefaultMaxBodyBytes
)

// LoadConfig reads and strictly decodes the configuration file at path
// (config.Load).
func LoadConfig(path string) (*Config, error) { return config.Load(path) }

// ParseConfig strictly decodes a YAML configuration document
// (config.Parse).
func ParseConfig(b []byte) (*Config, error) { return config.Parse(b) }
