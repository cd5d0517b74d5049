package node_test

import (
	"bufio"
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/llmesh/llmesh/node"
	pb "github.com/llmesh/llmesh/proto"
	"github.com/llmesh/llmesh/sim/harness"
	"github.com/llmesh/llmesh/sim/harness/wait"
)

// copyMesh is three nodes, eu-1 and eu-2 in eu-west and us-1 in us-east,
// in front of responsesUpstreams' providers: gpt-4o-mini is the eu vLLM
// cluster's (bridged: the nodes keep the conversation), gpt-4o Azure's
// in the eu for the eu tenant and OpenAI's in the us for the us tenant
// (passed through: the provider keeps it).
type copyMesh struct {
	nodes map[string]*node.Node
	urls  map[string]string
	// logs are each node's log lines, JSON, debug ones included.
	logs map[string]*syncBuffer
}

func startCopyMesh(t *testing.T) *copyMesh {
	t.Helper()
	base := startNode(t, responsesUpstreams(), withRegions)
	base.node.Kill() // only its emulators and provider sections are wanted
	m := &copyMesh{nodes: map[string]*node.Node{}, urls: map[string]string{}, logs: map[string]*syncBuffer{}}
	names := []struct{ name, region string }{{"eu-1", "eu-west"}, {"eu-2", "eu-west"}, {"us-1", "us-east"}}
	var cfgs []*node.Config
	for _, n := range names {
		cfg := baseConfig()
		withRegions(cfg)
		cfg.Node.Name, cfg.Node.Region = n.name, n.region
		cfg.Node.Gossip, cfg.Node.RPC = "127.0.0.1:0", "127.0.0.1:0"
		cfg.Providers = base.cfg.Providers
		cfgs = append(cfgs, cfg)
		m.logs[n.name] = &syncBuffer{}
	}
	nodes := harness.StartMesh(t, cfgs, func(i int) node.Options { return testOptions(m.logs[names[i].name]) })
	for i, n := range names {
		m.nodes[n.name] = nodes[i]
		m.urls[n.name] = "http://" + nodes[i].HTTPAddr()
	}
	wait.For(t, 30*time.Second, "every node to see the others with their RPC addresses", func() bool {
		for _, nd := range m.nodes {
			ok := 0
			for _, mem := range nd.Mesh().Members() {
				if mem.State == "alive" && mem.Meta.RPC != "" {
					ok++
				}
			}
			if ok != len(names) {
				return false
			}
		}
		return true
	})
	return m
}

// awaitCopy waits until one of the nodes named holds a copy of tenant's
// response id, and returns its name.
func (m *copyMesh) awaitCopy(t *testing.T, tenant, id string, names ...string) string {
	t.Helper()
	var at string
	wait.For(t, 10*time.Second, "a copy of "+id+" on one of "+strings.Join(names, ", "), func() bool {
		for _, name := range names {
			if held, copy := m.nodes[name].HoldsStored(tenant, id); held && copy {
				at = name
				return true
			}
		}
		return false
	})
	return at
}

// awaitGone waits until each of the nodes named sees the node gone
// (failed or left), so that no plan names it a via node.
func (m *copyMesh) awaitGone(t *testing.T, gone string, names ...string) {
	t.Helper()
	wait.For(t, 30*time.Second, "the others to see "+gone+" gone", func() bool {
		for _, name := range names {
			for _, mem := range m.nodes[name].Mesh().Members() {
				if mem.Name == gone && mem.State != "failed" && mem.State != "left" {
					return false
				}
			}
		}
		return true
	})
}

// storedCases are a bridged and a passed-through response of the eu
// tenant.
var storedCases = []struct{ model, provider string }{{"gpt-4o-mini", "gpu-eu"}, {"gpt-4o", "azure-eu"}}

func notFound(err error) bool {
	var apiErr *openai.Error
	return errors.As(err, &apiErr) && apiErr.StatusCode == http.StatusNotFound
}

