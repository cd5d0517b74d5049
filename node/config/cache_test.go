package config

import (
	"strings"
	"testing"
	"time"
)

func TestResolveCache(t *testing.T) {
	testSection(t, resolveCache, nil, []sectionCase{
		{name: "off by default", want: func(s *Runtime) {
			s.Cache = Cache{TTL: DefaultCacheTTL, MaxBytes: int64(DefaultCacheBytes), Tenants: map[string]bool{}}
		}},
		{name: "on", edit: func(f *File) {
			f.Cache = CacheSection{Enabled: true, TTL: Duration(time.Minute), MaxBytes: 64 << 20}
			f.Tenants = []TenantSection{{Name: "acme", Cache: true}, {Name: "globex"}}
			f.Groups = []GroupSection{{Name: "smart", Cache: true}}
		}, want: func(s *Runtime) {
			s.Cache = Cache{Enabled: true, TTL: time.Minute, MaxBytes: 64 << 20, Tenants: map[string]bool{"acme": true}}
		}},
		{name: "opt-ins without the cache", edit: func(f *File) {
			f.Cache = CacheSection{MaxBytes: 1000}
			f.Tenants = []TenantSection{{Name: "acme", Cache: true}}
			f.Groups = []GroupSection{{Name: "smart", Cache: true}}
		}, err: strings.Join([]string{"cache.max_bytes: 1000 bytes is too small to hold answers; at least 1MiB",
			"tenants[0].cache: needs cache.enabled: true", "groups[0].cache: needs cache.enabled: true"}, "\n")},
	})
}

func TestParseCacheSizes(t *testing.T) {
	for s, want := range map[string]ByteSize{"256MiB": 256 << 20, "1GiB": 1 << 30, "512 KiB": 512 << 10, "300MB": 300e6, "1048576": 1 << 20, "10B": 10} {
		if got, ok := ParseByteSize(s); !ok || got != want {
			t.Errorf("%s: %d %v, want %d", s, got, ok, want)
		}
	}
	for _, s := range []string{"lots", "-1MiB", "1.5GiB", "MiB", "99999999999GiB"} {
		if _, ok := ParseByteSize(s); ok {
			t.Errorf("%q parsed", s)
		}
	}
	c, err := Parse([]byte(validConfig + "\ncache: {enabled: true, ttl: 5m, max_bytes: 64MiB}\n"))
	if err != nil || !c.Cache.Enabled || c.Cache.TTL != Duration(5*time.Minute) || c.Cache.MaxBytes != 64<<20 {
		t.Fatalf("%+v %v", c.Cache, err)
	}
	if _, err := Parse([]byte(validConfig + "\ncache: {max_bytes: lots}\n")); err == nil || !strings.Contains(err.Error(), `"lots" is not a size such as "256MiB"`) {
		t.Fatalf("a bad size: %v", err)
	}
}
