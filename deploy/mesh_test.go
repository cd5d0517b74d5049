package deploy_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/llmesh/llmesh/sim/harness/wait"
	"github.com/llmesh/llmesh/sim/loadtest"
)

// The compose mesh as the tests drive it: a fixed project name (a run
// that crashed is cleaned up by the next), the image built here, and the
// addresses compose gives the nodes. The host reaches every container
// network directly, as another host on those networks would.
const (
	project    = "llmeshtest"
	adminToken = "compose-admin-token"
	meshNet    = project + "_mesh"
	euLinkIP   = "10.247.1.11" // eu-1 on its private network to gpu-eu
	// gpt-4o-mini's price in the compose configs, $ per token (the load's
	// completions dominate; prompts are priced as completions: an upper
	// bound of what the tenant was served).
	miniPerToken = 0.60 / 1e6
)

// testImage is the image the mesh runs.
var testImage = "llmesh:test"

var meshIPs = map[string]string{"eu-1": "10.247.0.11", "us-1": "10.247.0.12", "ap-1": "10.247.0.13"}

var tenants = map[string]string{
	"acme":    "sk-acme-compose-0000000000000001",  // residency eu
	"globex":  "sk-globex-compose-000000000000002", // residency us
	"initech": "sk-initech-compose-00000000000003", // $0.002 in all
}

type composeMesh struct {
	t *testing.T
}

// TestComposeMesh starts the compose mesh from the image built here and
// takes it through what operators do and what networks do to it: routing
// across regions, a region cut off and healed, the Raft leader killed, a
// node stopped. Each part restores the mesh it found; the mesh and its
// volumes are removed at the end.
func TestComposeMesh(t *testing.T) {
	if testing.Short() {
		t.Skip("the Docker mesh is skipped in -short mode")
	}
	requireDocker(t)
	buildImage(t)
	m := &composeMesh{t: t}
	m.compose("down", "-v", "--timeout", "5") // what a crashed run left
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := m.composeOut("logs", "--no-color", "--tail", "60", "eu-1", "us-1", "ap-1")
			t.Logf("node logs:\n%s", out)
		}
		m.compose("down", "-v", "--timeout", "10")
	})
	m.compose("up", "-d")
	m.awaitMesh(90 * time.Second)

	t.Run("routing across regions", m.routing)
	t.Run("a node stopped drains", m.stopDrains)
	t.Run("a region cut off keeps serving and heals", m.partition)
	t.Run("a node frozen and thawed", m.frozen)
	t.Run("the Raft leader killed", m.leaderKilled)
}

// requireDocker skips the test where no Docker engine answers.
func requireDocker(t *testing.T) {
	t.Helper()
	for _, tool := range []string{"docker", "docker-compose"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not installed: the multi-host tests need a Docker engine and Compose (.ci/run starts them where it can)", tool)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "docker", "info", "--format", "{{.ServerVersion}}").CombinedOutput(); err != nil {
		t.Skipf("no Docker engine answers (%v: %s): the multi-host tests need one (.ci/run starts it where it can)", err, bytes.TrimSpace(out))
	}
}

var buildOnce = sync.OnceValues(func() ([]byte, error) {
	cmd := exec.Command("docker/build.sh", testImage)
	return cmd.CombinedOutput()
})

// buildImage builds the image FROM scratch with deploy/docker/build.sh,
// unless LLMESH_TEST_IMAGE names one built from this tree already (.ci/run
// builds it before the tests, so that the build does not compete with
// other packages' tests for the CPU).
func buildImage(t *testing.T) {
	t.Helper()
	if img := os.Getenv("LLMESH_TEST_IMAGE"); img != "" {
		testImage = img
		return
	}
	if out, err := buildOnce(); err != nil {
		t.Fatalf("deploy/docker/build.sh: %v\n%s", err, out)
	}
}

func (m *composeMesh) composeOut(args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "docker-compose", append([]string{"-f", "compose/docker-compose.yml", "-p", project}, args...)...)
	cmd.Env = append(os.Environ(), "LLMESH_IMAGE="+testImage)
	return cmd.CombinedOutput()
}

