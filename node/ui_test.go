package node_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/llmesh/llmesh/node"
	"github.com/llmesh/llmesh/node/views"
	"github.com/llmesh/llmesh/sim/emulator"
)

const (
	uiAdminEnv   = "LLMESH_TEST_UI_ADMIN"
	uiAdminToken = "ui-admin-secret-0123456789"
)

func init() { testEnvKeys[uiAdminEnv] = uiAdminToken }

// dashboardMesh is the three-region mesh with a ledger, probes every
// 300 ms and an admin token on every node: what the dashboard shows.
func dashboardMesh(t *testing.T) *regionsFixture {
	return startRegions(t, regionsUpstreams(emulator.Config{}), func(region string, c *node.Config) {
		c.Node.AdminTokenEnv = uiAdminEnv
		c.Node.Voter, c.Node.BootstrapExpect = true, 3
		c.Node.Raft, c.Node.DataDir = "127.0.0.1:0", t.TempDir()
		c.Probes = node.ProbesSection{Idle: node.Duration(300 * time.Millisecond)}
		c.Outlier.ConsecutiveFailures = 2
		c.Tenants[1].Budget = &node.BudgetSection{USD: 5, Period: "month"}
		// A drained node stays in its grace period for the rest of the
		// test (and its clean-up waits for the grace to end).
		c.Node.Drain = node.DrainSection{Grace: node.Duration(15 * time.Second), Timeout: node.Duration(30 * time.Second)}
	})
}