// A stored response outlives the node that relayed it: eu-1 answers the
// first turn, bridged (gpu-eu) and passed through (azure-eu), and is
// killed — its gRPC connections fail while gossip still lists it — or
// drained; then a retrieve entering at us-1 (which never held the
// responses) finds the copy on eu-2, follow-ups entering at us-1 and at
// eu-2 continue the conversation through the copy, and a delete at us-1
// leaves a 404 everywhere.
func TestStoredResponsesOutliveTheirNode(t *testing.T) {
	for _, how := range []string{"killed", "drained"} {
		t.Run(how, func(t *testing.T) {
			m := startCopyMesh(t)
			ctx := context.Background()
			eu1 := regionClient(m.urls["eu-1"], euKey)
			var firsts []*responses.Response
			for _, tc := range storedCases {
				first, hdr := newResponse(t, eu1, responses.ResponseNewParams{Model: tc.model, Input: userText("Bonjour"),
					Instructions: openai.String("Be brief."), MaxOutputTokens: openai.Int(20)}, false)
				if p, via := hdr.Get("X-LLMesh-Provider"), hdr.Get("X-LLMesh-Via"); p != tc.provider || via != "eu-1" {
					t.Fatalf("%s: served by %s via %s; want %s via eu-1", tc.model, p, via, tc.provider)
				}
				if at := m.awaitCopy(t, "acme-eu", first.ID, "eu-2", "us-1"); at != "eu-2" {
					t.Fatalf("%s: the eu tenant's copy is on %s", tc.model, at)
				}
				firsts = append(firsts, first)
			}
			switch how {
			case "killed":
				m.nodes["eu-1"].Kill()
			case "drained":
				m.nodes["eu-1"].Drain()
				wait.For(t, 30*time.Second, "eu-1 to drain", func() bool {
					select {
					case <-m.nodes["eu-1"].Done():
						return true
					default:
						return false
					}
				})
			}
			// At once, before gossip may have noticed: retrieves at a
			// node that never held them.
			us1 := regionClient(m.urls["us-1"], euKey)
			for i, tc := range storedCases {
				got, err := us1.Responses.Get(ctx, firsts[i].ID, responses.ResponseGetParams{})
				if err != nil || got.ID != firsts[i].ID || got.OutputText() != firsts[i].OutputText() {
					t.Fatalf("%s: retrieve at us-1 after eu-1 was %s: %v %+v", tc.model, how, err, got)
				}
			}
			// The bridged follow-up is planned through a node of eu-west:
			// once gossip knows eu-1 is gone, not through it.
			m.awaitGone(t, "eu-1", "eu-2", "us-1")
			for i, tc := range storedCases {
				for _, at := range []string{"us-1", "eu-2"} {
					next, hdr := newResponse(t, regionClient(m.urls[at], euKey), responses.ResponseNewParams{Model: tc.model,
						Input: userText("Et alors ?"), PreviousResponseID: openai.String(firsts[i].ID), MaxOutputTokens: openai.Int(20)}, false)
					if p := hdr.Get("X-LLMesh-Provider"); p != tc.provider || next.OutputText() == "" {
						t.Fatalf("%s follow-up at %s: served by %q: %s", tc.model, at, p, next.RawJSON())
					}
					if next.Usage.InputTokens <= firsts[i].Usage.InputTokens {
						t.Errorf("%s follow-up at %s read %d input tokens, the first %d: the context was lost",
							tc.model, at, next.Usage.InputTokens, firsts[i].Usage.InputTokens)
					}
				}
			}
			for i, tc := range storedCases {
				if err := us1.Responses.Delete(ctx, firsts[i].ID); err != nil {
					t.Fatalf("%s: delete at us-1: %v", tc.model, err)
				}
				for _, at := range []string{"us-1", "eu-2"} {
					c := regionClient(m.urls[at], euKey)
					if _, err := c.Responses.Get(ctx, firsts[i].ID, responses.ResponseGetParams{}); !notFound(err) {
						t.Fatalf("%s: retrieve at %s after the delete: %v", tc.model, at, err)
					}
				}
			}
		})
	}
}