func (m *composeMesh) compose(args ...string) {
	m.t.Helper()
	if out, err := m.composeOut(args...); err != nil {
		m.t.Fatalf("docker-compose %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

func (m *composeMesh) docker(args ...string) string {
	m.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "docker", args...).CombinedOutput()
	if err != nil {
		m.t.Fatalf("docker %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// container returns the ID of a service's container, running or not,
// whatever the Compose version names it.
func (m *composeMesh) container(service string) string {
	m.t.Helper()
	out, err := m.composeOut("ps", "-q", service)
	id := strings.TrimSpace(string(out))
	if err != nil || id == "" || strings.Contains(id, "\n") {
		m.t.Fatalf("the container of %s: %v %q", service, err, out)
	}
	return id
}

func nodeURL(node string) string { return "http://" + meshIPs[node] + ":8080" }

// status is what a node's /v1/mesh/status says, in part.
type status struct {
	Node    string
	Phase   string
	Ready   bool
	Raft    string
	Leader  string
	Members map[string]int
}

func getJSON(url string, v any) error {
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	req.Header.Set("Authorization", "Bearer "+adminToken)
	c := &http.Client{Timeout: 3 * time.Second}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

func nodeStatus(node string) (status, error) {
	var s status
	err := getJSON(nodeURL(node)+"/v1/mesh/status", &s)
	return s, err
}

// eventually polls cond until it holds or within passes.
func (m *composeMesh) eventually(within time.Duration, what string, cond func() (bool, string)) {
	m.t.Helper()
	wait.Every(250*time.Millisecond).Until(m.t, within, what, func() error {
		if ok, why := cond(); !ok {
			return errors.New(why)
		}
		return nil
	})
}

// awaitMesh waits until the nodes given (default: all) are ready, see
// three alive members and agree on a leader.
func (m *composeMesh) awaitMesh(within time.Duration, nodes ...string) {
	m.t.Helper()
	if len(nodes) == 0 {
		nodes = []string{"eu-1", "us-1", "ap-1"}
	}
	m.eventually(within, "the mesh to form", func() (bool, string) {
		leader := ""
		for _, n := range nodes {
			s, err := nodeStatus(n)
			if err != nil {
				return false, err.Error()
			}
			if !s.Ready || s.Members["alive"] != 3 || s.Leader == "" || (leader != "" && s.Leader != leader) {
				return false, fmt.Sprintf("%s: %+v", n, s)
			}
			leader = s.Leader
		}
		return true, ""
	})
}

func chatClient(base, tenant string) openai.Client {
	return openai.NewClient(option.WithBaseURL(base+"/v1"), option.WithAPIKey(tenants[tenant]),
		option.WithMaxRetries(0), option.WithRequestTimeout(10*time.Second))
}

// ask sends one chat completion and returns the answer's headers.
func ask(base, tenant, model string, maxTokens int64) (http.Header, *openai.ChatCompletion, error) {
	var resp *http.Response
	c := chatClient(base, tenant)
	cc, err := c.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
		Model: model, MaxTokens: openai.Int(maxTokens),
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Where does my data go?")},
	}, option.WithResponseInto(&resp))
	if resp == nil {
		return nil, cc, err
	}
	return resp.Header, cc, err
}

func (m *composeMesh) routing(t *testing.T) {
	m = &composeMesh{t: t} // its helpers fail this subtest
	// An eu tenant at the us node: the eu GPU cluster, which only eu-1
	// reaches, via eu-1.
	h, cc, err := ask(nodeURL("us-1"), "acme", "llama-3-8b", 8)
	if err != nil {
		t.Fatal(err)
	}
	if h.Get("X-LLMesh-Node") != "us-1" || h.Get("X-LLMesh-Provider") != "gpu-eu" || h.Get("X-LLMesh-Via") != "eu-1" || cc.Usage.CompletionTokens != 8 {
		t.Fatalf("acme at us-1: node %q provider %q via %q, usage %+v", h.Get("X-LLMesh-Node"), h.Get("X-LLMesh-Provider"), h.Get("X-LLMesh-Via"), cc.Usage)
	}
	// A us tenant at the eu node: the us provider.
	if h, _, err = ask(nodeURL("eu-1"), "globex", "gpt-4o-mini", 4); err != nil || h.Get("X-LLMesh-Provider") != "openai-us" {
		t.Fatalf("globex at eu-1: %v, provider %q", err, h.Get("X-LLMesh-Provider"))
	}
	// An eu tenant's stream at the ap node: an eu provider, never the us
	// one, whole.
	var resp *http.Response
	c := chatClient(nodeURL("ap-1"), "acme")
	s := c.Chat.Completions.NewStreaming(context.Background(), openai.ChatCompletionNewParams{
		Model: "gpt-4o-mini", MaxTokens: openai.Int(24),
		Messages:      []openai.ChatCompletionMessageParamUnion{openai.UserMessage("stream it")},
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
	}, option.WithResponseInto(&resp))
	var acc openai.ChatCompletionAccumulator
	for s.Next() {
		acc.AddChunk(s.Current())
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	if p := resp.Header.Get("X-LLMesh-Provider"); p != "azure-eu" || acc.Usage.CompletionTokens != 24 {
		t.Fatalf("acme's stream at ap-1: provider %q, usage %+v", p, acc.Usage)
	}
}

// partition cuts eu-1 off the mesh network (it keeps its link to its GPU
// cluster), drives traffic on both sides, heals, and checks the budget.
func (m *composeMesh) partition(t *testing.T) {
	m = &composeMesh{t: t} // its helpers fail this subtest
	m.docker("network", "disconnect", meshNet, m.container("eu-1"))
	healed := false
	heal := func() {
		if !healed {
			healed = true
			m.docker("network", "connect", "--ip", meshIPs["eu-1"], meshNet, m.container("eu-1"))
		}
	}
	t.Cleanup(heal)
	var l cutLoad
	l.run("http://" + euLinkIP + ":8080")
	if len(l.wrong) > 0 {
		t.Fatalf("the eu tenant's data left the eu: %v", l.wrong)
	}
	if l.asked < 20 || l.okAtEU < l.asked*9/10 {
		t.Fatalf("cut off, eu-1 served its eu tenant %d times of %d", l.okAtEU, l.asked)
	}
	t.Logf("cut off: eu-1 served acme %d/%d from gpu-eu; the other side served acme %d times, all from eu providers; initech served $%.6f, refused %d×402",
		l.okAtEU, l.asked, l.farOK, l.served, l.refused402)
	t.Logf("initech refused %d×503 admission_timeout while the rest of its budget was escrow on the other side", l.heldElsewhere)

	heal()
	m.awaitMesh(90 * time.Second)
	m.eventually(30*time.Second, "acme at us-1 to reach gpu-eu via eu-1 again", func() (bool, string) {
		h, _, err := ask(nodeURL("us-1"), "acme", "llama-3-8b", 4)
		if err != nil {
			return false, err.Error()
		}
		return h.Get("X-LLMesh-Via") == "eu-1", h.Get("X-LLMesh-Route")
	})
	l.checkBudget(t)
}

// cutLoad is the traffic of the partition test and what became of it.
type cutLoad struct {
	mu            sync.Mutex
	served        float64 // what the capped tenant was served, at most
	refused402    int
	heldElsewhere int // 503 admission_timeout: what is left is escrow of a node cut off
	okAtEU, asked int
	farOK         int
	wrong         []string
}

// run sends, for 12 s, three clients at once: eu-1's eu tenant at eu-1
// (at euLink), which still reaches its GPU cluster and holds leases; the
// same tenant on the other side, which may only be served by eu
// providers it reaches, or refused (a forward to eu-1 hangs until gRPC's
// keepalive or the first-byte timeout gives up on it: each request waits
// at most 10 s); and the capped tenant everywhere, spending its budget.
func (l *cutLoad) run(euLink string) {
	var wg sync.WaitGroup
	end := time.Now().Add(12 * time.Second)
	every := func(d time.Duration, f func(i int)) {
		wg.Go(func() {
			for i := 0; time.Now().Before(end); i++ {
				f(i)
				time.Sleep(d) // pacing: a client's think time
			}
		})
	}
	every(200*time.Millisecond, func(int) {
		h, _, err := ask(euLink, "acme", "llama-3-8b", 4)
		l.mu.Lock()
		defer l.mu.Unlock()
		l.asked++
		if err == nil && h.Get("X-LLMesh-Provider") == "gpu-eu" {
			l.okAtEU++
		}
	})
	for _, n := range []string{"us-1", "ap-1"} {
		every(200*time.Millisecond, func(i int) {
			model := []string{"llama-3-8b", "gpt-4o-mini"}[i%2]
			h, _, err := ask(nodeURL(n), "acme", model, 4)
			l.mu.Lock()
			defer l.mu.Unlock()
			if err != nil {
				return
			}
			l.farOK++
			if p := h.Get("X-LLMesh-Provider"); p != "gpu-eu" && p != "azure-eu" {
				l.wrong = append(l.wrong, fmt.Sprintf("%s %s: %s", n, model, p))
			}
		})
	}
	for _, base := range []string{euLink, nodeURL("us-1"), nodeURL("ap-1")} {
		for range 2 {
			every(50*time.Millisecond, func(int) { l.spend(base) })
		}
	}
	wg.Wait()
}

// spend sends one of the capped tenant's requests to base: 300 tokens,
// 2 s at the emulators' 150 a second: about $0.0002 each, so the $0.002
// budget runs out.
func (l *cutLoad) spend(base string) {
	_, cc, err := ask(base, "initech", "gpt-4o-mini", 300)
	l.mu.Lock()
	defer l.mu.Unlock()
	var apiErr *openai.Error
	switch {
	case err == nil:
		l.served += float64(cc.Usage.PromptTokens+cc.Usage.CompletionTokens) * miniPerToken
	case errors.As(err, &apiErr) && apiErr.StatusCode == http.StatusPaymentRequired:
		l.refused402++
	case errors.As(err, &apiErr) && apiErr.StatusCode == http.StatusServiceUnavailable && apiErr.Code == "admission_timeout":
		l.heldElsewhere++
	}
}

// checkBudget checks the capped tenant's budget once the cut is healed:
// never overspent, by the ledger or by what the client was served.
func (l *cutLoad) checkBudget(t *testing.T) {
	var doc struct {
		Budgets []struct {
			Tenant       string
			LimitUSD     float64 `json:"limit_usd"`
			SettledUSD   float64 `json:"settled_usd"`
			ReservedUSD  float64 `json:"reserved_usd"`
			OverspendUSD float64 `json:"overspend_usd"`
		}
	}
	if err := getJSON(nodeURL("us-1")+"/v1/mesh/budgets", &doc); err != nil {
		t.Fatal(err)
	}
	for _, b := range doc.Budgets {
		if b.Tenant != "initech" {
			continue
		}
		t.Logf("initech: limit $%.6f, settled $%.6f, overspend $%.6f; served $%.6f", b.LimitUSD, b.SettledUSD, b.OverspendUSD, l.served)
		if b.OverspendUSD != 0 || b.SettledUSD > b.LimitUSD+1e-9 || l.served > b.LimitUSD+1e-9 {
			t.Fatalf("the budget was overspent: %+v, served $%.6f", b, l.served)
		}
		// Pressed: spent to 402, or what is left is escrow on the other
		// side of the cut (it stays that node's until its lease expires:
		// the side without it waits for it, then gets 503
		// admission_timeout).
		if l.refused402 == 0 && l.heldElsewhere == 0 {
			t.Fatalf("the capped tenant was never refused (%+v): the test did not press its budget", b)
		}
		return
	}
	t.Fatalf("no budget for initech in %+v", doc)
}

// frozen freezes a node's container (docker pause: every process of it
// stopped, as SIGSTOP would) under load for longer than a Raft election,
// then thaws it: requests at the other nodes go on being served, the
// thawed node serves again, and no budget is overspent.
func (m *composeMesh) frozen(t *testing.T) {
	m = &composeMesh{t: t} // its helpers fail this subtest
	const victim = "ap-1"
	b, stop := runLoad(t)
	time.Sleep(2 * time.Second) // load before the freeze, to see it flow
	paused := time.Now()
	m.docker("pause", m.container(victim))
	thawed := false
	t.Cleanup(func() {
		if !thawed {
			m.docker("unpause", m.container(victim))
		}
	})
	time.Sleep(4 * time.Second) // the freeze lasts longer than a Raft election
	m.docker("unpause", m.container(victim))
	thawed = true
	m.awaitMesh(90 * time.Second)
	time.Sleep(2 * time.Second) // traffic goes on with the node back
	stopLoad(t, b, stop, victim, paused, "frozen")
	var doc struct {
		Budgets []struct {
			Tenant       string
			LimitUSD     float64 `json:"limit_usd"`
			SettledUSD   float64 `json:"settled_usd"`
			OverspendUSD float64 `json:"overspend_usd"`
		}
	}
	m.eventually(30*time.Second, "the books", func() (bool, string) {
		err := getJSON(nodeURL("us-1")+"/v1/mesh/budgets", &doc)
		return err == nil && len(doc.Budgets) > 0, fmt.Sprint(err)
	})
	for _, bk := range doc.Budgets {
		if bk.OverspendUSD != 0 || bk.SettledUSD > bk.LimitUSD+1e-9 {
			t.Fatalf("a budget was overspent after the freeze: %+v", bk)
		}
	}
}

// stopLoad stops the load and fails t when more requests failed than
// were in flight on victim from since on, while it was what (killed,
// frozen).
func stopLoad(t *testing.T, b *loadtest.Balancer, stop func() *loadtest.Report, victim string, since time.Time, what string) *loadtest.Report {
	t.Helper()
	rep := stop()
	inflight := b.InFlightDuring(victim, since, time.Now())
	t.Logf("load: %s; %d in flight on %s while it was %s", rep, inflight, victim, what)
	if len(rep.Failures) > inflight {
		f, _ := rep.FirstFailures()
		t.Fatalf("%d requests failed, more than the %d in flight on %s while it was %s: %q", len(rep.Failures), inflight, victim, what, f)
	}
	return rep
}

// runLoad sends load over a balancer in front of the three nodes until
// stop is called, which returns the report.
func runLoad(t *testing.T) (*loadtest.Balancer, func() *loadtest.Report) {
	b := loadtest.NewBalancer()
	for n := range meshIPs {
		b.Set(n, nodeURL(n))
	}
	if !b.AwaitReady(3, 30*time.Second) {
		b.Close()
		t.Fatal("the balancer does not see three ready nodes")
	}
	ctx, cancel := context.WithCancel(context.Background())
	out := make(chan *loadtest.Report, 1)
	load := []loadtest.Tenant{{Name: "acme", Key: tenants["acme"]}, {Name: "globex", Key: tenants["globex"]}}
	go func() { out <- loadtest.Run(ctx, b, load, loadtest.Config{Model: "gpt-4o-mini", RPS: 12}) }()
	return b, func() *loadtest.Report {
		cancel()
		rep := <-out
		b.Close()
		return rep
	}
}

// leaderKilled kills the Raft leader's container under load: the others
// elect a new leader, and only requests in flight on the killed node
// fail.
func (m *composeMesh) leaderKilled(t *testing.T) {
	m = &composeMesh{t: t} // its helpers fail this subtest
	s, err := nodeStatus("us-1")
	if err != nil {
		t.Fatal(err)
	}
	leader := s.Leader
	b, stop := runLoad(t)
	time.Sleep(2 * time.Second) // load before the kill, to see it flow
	killed := time.Now()
	m.docker("kill", m.container(leader))
	restarted := false
	t.Cleanup(func() {
		if !restarted {
			m.docker("start", m.container(leader))
		}
	})
	var others []string
	for n := range meshIPs {
		if n != leader {
			others = append(others, n)
		}
	}
	m.eventually(30*time.Second, "a new leader", func() (bool, string) {
		for _, n := range others {
			s, err := nodeStatus(n)
			if err != nil || s.Leader == "" || s.Leader == leader {
				return false, fmt.Sprintf("%s: %+v %v", n, s, err)
			}
		}
		return true, ""
	})
	s, _ = nodeStatus(others[0])
	t.Logf("new leader %s after %v", s.Leader, time.Since(killed).Round(time.Millisecond))
	time.Sleep(3 * time.Second) // traffic goes on under the new leader
	rep := stopLoad(t, b, stop, leader, killed, "killed")
	if rep.OK < rep.Sent/2 {
		t.Fatalf("only %d of %d answered", rep.OK, rep.Sent)
	}
	m.docker("start", m.container(leader))
	restarted = true
	m.awaitMesh(90 * time.Second)
}

// stopDrains stops a node's container (SIGTERM) under load: it drains,
// and no request fails or is cut.
func (m *composeMesh) stopDrains(t *testing.T) {
	m = &composeMesh{t: t} // its helpers fail this subtest
	const victim = "us-1"
	_, stop := runLoad(t)
	time.Sleep(2 * time.Second) // load before the stop, to see it flow
	started := time.Now()
	m.docker("stop", "-t", "45", m.container(victim))
	t.Logf("docker stop took %v", time.Since(started).Round(time.Millisecond))
	time.Sleep(2 * time.Second) // load goes on without the node
	rep := stop()
	defer func() {
		m.docker("start", m.container(victim))
		m.awaitMesh(90 * time.Second)
	}()
	t.Logf("load: %s", rep)
	if code := m.docker("inspect", "-f", "{{.State.ExitCode}}", m.container(victim)); code != "0" {
		t.Fatalf("%s exited %s, want 0 after its drain", victim, code)
	}
	if len(rep.Failures) > 0 || len(rep.Truncated) > 0 {
		f, tr := rep.FirstFailures()
		t.Fatalf("failed: %q; truncated: %q", f, tr)
	}
	if rep.ByNode[victim] == 0 {
		t.Fatalf("%s served nothing before it stopped: %v", victim, rep.ByNode)
	}
}
