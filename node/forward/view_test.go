package forward

import (
	"slices"
	"testing"
	"time"

	"github.com/llmesh/llmesh/gossip"
	"github.com/llmesh/llmesh/region"
	"github.com/llmesh/llmesh/route"
)

func member(name, reg, j, rpc string, rtt time.Duration) gossip.Member {
	return gossip.Member{Name: name, State: "alive", RTT: rtt, RTTKnown: true,
		Meta: gossip.Meta{Region: reg, Jurisdiction: j, RPC: rpc}}
}

func testMesh() *fakeMesh {
	self := member("self", "eu", "eu", "s:1", 0)
	self.Self = true
	draining := member("eu-draining", "eu", "eu", "d:1", time.Millisecond)
	draining.State = "draining"
	return &fakeMesh{
		members: []gossip.Member{
			self, draining,
			member("eu-far", "eu", "eu", "e2:1", 80*time.Millisecond),
			member("eu-near", "eu", "eu", "e1:1", 10*time.Millisecond),
			member("eu-norpc", "eu", "eu", "", 2*time.Millisecond),
			member("us-1", "us", "us", "u1:1", 90*time.Millisecond),
		},
		loads: map[string]gossip.Load{
			"self":        {InFlight: 9, Spare: []gossip.Spare{{Provider: "openai", Requests: 5}}},
			"eu-draining": {Spare: []gossip.Spare{{Provider: "openai", Requests: 5}}},
			"eu-far":      {InFlight: 1, Spare: []gossip.Spare{{Provider: "openai", Requests: 2}}},
			"eu-near":     {InFlight: 3, Spare: []gossip.Spare{{Provider: "openai", Requests: 0}, {Provider: "azure", Requests: 1}}},
			"eu-norpc":    {Spare: []gossip.Spare{{Provider: "openai", Requests: 5}}},
			"us-1":        {InFlight: 2, Spare: []gossip.Spare{{Provider: "openai", Requests: 4}}},
		},
	}
}

// The via node of a region is an alive member that takes forwards,
// never this node, a draining one or one without node.rpc; for another
// endpoint than chat, one that gossips that it serves it (a node of an
// earlier version serves chat alone).
func TestViewVia(t *testing.T) {
	mesh := testMesh()
	for i := range mesh.members {
		if mesh.members[i].Name == "eu-far" {
			mesh.members[i].Meta.APIs = route.ServedAPIs
		}
	}
	v := NewView(mesh)
	if name, rtt, ok := v.Via("eu", route.APIChat); !ok || name != "eu-near" || rtt != 10*time.Millisecond {
		t.Fatalf("via eu: %s %v %v", name, rtt, ok)
	}
	if name, _, ok := v.Via("eu", route.APIResponses); !ok || name != "eu-far" {
		t.Fatalf("via eu for responses: %s %v; want the one node that serves it", name, ok)
	}
	if name, _, ok := v.Via("us", route.APIChat); !ok || name != "us-1" {
		t.Fatalf("via us: %s %v", name, ok)
	}
	if _, _, ok := v.Via("us", route.APIEmbeddings); ok {
		t.Fatal("an earlier version's node is the via node of embeddings")
	}
	if _, _, ok := v.Via("ap", route.APIChat); ok {
		t.Fatal("a region without nodes has a via node")
	}
}

