package node_test

import (
	"testing"
	"time"

	"github.com/llmesh/llmesh/node"
	"github.com/llmesh/llmesh/node/audit"
	"github.com/llmesh/llmesh/sim/emulator"
	"github.com/llmesh/llmesh/sim/harness/wait"
)

// Every node a residency-bound request passes writes where it went: an
// eu tenant's request at us-1, served by the eu GPU cluster through eu-1,
// is in both nodes' trails with the nodes in order, the provider and its
// jurisdiction; a request no provider could serve is in the trail with
// its error code;
// a tenant without a residency leaves no line.
func TestAuditTrailFollowsTheData(t *testing.T) {
	dirs := map[string]string{}
	f := startRegions(t, regionsUpstreams(emulator.Config{}), func(region string, c *node.Config) {
		dirs[region] = t.TempDir()
		c.Audit = node.AuditSection{Dir: dirs[region]}
	})
	if resp := postAs(t, f.urls["us"], euKey, hello, "X-Request-Id", "audit-1"); resp.StatusCode != 200 {
		t.Fatal(resp.Status)
	}
	if resp := postAs(t, f.urls["us"], testKey, hello, "X-Request-Id", "audit-free"); resp.StatusCode != 200 {
		t.Fatal(resp.Status)
	}
	for _, p := range []string{"gpu-eu", "azure-eu"} {
		if err := f.emus[p].SetMode(emulator.ModeRefuse); err != nil {
			t.Fatal(err)
		}
	}
	failed := postAs(t, f.urls["eu"], euKey, hello, "X-Request-Id", "audit-2").StatusCode
	if failed < 500 {
		t.Fatalf("with every eu provider down: %d", failed)
	}
	trail := func(region string) map[string]audit.Record {
		out := map[string]audit.Record{}
		breaks, err := audit.Scan(dirs[region], func(r audit.Record) error { out[r.RequestID] = r; return nil })
		if err != nil || len(breaks) != 0 {
			t.Fatalf("%s: %v %v", region, err, breaks)
		}
		return out
	}
	wait.For(t, 5*time.Second, "the records on disk", func() bool {
		return len(trail("us")) == 1 && len(trail("eu")) == 2
	})
	us, eu := trail("us")["audit-1"], trail("eu")["audit-1"]
	for _, r := range []audit.Record{us, eu} {
		if r.Tenant != "acme-eu" || r.Residency != "eu" || r.Provider != "gpu-eu" || r.ProviderJurisdictions != "eu" ||
			r.ProviderRegion != "eu-west" || len(r.Nodes) != 2 || r.Nodes[0] != "us-1" || r.Nodes[1] != "eu-1" || r.Outcome != "ok" {
			t.Errorf("record %+v", r)
		}
	}
	if us.Node != "us-1" || eu.Node != "eu-1" {
		t.Fatalf("writers %q %q", us.Node, eu.Node)
	}
	if r := trail("eu")["audit-2"]; r.Provider != "" || r.Error == "" || r.Status != failed || r.Outcome == "ok" {
		t.Fatalf("a request no provider served: %+v", r)
	}
	if _, ok := trail("us")["audit-free"]; ok {
		t.Fatal("a tenant without a residency was audited")
	}
}
