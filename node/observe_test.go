package node_test

import (
	"strings"
	"testing"
	"time"

	"github.com/llmesh/llmesh/node/views"
	"github.com/llmesh/llmesh/sim/emulator"
	"github.com/llmesh/llmesh/sim/harness/wait"
)

func total(a []int) (n int) {
	for _, v := range a {
		n += v
	}
	return n
}

// GET /v1/mesh/observe on one node gathers every node's decisions, rate
// shares and series over the gRPC links, and sums the series into the
// mesh's: a forwarded request counts once, at the node its client
// called, and that node's series has the hop.
func TestObserveGathersTheMesh(t *testing.T) {
	f := startRegions(t, regionsUpstreams(emulator.Config{}), nil)
	for range 3 { // the eu tenant at the us node: forwarded to eu-1 (gpu-eu)
		if resp := postAs(t, f.urls["us"], euKey, hello); resp.StatusCode != 200 {
			t.Fatalf("eu tenant at us: %s", resp.Status)
		}
	}
	if resp := postAs(t, f.urls["eu"], usKey, hello); resp.StatusCode != 200 {
		t.Fatalf("us tenant at eu: %s", resp.Status)
	}
	var doc views.MeshObservation
	wait.For(t, 10*time.Second, "the mesh's series to count the four requests", func() bool {
		doc = views.MeshObservation{}
		if code := getJSON(t, f.urls["eu"]+"/v1/mesh/observe?decisions=10&seconds=120", "", &doc); code != 200 {
			t.Fatalf("observe: %d", code)
		}
		return total(doc.Series.Tenants["acme-eu"].Requests) == 3 && total(doc.Series.Tenants["acme-us"].Requests) == 1
	})
	var names []string
	by := map[string]views.Observation{}
	for _, o := range doc.Nodes {
		names = append(names, o.Node)
		by[o.Node] = o
		if o.Error != "" {
			t.Errorf("%s: %s", o.Node, o.Error)
		}
	}
	if got := strings.Join(names, ","); doc.Node != "eu-1" || got != "eu-1,ap-1,us-1" {
		t.Fatalf("observed %s from %s; want eu-1 first, then its peers by name", got, doc.Node)
	}
	if n := total(doc.Series.Providers["gpu-eu"].Requests); n != 3 {
		t.Fatalf("the mesh's series counts %d requests at gpu-eu; 3 were sent (a forward counts once)", n)
	}
	if n := total(by["eu-1"].Series.Providers["gpu-eu"].Requests); n != 0 {
		t.Fatalf("eu-1's own series counts %d of us-1's requests: the mesh's sum was merged into it", n)
	}
	us := by["us-1"]
	if n := total(us.Series.Forwards["eu-1"].Requests); n != 3 || us.Region != "us-east" {
		t.Fatalf("us-1 (%s) forwarded %d requests to eu-1 by its series; want 3", us.Region, n)
	}
	forwardedIn := 0
	for _, d := range by["eu-1"].Decisions {
		if d.ForwardedBy == "us-1" {
			forwardedIn++
		}
	}
	via := 0
	for _, d := range us.Decisions {
		if d.Via == "eu-1" {
			via++
		}
	}
	if forwardedIn != 3 || via != 3 {
		t.Fatalf("decisions: eu-1 has %d forwarded by us-1, us-1 has %d via eu-1; want 3 and 3", forwardedIn, via)
	}
	if doc.Series.Providers["openai-us"].LatencyMsSum == nil || doc.Series.Tenants["acme-eu"].CostUSD == nil {
		t.Fatalf("latency or cost missing: %+v", doc.Series)
	}

	// The node's own series, and bad parameters in the API's error shape.
	var own views.Series
	if code := getJSON(t, f.urls["us"]+"/v1/mesh/series?seconds=60", "", &own); code != 200 || own.Seconds != 60 ||
		total(own.Forwards["eu-1"].Requests) != 3 {
		t.Fatalf("us-1's series: %d %+v", code, own)
	}
	for _, q := range []string{"/v1/mesh/observe?seconds=0", "/v1/mesh/observe?decisions=x", "/v1/mesh/series?seconds=-1"} {
		resp := mustGet(t, f.urls["eu"]+q)
		if body := readAll(t, resp.Body); resp.StatusCode != 400 || !strings.Contains(body, `"invalid_request_error"`) {
			t.Fatalf("%s: %d %s", q, resp.StatusCode, body)
		}
	}
}