// Peers with rate share left come nearest first, in the region and
// jurisdiction asked for; a peer with none left, this node, a draining
// one or one without node.rpc never.
func TestViewSpare(t *testing.T) {
	v := NewView(testMesh())
	all := func(provider, inRegion string, j region.Jurisdiction) []string {
		var out []string
		for i := 0; ; i++ {
			name, _, _, ok := v.Spare(provider, inRegion, j, i)
			if !ok {
				return out
			}
			out = append(out, name)
		}
	}
	for _, c := range []struct {
		provider, region string
		j                region.Jurisdiction
		want             []string
	}{
		{"openai", "", "", []string{"eu-far", "us-1"}},
		{"openai", "us", "", []string{"us-1"}},
		{"openai", "", "eu", []string{"eu-far"}},
		{"azure", "", "", []string{"eu-near"}},
		{"anthropic", "", "", nil},
	} {
		if got := all(c.provider, c.region, c.j); !slices.Equal(got, c.want) {
			t.Errorf("%s in %q/%q: %v, want %v", c.provider, c.region, c.j, got, c.want)
		}
	}
	if name, reg, rtt, _ := v.Spare("openai", "", "", 1); name != "us-1" || reg != "us" || rtt != 90*time.Millisecond {
		t.Fatalf("second spare %s %s %v", name, reg, rtt)
	}
}

// Member and Peers show every member gossip knows, this node and
// draining ones too, with their load.
func TestViewMembers(t *testing.T) {
	v := NewView(testMesh())
	if m, ok := v.Member("eu-draining"); !ok || m.State != "draining" {
		t.Fatalf("member %+v %v", m, ok)
	}
	if _, ok := v.Member("gone"); ok {
		t.Fatal("an unknown member was found")
	}
	var names []string
	for _, p := range v.Peers() {
		names = append(names, p.Name)
		if want := int64(testMesh().loads[p.Name].InFlight); p.Load != want {
			t.Errorf("%s: load %d, want %d", p.Name, p.Load, want)
		}
	}
	if want := []string{"eu-draining", "eu-far", "eu-near", "eu-norpc", "self", "us-1"}; !slices.Equal(names, want) {
		t.Fatalf("peers %v", names)
	}
}

// What gossip knows is read again only once the snapshot is viaRefresh
// old.
func TestViewRefresh(t *testing.T) {
	mesh := testMesh()
	v := NewView(mesh)
	if _, ok := v.Member("late"); ok {
		t.Fatal("late is not there yet")
	}
	mesh.members = append(mesh.members, member("late", "ap", "ap", "l:1", time.Millisecond))
	if _, ok := v.Member("late"); ok {
		t.Fatal("the view read gossip again before viaRefresh")
	}
	v.mu.Lock()
	v.at = v.at.Add(-viaRefresh)
	v.mu.Unlock()
	if _, ok := v.Member("late"); !ok {
		t.Fatal("the view did not read gossip again after viaRefresh")
	}
}

// A provider's engines are known from the alive nodes of its region that
// report them: the report with the most fresh replicas, never this
// node's, a draining node's or another region's under its name.
func TestViewEngine(t *testing.T) {
	mesh := testMesh()
	gpu := func(replicas, waiting int) []gossip.Engine {
		return []gossip.Engine{{Provider: "gpu", Replicas: replicas, Running: 3, Waiting: waiting, KVUsage: 0.5}}
	}
	set := func(name string, e []gossip.Engine) {
		l := mesh.loads[name]
		l.Engines = e
		mesh.loads[name] = l
	}
	set("self", gpu(8, 99))
	set("eu-draining", gpu(8, 99))
	set("eu-far", gpu(2, 5))
	set("eu-near", gpu(3, 1))
	set("us-1", gpu(1, 7))
	v := NewView(mesh)
	if e, ok := v.Engine("gpu", "eu"); !ok || e != (route.RemoteEngine{Replicas: 3, Running: 3, Waiting: 1, KVUsage: 0.5}) {
		t.Fatalf("gpu in eu: %+v %v", e, ok)
	}
	if e, ok := v.Engine("gpu", "us"); !ok || e.Waiting != 7 {
		t.Fatalf("gpu in us: %+v %v", e, ok)
	}
	if _, ok := v.Engine("gpu", "ap"); ok {
		t.Fatal("a report from a region with no node")
	}
	if _, ok := v.Engine("other", "eu"); ok {
		t.Fatal("a report of a provider nobody scrapes")
	}
}
