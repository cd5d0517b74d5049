package config

import (
	"reflect"
	"strings"
	"testing"
)

// DefaultConfig holds exactly the defaults Resolve applies to keys left
// out.
func TestDefaultConfigIsWhatResolveDefaults(t *testing.T) {
	required := func(f *File) *File {
		f.Node.Name, f.Node.Region, f.Node.DataDir = "eu-1", "eu-west", "/data"
		f.Regions = []RegionSection{{Name: "eu-west", Jurisdiction: "eu"}}
		return f
	}
	fromDefault, err := Resolve(required(DefaultConfig()), sectionEnv())
	if err != nil {
		t.Fatal(err)
	}
	fromNothing, err := Resolve(required(&File{}), sectionEnv())
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(fromDefault, fromNothing) {
		t.Fatalf("DefaultConfig resolves to\n%+v\nan empty file to\n%+v", fromDefault, fromNothing)
	}
}

// DevConfig and DemoConfig resolve once the caller adds what they leave
// out; without it, the messages name exactly that.
func TestPresetsResolve(t *testing.T) {
	complete := func(c *File) *File {
		if c.Node.DataDir == "" {
			c.Node.DataDir = "/tmp/dev"
		}
		for i := range c.Providers {
			c.Providers[i].BaseURL = "http://127.0.0.1:1"
		}
		for i := range c.Tenants {
			c.Tenants[i].KeySHA256 = []string{strings.Repeat(string(rune('a'+i)), 64)}
		}
		return c
	}
	for _, c := range []*File{DevConfig(), DemoConfig("eu-1", "eu-west"), DemoConfig("ap-1", "ap-south")} {
		s, err := Resolve(complete(c), sectionEnv())
		if err != nil {
			t.Fatalf("%s: %v", c.Node.Name, err)
		}
		if s.Raft == nil || s.Gossip == nil || !s.Ledger || s.DrainGrace.String() != "500ms" {
			t.Fatalf("%s: %+v", c.Node.Name, s)
		}
	}
	_, err := Resolve(DevConfig(), sectionEnv())
	for _, want := range []string{"node.data_dir: is required", "providers[0].base_url: is required (or give replicas)",
		"tenants[0].key_sha256: at least one key is required (in key_sha256 or keys)"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("DevConfig alone: got %v, want %q", err, want)
		}
	}
	// Presets are copies: changing one changes no other.
	a, b := DevConfig(), DevConfig()
	a.Regions[0].Name, a.Providers[0].Models[0].Name = "x", "y"
	if b.Regions[0].Name != "eu-west" || b.Providers[0].Models[0].Name != "gpt-4o-mini" {
		t.Fatal("DevConfig shares state between calls")
	}
}
