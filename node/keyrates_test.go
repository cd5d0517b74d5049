package node_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llmesh/llmesh/node"
	"github.com/llmesh/llmesh/sim/emulator"
)

// byUser is an emulated provider that records when each request reached
// it, by the body's user field (the tests' stand-in for the key it came
// with: the node passes the body on as it is).
type byUser struct {
	url  string
	mu   sync.Mutex
	seen map[string][]time.Time
}

func startByUser(t *testing.T, models ...string) *byUser {
	t.Helper()
	cfg := emulator.DefaultConfig()
	cfg.Models = map[string]emulator.Price{}
	for _, m := range models {
		cfg.Models[m] = emulator.Price{InputUSDPerMTok: 1, OutputUSDPerMTok: 1}
	}
	em, err := emulator.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	rec := &byUser{seen: map[string][]time.Time{}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var doc struct{ User string }
		_ = json.Unmarshal(body, &doc)
		rec.mu.Lock()
		rec.seen[doc.User] = append(rec.seen[doc.User], time.Now())
		rec.mu.Unlock()
		r.Body = io.NopCloser(bytes.NewReader(body))
		em.Handler().ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	rec.url = srv.URL
	return rec
}

func (b *byUser) arrivals(user string) []time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.seen[user])
}

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
		wg.Go(func() {
			tick := time.NewTicker(time.Duration(float64(time.Second) / rate))
			defer tick.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
				wg.Go(func() {
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
		})
	}
	return func() []outcome {
		wg.Wait()
		slices.SortFunc(out, func(a, b outcome) int { return a.at.Compare(b.at) })
		return out
	}
}

// keyRateMesh starts three voters in front of rec, with tenant t1 and
// two keys: limited (limits.rpm from the file) and free, whose keys it
// returns.
func keyRateMesh(t *testing.T, rec *byUser, rpm int) (m *meshFixture, limited, free string) {
	limited, free = "sk-test-limited-key-0123456789", "sk-test-free-key-0123456789"
	m = startMeshWith(t, 3, nil, voters(t, 3, func(i int, c *node.Config) {
		c.Providers = []node.ProviderSection{{Name: "p", Kind: "openai", Region: "eu-west", BaseURL: rec.url,
			Models: []node.ModelSection{{Name: "gpt-4o-mini", InputUSDPerMTok: 1, OutputUSDPerMTok: 1}}}}
		c.Tenants[0].Keys = []node.KeySection{
			{Name: "limited", KeySHA256: sha(limited), Limits: &node.RateSection{RPM: rpm}},
			{Name: "free", KeySHA256: sha(free)},
		}
	}), fastRaft)
	return m, limited, free
}

// checkKeyRate checks a run of keyRate: the provider saw at most rpm of
// the limited key's requests in any 60 s window; the limited key was
// refused only with 429 naming it and its limit, and only once the mesh
// had granted it (near) its limit in the window before; the free key was
// never refused. It returns how many the limited key was granted before
// its first 429.
func checkKeyRate(t *testing.T, rec *byUser, rpm int, lim, fr []outcome) int {
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
	rec := startByUser(t, "gpt-4o-mini")
	m, limited, free := keyRateMesh(t, rec, 120)
	ctx, stop := context.WithTimeout(context.Background(), 125*time.Second)
	defer stop()
	lim := keyLoad(ctx, t, m.urls, limited, "limited", 1)
	fr := keyLoad(ctx, t, m.urls, free, "free", 0.5)
	checkKeyRate(t, rec, 120, lim(), fr())
}

// The same at a tenth of the limit, in a third of a minute: 12 requests
// a minute, driven at 90, through three nodes; the first window only.
func TestKeyRateLimitAcrossThreeNodesQuick(t *testing.T) {
	rec := startByUser(t, "gpt-4o-mini")
	m, limited, free := keyRateMesh(t, rec, 12)
	ctx, stop := context.WithTimeout(context.Background(), 20*time.Second)
	defer stop()
	lim := keyLoad(ctx, t, m.urls, limited, "limited", 0.5)
	fr := keyLoad(ctx, t, m.urls, free, "free", 0.5)
	checkKeyRate(t, rec, 12, lim(), fr())
	counted := 0
	for _, u := range m.urls {
		for _, line := range strings.Split(readAll(t, mustGet(t, u+"/metrics").Body), "\n") {
			if v, ok := strings.CutPrefix(line, `llmesh_key_refusals_total{key="limited",reason="key_rate_limited",tenant="t1"} `); ok {
				var n int
				fmt.Sscan(v, &n)
				counted += n
			}
		}
	}
	if counted == 0 {
		t.Fatal("no node counted the key's 429s")
	}
}