// signIn posts the admin token to /ui/login and returns a client that
// holds the session cookie.
func signIn(t *testing.T, base, token string) (*http.Client, int) {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar, Timeout: 10 * time.Second}
	resp, err := c.PostForm(base+"/ui/login", url.Values{"token": {token}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return c, resp.StatusCode
}

// A browser signs in to the dashboard with the admin token; the session
// cookie reads every admin endpoint and steers nothing.
func TestDashboardSession(t *testing.T) {
	f := startNode(t, []upstream{{name: "p", kind: "openai"}}, func(c *node.Config) { c.Node.AdminTokenEnv = uiAdminEnv })
	anon := &http.Client{Timeout: 10 * time.Second}
	resp, err := anon.Get(f.url + "/ui/")
	if err != nil {
		t.Fatal(err)
	}
	page := readAll(t, resp.Body)
	if resp.StatusCode != 200 || !strings.Contains(page, `name="token"`) || strings.Contains(page, "app.js") {
		t.Fatalf("without a session /ui/ should be the sign-in form: %d %s", resp.StatusCode, page)
	}
	if _, code := signIn(t, f.url, "wrong"); code != http.StatusUnauthorized {
		t.Fatalf("a wrong token signed in: %d", code)
	}
	c, code := signIn(t, f.url, uiAdminToken)
	if code != 200 { // 303 followed to the dashboard
		t.Fatalf("sign in: %d", code)
	}
	resp, err = c.Get(f.url + "/ui/")
	if err != nil {
		t.Fatal(err)
	}
	if page := readAll(t, resp.Body); !strings.Contains(page, "app.js") || resp.Header.Get("Content-Security-Policy") == "" {
		t.Fatalf("dashboard: %s", page)
	}
	for _, path := range []string{"/v1/mesh/status", "/v1/mesh/members", "/v1/mesh/providers", "/v1/mesh/decisions", "/v1/mesh/observe", "/ui/app.js", "/ui/mesh.js"} {
		resp, err := c.Get(f.url + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("%s with the session: %d", path, resp.StatusCode)
		}
		if resp, _ := anon.Get(f.url + path); resp != nil && !strings.HasPrefix(path, "/ui/") && resp.StatusCode != 401 {
			t.Fatalf("%s without a session: %d", path, resp.StatusCode)
		}
	}
	// The session reads only: draining takes the token itself.
	resp, err = c.Post(f.url+"/v1/mesh/drain", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 401 || f.node.Draining() {
		t.Fatalf("a session cookie drained the node: %d", resp.StatusCode)
	}
	// A cookie forged without the token, or with a moved expiry, is no session.
	u, _ := url.Parse(f.url)
	for _, v := range []string{"4102444800.00", "4102444800." + strings.Repeat("ab", 32), ""} {
		forged, _ := cookiejar.New(nil)
		forged.SetCookies(u, []*http.Cookie{{Name: "llmesh_ui", Value: v}})
		resp, err := (&http.Client{Jar: forged}).Get(f.url + "/v1/mesh/status")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 401 {
			t.Fatalf("forged cookie %q: %d", v, resp.StatusCode)
		}
	}
	// Signing out ends the session in the browser.
	resp, err = c.Post(f.url+"/ui/logout", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp, _ := c.Get(f.url + "/v1/mesh/status"); resp == nil || resp.StatusCode != 401 {
		t.Fatal("still signed in after signing out")
	}
}

// chromium returns the path of a Chromium or Chrome binary, or "".
func chromium() string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "headless_shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// The dashboard in headless Chromium against a three-node mesh: after
// signing in it shows the three nodes and their regions, the Raft leader
// and recent decisions; a provider taken down shows as failing within
// seconds, seen from another region through gossip; a drained node shows
// as draining. A screenshot is kept as the test's artifact.
func TestDashboardInChromium(t *testing.T) {
	skipWithoutChromium(t)
	f := dashboardMesh(t)
	// One forwarded request, so that the decisions have a row.
	if resp := postAs(t, f.urls["eu"], euKey, hello); resp.StatusCode != 200 {
		t.Fatalf("request: %s", resp.Status)
	}
	br := newBrowser(t)
	run, until, text := br.run, br.until, br.text
	page := f.urls["eu"] + "/ui/?every=0.5"

	run("a wrong token is refused", 30*time.Second,
		chromedp.Navigate(page),
		chromedp.WaitVisible(`input[name=token]`),
		chromedp.SendKeys(`input[name=token]`, "not-the-token"),
		chromedp.Submit(`input[name=token]`),
		until(`document.querySelector("p.error")?.textContent.includes("not this node's admin token")`))
	run("the three nodes and their regions", 30*time.Second,
		chromedp.SendKeys(`input[name=token]`, uiAdminToken),
		chromedp.Submit(`input[name=token]`),
		chromedp.WaitVisible(`tr[data-node="eu-1"][data-region="eu-west"][data-state="alive"]`),
		chromedp.WaitVisible(`tr[data-node="us-1"][data-region="us-east"][data-state="alive"]`),
		chromedp.WaitVisible(`tr[data-node="ap-1"][data-region="ap-south"][data-state="alive"]`),
		chromedp.WaitVisible(`tr[data-provider="gpu-ap"]`),
		chromedp.WaitVisible(`tr[data-request]`),
		chromedp.WaitVisible(`tr[data-tenant="acme-eu"]`))
	run("the Raft leader", 20*time.Second, until(`/leader: (?!none)/.test(document.querySelector("#raft").textContent)`))
	t.Logf("%s", text(`#raft`))

	// The map: three regions holding their nodes and providers. Traffic
	// the us node forwards to eu-1 draws an arrow between them, and the
	// charts (the whole mesh's, gathered by eu-1 over gRPC) have data, as
	// do the decisions of us-1 shown on eu-1's page.
	run("the mesh map", 20*time.Second,
		until(`document.querySelectorAll("#map g.region").length === 3`),
		chromedp.WaitVisible(`#map g.region[data-region="ap-south"] g.node[data-node="ap-1"][data-state="alive"]`),
		chromedp.WaitVisible(`#map g.region[data-region="eu-west"] g.provider[data-provider="gpu-eu"]`))
	for i := range 5 {
		if resp := postAs(t, f.urls["us"], euKey, hello, "X-LLMesh-Tags", []string{"team:dash", "team:dash,app:ui"}[i%2]); resp.StatusCode != 200 {
			t.Fatalf("eu tenant at us: %s", resp.Status)
		}
	}
	run("forwarding on the map, charts with data, the mesh's decisions", 20*time.Second,
		chromedp.WaitVisible(`#map g.edge[data-from="us-1"][data-to="eu-1"]`),
		until(`Number(document.querySelector("#chart-requests")?.dataset.points) > 0`),
		until(`Number(document.querySelector("#chart-cost")?.dataset.points) > 0`),
		chromedp.WaitVisible(`#chart-latency path[data-key="gpu-eu"]`),
		chromedp.WaitVisible(`tr[data-request][data-at="us-1"]`))
	t.Logf("map: %s; requests chart: %s points", text(`#map-summary`), eval[string](br, `document.querySelector("#chart-requests").dataset.points`))

	// Spend over time, from the ledger: bars by key, then by tag set
	// once the operator picks it, with a row for each set.
	run("spend by key, drawn", 20*time.Second,
		until(`Number(document.querySelector("#chart-spend")?.dataset.bars) > 0`),
		chromedp.WaitVisible(`#chart-spend rect[data-key^="acme-eu: "]`),
		chromedp.WaitVisible(`tr[data-spend^="acme-eu/"]`))
	run("spend by tag set", 20*time.Second,
		chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			_, err := chromedp.Evaluate[bool](`(() => { const s = document.querySelector("#spend-by"); s.value = "tag";
				return s.dispatchEvent(new Event("change")); })()`)(ctx, tg)
			return err
		}),
		chromedp.WaitVisible(`#chart-spend rect[data-key="acme-eu: team:dash"]`),
		chromedp.WaitVisible(`#chart-spend rect[data-key="acme-eu: app:ui,team:dash"]`),
		chromedp.WaitVisible(`tr[data-spend="acme-eu/team:dash"]`),
		until(`document.querySelector("#spend-summary").textContent.includes("counts once, under its set of tags")`))
	t.Logf("spend: %s; %s bars", text(`#spend-summary`), eval[string](br, `document.querySelector("#chart-spend").dataset.bars`))

	// gpu-ap is only reachable in ap-south: ap-1's probes find it down,
	// and eu-1's dashboard learns of it through gossip.
	if err := f.emus["gpu-ap"].SetMode(emulator.ModeRefuse); err != nil {
		t.Fatal(err)
	}
	took := run("gpu-ap to show as failing", 20*time.Second,
		chromedp.WaitVisible(`tr[data-provider="gpu-ap"][data-health="failing"]`))
	t.Logf("gpu-ap showed as failing %v after it went down", took.Round(10*time.Millisecond))

	f.nodes["us"].Drain()
	took = run("us-1 to show as draining", 20*time.Second,
		chromedp.WaitVisible(`tr[data-node="us-1"][data-state="draining"]`))
	t.Logf("us-1 showed as draining %v after its drain began", took.Round(10*time.Millisecond))

	// The filter narrows hundreds of rows to what the operator types.
	run("the filter", 10*time.Second,
		chromedp.SendKeys(`#filter`, "gpu-ap"),
		chromedp.WaitNotPresent(`tr[data-provider="azure-eu"]`),
		chromedp.WaitVisible(`tr[data-provider="gpu-ap"]`),
		chromedp.SendKeys(`#filter`, strings.Repeat(kb.Backspace, len("gpu-ap"))),
		chromedp.WaitVisible(`tr[data-provider="azure-eu"]`))
	br.shot("dashboard")
}

func skipWithoutChromium(t *testing.T) {
	if chromium() == "" {
		t.Skip("no Chromium on this machine: install Debian's chromium package (.ci/run does) to run the dashboard's browser tests")
	}
}

// browser is a headless Chromium tab for one test.
type browser struct {
	t   *testing.T
	ctx context.Context
}

func newBrowser(t *testing.T) *browser {
	t.Helper()
	alloc, cancel := chromedp.NewExecAllocator(context.Background(), append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium()), chromedp.NoSandbox, chromedp.WindowSize(1400, 1200),
		chromedp.Flag("disable-dev-shm-usage", true))...)
	t.Cleanup(cancel)
	ctx, cancel := chromedp.NewContext(alloc)
	t.Cleanup(cancel)
	ctx, cancel = context.WithTimeout(ctx, 2*time.Minute)
	t.Cleanup(cancel)
	// The browser lives as long as the context of its first Run: start
	// it on the test's, not on one step's.
	if _, err := chromedp.Run(ctx, chromedp.Navigate("about:blank")); err != nil {
		t.Fatalf("starting %s: %v", chromium(), err)
	}
	return &browser{t: t, ctx: ctx}
}

