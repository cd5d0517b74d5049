package config

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Defaults of the cache section.
const (
	DefaultCacheTTL   = 10 * time.Minute
	DefaultCacheBytes = ByteSize(256 << 20)
)

// CacheSection is the exact-match response cache: off unless enabled,
// and then used by the tenants and groups that opt in (tenants[].cache,
// groups[].cache) and by requests that ask (X-LLMesh-Cache: on).
type CacheSection struct {
	Enabled  bool     `yaml:"enabled"`   // default false
	TTL      Duration `yaml:"ttl"`       // how long an answer is served; default 10m
	MaxBytes ByteSize `yaml:"max_bytes"` // answers held in memory, per node; default 256MiB
}

// Cache is the cache section, resolved.
type Cache struct {
	// Enabled turns the cache on; TTL and MaxBytes bound it.
	Enabled  bool
	TTL      time.Duration
	MaxBytes int64
	// Tenants are the tenants that opted in (tenants[].cache), by name.
	Tenants map[string]bool
}

// resolveCache checks the cache section and the tenants' opt-ins.
func resolveCache(c *File, _ Env, s *Runtime, p *problems) {
	cs := c.Cache
	s.Cache = Cache{Enabled: cs.Enabled, TTL: time.Duration(cs.TTL), MaxBytes: int64(cs.MaxBytes), Tenants: map[string]bool{}}
	if s.Cache.TTL == 0 {
		s.Cache.TTL = DefaultCacheTTL
	}
	if s.Cache.MaxBytes == 0 {
		s.Cache.MaxBytes = int64(DefaultCacheBytes)
	}
	if s.Cache.MaxBytes < 1<<20 {
		p.bad("cache.max_bytes", "%d bytes is too small to hold answers; at least 1MiB", s.Cache.MaxBytes)
	}
	for i, t := range c.Tenants {
		if t.Cache && !cs.Enabled {
			p.bad(fmt.Sprintf("tenants[%d].cache", i), "needs cache.enabled: true")
		}
		if t.Cache {
			s.Cache.Tenants[t.Name] = true
		}
	}
	for i, g := range c.Groups {
		if g.Cache && !cs.Enabled {
			p.bad(fmt.Sprintf("groups[%d].cache", i), "needs cache.enabled: true")
		}
	}
}

// ByteSize is a number of bytes written as 268435456, 256MiB or 256MB
// (KiB, MiB, GiB: powers of 1024; KB, MB, GB: of 1000; B: bytes).
type ByteSize int64

// byteUnits are ByteSize's suffixes, longest first.
var byteUnits = []struct {
	suffix string
	n      int64
}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"B", 1}}

// ParseByteSize reads s as a ByteSize.
func ParseByteSize(s string) (ByteSize, bool) {
	s = strings.TrimSpace(s)
	unit := int64(1)
	for _, u := range byteUnits {
		if num, ok := strings.CutSuffix(s, u.suffix); ok {
			s, unit = strings.TrimSpace(num), u.n
			break
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 || n > (1<<62)/unit {
		return 0, false
	}
	return ByteSize(n * unit), true
}

// UnmarshalYAML reads a size such as 256MiB, or a plain number of bytes.
func (b *ByteSize) UnmarshalYAML(n *yaml.Node) error {
	var s string
	if err := n.Decode(&s); err != nil {
		return fmt.Errorf("line %d: want a size such as \"256MiB\"", n.Line)
	}
	v, ok := ParseByteSize(s)
	if !ok {
		return fmt.Errorf("line %d: %q is not a size such as \"256MiB\"", n.Line, s)
	}
	*b = v
	return nil
}
