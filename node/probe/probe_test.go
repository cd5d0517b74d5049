package probe

import (
	"fmt"
	"testing"
)

// Each provider has one prober among a region's nodes, the same whatever
// the order the nodes are listed in, and a node leaving moves only the
// providers it probed.
func TestChooseProber(t *testing.T) {
	nodes := []string{"eu-1", "eu-2", "eu-3", "eu-4"}
	reversed := []string{"eu-4", "eu-3", "eu-2", "eu-1"}
	without := []string{"eu-1", "eu-3", "eu-4"}
	count := map[string]int{}
	for i := range 200 {
		p := fmt.Sprint("provider-", i)
		c := chooseProber(p, nodes)
		count[c]++
		if chooseProber(p, reversed) != c {
			t.Fatalf("%s: the choice depends on the order", p)
		}
		if c != "eu-2" && chooseProber(p, without) != c {
			t.Fatalf("%s moved from %s when eu-2 left", p, c)
		}
	}
	if len(count) != len(nodes) {
		t.Fatalf("probers %v: a node probes nothing", count)
	}
	if chooseProber("p", nil) != "" {
		t.Fatal("no nodes")
	}
}
