package soak_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llmesh/llmesh/node"
	"github.com/llmesh/llmesh/sim/harness"
)

// outcome is one request's answer, as the driver saw it.
type outcome struct {
	at     time.Time // sent
	node   int
	status int
	body   string
	retry  string // Retry-After
}

// keyLoad sends user's requests with key at rate a second to each of
// urls until ctx ends, and returns their outcomes, in the order sent.
func keyLoad(ctx context.Context, t *testing.T, urls []string, key, user string, rate float64) func() []outcome {
	var mu sync.Mutex
	var out []outcome
	var wg sync.WaitGroup
	body := `{"model":"gpt-4o-mini","max_tokens":16,"user":"` + user + `","messages":[{"role":"user","content":"hello"}]}`
	for i, u := range urls {
		every(ctx, &wg, rate, func() {
			o := outcome{at: time.Now(), node: i}
			req, _ := http.NewRequest(http.MethodPost, u+"/v1/chat/completions", strings.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+key)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			o.status, o.body, o.retry = resp.StatusCode, string(b), resp.Header.Get("Retry-After")
			mu.Lock()
			out = append(out, o)
			mu.Unlock()
		})
	}
	return func() []outcome {
		wg.Wait()
		slices.SortFunc(out, func(a, b outcome) int { return a.at.Compare(b.at) })
		return out
	}
}

// driveKeyRate starts three voters in front of a recorder, with tenant
// t1 and two keys: limited (limits.rpm from the file) and free. For d it
// drives the limited key at rate and the free key at half a request a
// second through each node at once, then checks the run (checkKeyRate)
// and returns the mesh.
func driveKeyRate(t *testing.T, rpm int, d time.Duration, rate float64) *mesh {
	t.Helper()
	rec := startRecorder(t)
	limited, free := "sk-test-limited-key-0123456789", "sk-test-free-key-0123456789"
	m := startVoters(t, []node.ProviderSection{{Name: "p", Kind: "openai", Region: "eu-west", BaseURL: rec.url,
		Models: []node.ModelSection{{Name: "gpt-4o-mini", InputUSDPerMTok: 1, OutputUSDPerMTok: 1}}}}, func(c *node.Config) {
		c.Tenants[0].Keys = []node.KeySection{
			{Name: "limited", KeySHA256: harness.KeySHA256(limited), Limits: &node.RateSection{RPM: rpm}},
			{Name: "free", KeySHA256: harness.KeySHA256(free)},
		}
	})
	ctx, stop := context.WithTimeout(context.Background(), d)
	defer stop()
	lim := keyLoad(ctx, t, m.urls, limited, "limited", rate)
	fr := keyLoad(ctx, t, m.urls, free, "free", 0.5)
	checkKeyRate(t, rec, rpm, lim(), fr())
	return m
}

// checkKeyRate checks a run of driveKeyRate: the provider saw at most rpm of
// the limited key's requests in any 60 s window; the limited key was
// refused only with 429 naming it and its limit, and only once the mesh
// had granted it (near) its limit in the window before; the free key was
// never refused. It returns how many the limited key was granted before
// its first 429.
func checkKeyRate(t *testing.T, rec *recorder, rpm int, lim, fr []outcome) int {
	t.Helper()
	worst := busiestMinute(rec.arrivals("limited"))
	var ok, refused int
	first := -1
	for i, o := range lim {
		switch o.status {
		case 200:
			ok++
		case 429:
			refused++
			if first < 0 {
				first = i
			}
			if !strings.Contains(o.body, `key \"limited\" of tenant t1 is at its limit of `+fmt.Sprint(rpm)+` requests a minute`) ||
				!strings.Contains(o.body, `"code":"rate_limited"`) || o.retry == "" {
				t.Fatalf("a 429 that does not name the key and its limit: %s (Retry-After %q)", o.body, o.retry)
			}
		default:
			t.Fatalf("the limited key got %d: %s", o.status, o.body)
		}
	}
	for _, o := range fr {
		if o.status != 200 {
			t.Fatalf("the free key of the same tenant got %d: %s", o.status, o.body)
		}
	}
	granted := 0
	if first >= 0 {
		for _, o := range lim[:first] {
			if o.status == 200 && lim[first].at.Sub(o.at) < time.Minute {
				granted++
			}
		}
	}
	t.Logf("limited key (rpm %d): %d served, %d refused 429; granted %d in the minute before its first 429; busiest 60 s at the provider: %d; free key: %d served",
		rpm, ok, refused, granted, worst, len(fr))
	if worst > rpm {
		t.Fatalf("the provider saw %d of the key's requests within 60 s; its limit is %d", worst, rpm)
	}
	if refused == 0 {
		t.Fatal("the key was driven past its limit and never refused")
	}
	if granted < rpm*9/10 {
		t.Fatalf("the key was refused after %d requests in the minute before, well short of its limit %d", granted, rpm)
	}
	return granted
}

// The check at its own figures: a key limited to 120 RPM, driven
// through all three nodes at once at 180 a minute for a minute and a
// window: the provider never sees more than 120 of its requests in any
// 60 s, the key gets 429 only once the mesh granted it its limit, and
// another key of the tenant, driven meanwhile, is never refused.
func TestKeyRateLimitAcrossThreeNodes(t *testing.T) {
	if testing.Short() {
		t.Skip("runs for over two minutes")
	}
	t.Parallel()
	driveKeyRate(t, 120, 125*time.Second, 1)
}

// The same at a tenth of the limit, in a third of a minute: 12 requests
// a minute, driven at 90, through three nodes; the first window only.
func TestKeyRateLimitAcrossThreeNodesQuick(t *testing.T) {
	t.Parallel()
	m := driveKeyRate(t, 12, 20*time.Second, 0.5)
	counted := 0
	for _, u := range m.urls {
		var n int
		fmt.Sscan(metric(u, `llmesh_key_refusals_total{key="limited",reason="key_rate_limited",tenant="t1"}`), &n)
		counted += n
	}
	if counted == 0 {
		t.Fatal("no node counted the key's 429s")
	}
}