// run runs steps within a bound of their own and returns how long they
// took; on failure the page as it was is kept too.
func (b *browser) run(what string, within time.Duration, steps ...chromedp.Action[chromedp.Void]) time.Duration {
	b.t.Helper()
	start := time.Now()
	c, cancel := context.WithTimeout(b.ctx, within)
	defer cancel()
	if _, err := chromedp.Run(c, chromedp.Steps(steps...)); err != nil {
		b.shot("failed")
		b.t.Fatalf("%s: %v", what, err)
	}
	return time.Since(start)
}

// text returns the text of the first element sel matches.
func (b *browser) text(sel string) string {
	b.t.Helper()
	return eval[string](b, fmt.Sprintf(`document.querySelector(%q).textContent`, sel))
}

// eval evaluates a JavaScript expression on the page.
func eval[T any](b *browser, expr string) T {
	b.t.Helper()
	c, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	v, err := chromedp.Run(c, chromedp.Evaluate[T](expr))
	if err != nil {
		b.t.Fatalf("%s: %v", expr, err)
	}
	return v
}

// until waits for a JavaScript predicate to hold on the page. A poll does
// not survive a navigation (a form posted): it starts again on the new
// page.
func (b *browser) until(predicate string) chromedp.Action[chromedp.Void] {
	poll := chromedp.Poll[bool](predicate, chromedp.WithPollingInterval(50*time.Millisecond))
	return chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		for {
			_, err := poll(ctx, tg)
			if err == nil {
				return nil
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("%w (last poll: %v)", ctx.Err(), err)
			case <-time.After(50 * time.Millisecond):
			}
		}
	})
}