// A copy lands only where the tenant's residency allows: the eu
// tenant's on an eu node (whichever node relayed the response, us-1
// included), the us tenant's on the us node; us-1 refuses an eu
// tenant's copy offered to it directly; a delete drops both copies; and
// with no other eu node alive the eu tenant's response gets no copy,
// which is counted, not refused.
func TestStoredResponseCopiesKeepTheirResidency(t *testing.T) {
	m := startCopyMesh(t)
	ctx := context.Background()
	t.Run("ring within the jurisdiction", func(t *testing.T) {
		for i := range 6 {
			for _, from := range []string{"eu-1", "us-1"} {
				model := storedCases[i%2].model
				r, _ := newResponse(t, regionClient(m.urls[from], euKey), responses.ResponseNewParams{Model: model, Input: userText("x"),
					MaxOutputTokens: openai.Int(16)}, false)
				holder := m.awaitCopy(t, "acme-eu", r.ID, "eu-1", "eu-2", "us-1")
				if holder == "us-1" {
					t.Fatalf("the eu tenant's %s, relayed by %s, has its copy on us-1", r.ID, from)
				}
			}
			r, _ := newResponse(t, regionClient(m.urls["eu-1"], usKey), responses.ResponseNewParams{Model: "gpt-4o", Input: userText("x"),
				MaxOutputTokens: openai.Int(16)}, false)
			if holder := m.awaitCopy(t, "acme-us", r.ID, "eu-1", "eu-2", "us-1"); holder != "us-1" {
				t.Fatalf("the us tenant's %s has its copy on %s", r.ID, holder)
			}
		}
		// No copy was offered where it would be refused: the sender's
		// ring holds the rule itself, not only the receiver.
		for name, log := range m.logs {
			for line := range strings.Lines(log.String()) {
				if strings.Contains(line, `"msg":"stored response not copied"`) {
					t.Errorf("%s offered a copy a peer did not keep: %s", name, line)
				}
			}
		}
	})
	t.Run("the receiver checks again", func(t *testing.T) {
		cc, err := grpc.NewClient(m.nodes["us-1"].RPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer cc.Close()
		reply, err := pb.NewMeshClient(cc).Stored(ctx, &pb.StoredRequest{Tenant: "acme-eu", Id: "resp_offered", Op: "keep", Origin: "eu-1",
			Record: []byte(`{"ID":"resp_offered","Provider":"azure-eu","Model":"gpt-4o","Tokens":10}`)})
		if err != nil || reply.Found || reply.Status != http.StatusServiceUnavailable || !strings.Contains(string(reply.Body), "outside residency eu") {
			t.Fatalf("us-1 offered an eu tenant's copy: %v %v", reply, err)
		}
		if held, _ := m.nodes["us-1"].HoldsStored("acme-eu", "resp_offered"); held {
			t.Fatal("us-1 kept it")
		}
	})
	t.Run("delete drops both copies", func(t *testing.T) {
		for _, tc := range storedCases {
			r, _ := newResponse(t, regionClient(m.urls["eu-1"], euKey), responses.ResponseNewParams{Model: tc.model, Input: userText("x"),
				MaxOutputTokens: openai.Int(16)}, false)
			m.awaitCopy(t, "acme-eu", r.ID, "eu-2")
			us1 := regionClient(m.urls["us-1"], euKey)
			if err := us1.Responses.Delete(ctx, r.ID); err != nil {
				t.Fatal(err)
			}
			// (A copy answered before its origin learned where it went is
			// dropped by the origin as the answer arrives: within moments.)
			wait.For(t, 5*time.Second, tc.model+": no node holding it after the delete", func() bool {
				for _, nd := range m.nodes {
					if held, _ := nd.HoldsStored("acme-eu", r.ID); held {
						return false
					}
				}
				return true
			})
		}
	})
	t.Run("no peer the residency allows", func(t *testing.T) {
		m.nodes["eu-2"].Kill()
		m.awaitGone(t, "eu-2", "eu-1")
		before := metricValue(t, m.urls["eu-1"], `llmesh_stored_response_copies_total{outcome="no_peer"}`)
		r, _ := newResponse(t, regionClient(m.urls["eu-1"], euKey), responses.ResponseNewParams{Model: "gpt-4o-mini", Input: userText("x"),
			MaxOutputTokens: openai.Int(16)}, false)
		wait.For(t, 10*time.Second, "the copy counted as having no peer", func() bool {
			return metricValue(t, m.urls["eu-1"], `llmesh_stored_response_copies_total{outcome="no_peer"}`) == before+1
		})
		if held, _ := m.nodes["us-1"].HoldsStored("acme-eu", r.ID); held {
			t.Fatal("us-1 holds the eu tenant's response")
		}
		if held, _ := m.nodes["eu-1"].HoldsStored("acme-eu", r.ID); !held {
			t.Fatal("eu-1 lost its own record")
		}
	})
}

// metricValue is the value of the series named exactly so in url's
// /metrics (labels included), 0 when it is not there.
func metricValue(t *testing.T, url, series string) float64 {
	t.Helper()
	resp := mustGet(t, url+"/metrics")
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatal(err)
			}
			return f
		}
	}
	return 0
}