// shot saves a full-page screenshot as a test artifact: in the test's
// artifact directory (go test -artifacts keeps it) and, when
// LLMESH_ARTIFACTS names a directory (.ci/run sets it), there too.
func (b *browser) shot(name string) {
	t := b.t
	png, err := chromedp.Run(b.ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Logf("screenshot: %v", err)
		return
	}
	dirs := []string{t.ArtifactDir()}
	if d := os.Getenv("LLMESH_ARTIFACTS"); d != "" {
		dirs = append(dirs, d)
	}
	for _, d := range dirs {
		p := filepath.Join(d, "dashboard-"+name+".png")
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot: %s (%d bytes)", p, len(png))
	}
}

// GET /v1/mesh/decisions lists the node's last decisions, newest first,
// each with its explanation: the route taken, or the error answered.
func TestRecentDecisions(t *testing.T) {
	f := startNode(t, []upstream{{name: "cheap", kind: "openai", in: 0.1, out: 0.1}, {name: "dear", kind: "openai", in: 1, out: 1}}, nil)
	f.post(hello, "X-Request-Id", "d-1")
	f.post(`{"model":"nope","messages":[{"role":"user","content":"x"}]}`, "X-Request-Id", "d-2")
	var doc struct {
		Node      string
		Decisions []views.Decision
	}
	if code := getJSON(t, f.url+"/v1/mesh/decisions?limit=2", "", &doc); code != 200 || len(doc.Decisions) != 2 {
		t.Fatalf("%d: %+v", code, doc)
	}
	refused, ok := doc.Decisions[0], doc.Decisions[1]
	if refused.RequestID != "d-2" || refused.Status != 404 || refused.Outcome != "refused" || !strings.HasPrefix(refused.Why, "model_not_found: ") {
		t.Fatalf("refusal %+v", refused)
	}
	if ok.RequestID != "d-1" || ok.Provider != "cheap" || ok.Outcome != "ok" || ok.Tenant != "t1" || len(ok.Attempts) != 1 ||
		!strings.Contains(ok.Why, "chose cheap") || ok.CostUSD <= 0 {
		t.Fatalf("decision %+v", ok)
	}
	if code := getJSON(t, f.url+"/v1/mesh/decisions?limit=0", "", &doc); code != 400 {
		t.Fatalf("limit=0: %d", code)
	}
}

// The dashboard stays usable with hundreds of providers: 400 of them in
// two regions all appear, the time to draw them is reported, and the
// filter narrows them to one as the operator types.
func TestDashboardWithHundredsOfProviders(t *testing.T) {
	skipWithoutChromium(t)
	const many = 400
	f := startNode(t, []upstream{{name: "p", kind: "openai"}}, func(c *node.Config) {
		one := c.Providers[0]
		c.Providers = nil
		for i := range many {
			p := one
			p.Name, p.Region = fmt.Sprintf("p-%03d", i), []string{"eu-west", "us-east"}[i%2]
			c.Providers = append(c.Providers, p)
		}
	})
	for range 10 {
		if resp := f.post(hello); resp.StatusCode != 200 {
			t.Fatal(resp.Status)
		}
	}
	br := newBrowser(t)
	// Without an admin token the dashboard answers loopback, as the admin API does.
	took := br.run("every provider", 30*time.Second,
		chromedp.Navigate(f.url+"/ui/"),
		chromedp.WaitVisible(fmt.Sprintf(`tr[data-provider="p-%03d"]`, many-1)))
	if n := eval[int](br, `document.querySelectorAll("tr[data-provider]").length`); n != many {
		t.Fatalf("%d provider rows, want %d", n, many)
	}
	t.Logf("%d providers: page shown in %v, drawn in %.1f ms", many, took.Round(time.Millisecond), eval[float64](br, `window.llmeshRenderMs`))
	took = br.run("the filter", 10*time.Second,
		chromedp.SendKeys(`#filter`, "p-123"),
		br.until(`document.querySelectorAll("tr[data-provider]").length === 1`))
	t.Logf("filtered to one in %v", took.Round(time.Millisecond))
	br.shot("hundreds")
}
