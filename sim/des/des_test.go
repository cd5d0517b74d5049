package des

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Every scenario in sim/scenarios loads, and a short stretch of each runs
// with no residency violation and no overspend.
func TestScenarios(t *testing.T) {
	files, err := filepath.Glob("../scenarios/*.yaml")
	if err != nil || len(files) < 5 {
		t.Fatalf("%d scenarios (%v), want at least 5", len(files), err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			s, err := LoadScenario(f)
			if err != nil {
				t.Fatal(err)
			}
			s.Duration = min(s.Duration, time.Hour)
			s.Workload.SessionsPerHour = min(s.Workload.SessionsPerHour, 1500)
			rs, err := Run(s)
			if err != nil {
				t.Fatal(err)
			}
			checkInvariants(t, s, rs)
		})
	}
}

func checkInvariants(t *testing.T, s *Scenario, rs []Result) {
	t.Helper()
	for _, r := range rs {
		if r.Requests == 0 || r.OK == 0 {
			t.Fatalf("%s: %d requests, %d answered", r.Policy, r.Requests, r.OK)
		}
		if r.ResidencyViolations != 0 {
			t.Fatalf("%s: %d residency violations", r.Policy, r.ResidencyViolations)
		}
		if r.OverspendUSD != 0 {
			t.Fatalf("%s: overspent $%g", r.Policy, r.OverspendUSD)
		}
		for _, ten := range s.Tenants {
			if ten.BudgetUSD > 0 && r.SpentByTenant[ten.Name] > ten.BudgetUSD+1e-9 {
				t.Fatalf("%s: %s spent $%g of $%g", r.Policy, ten.Name, r.SpentByTenant[ten.Name], ten.BudgetUSD)
			}
		}
		if r.OK+r.Failed+r.BudgetRefused+r.EscrowWait != r.Requests {
			t.Fatalf("%s: %d ok + %d failed + %d refused + %d waiting != %d requests", r.Policy, r.OK, r.Failed, r.BudgetRefused, r.EscrowWait, r.Requests)
		}
	}
}

// runJSON runs every policy on s and returns the JSON report.
func runJSON(t *testing.T, s *Scenario, o runOpts) (*bytes.Buffer, []Result) {
	t.Helper()
	rs, err := run(s, o)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := JSON(&b, s, rs); err != nil {
		t.Fatal(err)
	}
	return &b, rs
}

// The same scenario and seed give the same output, byte for byte: the
// JSON and the charts.
func TestDeterministic(t *testing.T) {
	// Budgets, a partition, an outage, replicas and rate shares: every
	// source of randomness.
	s, err := LoadScenario("../scenarios/region-partitioned.yaml")
	if err != nil {
		t.Fatal(err)
	}
	s.Providers[1].Outages = []Window{{Start: 20 * time.Minute, End: 30 * time.Minute}}
	s.Providers[0].Replicas, s.Providers[0].RPM = 3, 60 // the ring and rate shares too
	out := func() []byte {
		b, rs := runJSON(t, s, runOpts{})
		b.WriteString(LatencyCDF(s, rs))
		b.WriteString(CostOverTime(s, rs))
		b.WriteString(LoadByRegion(s, rs[len(rs)-1]))
		return b.Bytes()
	}
	a, b := out(), out()
	if !bytes.Equal(a, b) {
		t.Fatal("two runs of the same scenario and seed differ")
	}
	s.Seed++
	if bytes.Equal(a, out()) {
		t.Fatal("another seed gave the same output")
	}
}

// Random scenarios — regions, jurisdictions, providers with outages and
// limits, tenants with residencies and budgets, partitions — never send
// data outside a residency and never overspend a budget, under any policy.
// TestSkippedSyncsChangeNothing holds the simulator's shortcut to the
// holder's own loop: syncing only when NextSync says or requests touched
// the holder gives the same run, byte for byte, as syncing at every
// interval.
func TestSkippedSyncsChangeNothing(t *testing.T) {
	var ss []*Scenario
	for _, f := range []string{"budget-exhausted", "region-partitioned"} {
		s, err := LoadScenario("../scenarios/" + f + ".yaml")
		if err != nil {
			t.Fatal(err)
		}
		ss = append(ss, s)
	}
	ss = append(ss, randomScenario(1), randomScenario(2))
	for _, s := range ss {
		s.Duration = min(s.Duration, time.Hour)
		s.Workload.SessionsPerHour = min(s.Workload.SessionsPerHour, 1500)
	}
	out := func(s *Scenario, every bool) []byte {
		b, _ := runJSON(t, s, runOpts{everySync: every})
		return b.Bytes()
	}
	for _, s := range ss {
		if a, b := out(s, true), out(s, false); !bytes.Equal(a, b) {
			t.Errorf("%s: skipping quiet syncs changed the run:\n%s\nvs\n%s", s.Name, a, b)
		}
	}
}

func TestRandomScenariosHoldInvariants(t *testing.T) {
	n := 8
	if testing.Short() {
		n = 3
	}
	for i := range n {
		s := randomScenario(uint64(i + 1))
		rs, err := Run(s)
		if err != nil {
			t.Fatalf("scenario %d: %v", i, err)
		}
		for _, r := range rs {
			if r.ResidencyViolations != 0 || r.OverspendUSD != 0 {
				t.Fatalf("scenario %d, %s: %d violations, $%g overspent", i, r.Policy, r.ResidencyViolations, r.OverspendUSD)
			}
			// The mesh's rate shares keep every node's calls within a
			// provider's own limits, across partitions and outages.
			if r.Upstream429 != 0 {
				t.Fatalf("scenario %d, %s: %d calls beyond a provider's own limits", i, r.Policy, r.Upstream429)
			}
			for _, ten := range s.Tenants {
				if ten.BudgetUSD > 0 && r.SpentByTenant[ten.Name] > ten.BudgetUSD+1e-9 {
					t.Fatalf("scenario %d, %s: %s spent $%g of $%g", i, r.Policy, ten.Name, r.SpentByTenant[ten.Name], ten.BudgetUSD)
				}
			}
		}
	}
}

func randomScenario(seed uint64) *Scenario {
	rng := rand.New(rand.NewPCG(seed, 7))
	var b strings.Builder
	fmt.Fprintf(&b, "name: random %d\nseed: %d\nduration: 90m\nregions:\n", seed, seed)
	nr := 2 + rng.IntN(4)
	juris := []string{"eu", "us", "ap"}
	for r := range nr {
		fmt.Fprintf(&b, "  - {name: r%d, jurisdiction: %s, nodes: %d}\n", r, juris[r%len(juris)], 1+rng.IntN(2))
	}
	b.WriteString("providers:\n")
	np := 2 + rng.IntN(6)
	for p := range np {
		reach := []string{"global", "region"}[rng.IntN(2)]
		fmt.Fprintf(&b, "  - {name: p%d, region: r%d, reach: %s, models: [{name: m, input_usd_per_mtok: %.2f, output_usd_per_mtok: %.2f}], ttft: {median: %dms, p99: %dms}, tokens_per_second: %d, rpm: %d, error_rate: %.2f, replicas: %d",
			p, rng.IntN(nr), reach, 0.05+rng.Float64(), 0.1+2*rng.Float64(), 50+rng.IntN(300), 1000+rng.IntN(2000), 30+rng.IntN(100), []int{0, 30, 120}[rng.IntN(3)], rng.Float64()*0.1, []int{0, 0, 3}[rng.IntN(3)])
		if rng.IntN(3) == 0 {
			start := rng.IntN(60)
			fmt.Fprintf(&b, ", outages: [{start: %dm, end: %dm}]", start, start+5+rng.IntN(30))
		}
		b.WriteString("}\n")
	}
	b.WriteString("tenants:\n")
	for ti := range 1 + rng.IntN(4) {
		res := ""
		if rng.IntN(2) == 0 {
			res = juris[rng.IntN(len(juris))]
		}
		budget := 0.0
		if rng.IntN(2) == 0 {
			budget = 0.01 + rng.Float64()*0.2
		}
		fmt.Fprintf(&b, "  - {name: t%d, residency: %q, budget_usd: %.4f}\n", ti, res, budget)
	}
	fmt.Fprintf(&b, "workload: {sessions_per_hour: %d, turns: 3, think_time: 20s, prompt_tokens: {median: 500, p99: 5000}, completion_tokens: {median: 150, p99: 1000}, models: [{name: m, weight: 1}], stream: 0.5}\n",
		200+rng.IntN(1500))
	if rng.IntN(2) == 0 {
		start := rng.IntN(60)
		fmt.Fprintf(&b, "partitions: [{start: %dm, end: %dm, regions: [r%d]}]\n", start, start+10, rng.IntN(nr))
	}
	s, err := ParseScenario([]byte(b.String()))
	if err != nil {
		panic(fmt.Sprintf("%v\n%s", err, b.String()))
	}
	return s
}

// TestScale runs 100 regions and 1,000 providers (twenty models, fifty
// providers each) under the llmesh policy for a day, about a million
// requests, and reports the time; LLMESH_SIM_SCALE=1 runs it.
func TestScale(t *testing.T) {
	v := os.Getenv("LLMESH_SIM_SCALE")
	if v == "" {
		t.Skip("set LLMESH_SIM_SCALE=1 to run 100 regions, 1,000 providers and about a million requests (or =1h for an hour of it)")
	}
	s := scaleScenario()
	if d, err := time.ParseDuration(v); err == nil {
		s.Duration = d
	}
	start := time.Now()
	r, err := RunPolicy(s, "llmesh")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d regions, %d providers, %v: %d requests in %v: %d answered, %d failed, %d×402, %d×429 waiting for escrow, %d failovers",
		len(s.Regions), len(s.Providers), s.Duration, r.Requests, time.Since(start).Round(time.Millisecond), r.OK, r.Failed, r.BudgetRefused, r.EscrowWait, r.Failovers)
	if r.ResidencyViolations != 0 || r.OverspendUSD != 0 || r.OK < r.Requests*9/10 {
		t.Fatalf("%d violations, $%g overspent, %d of %d answered", r.ResidencyViolations, r.OverspendUSD, r.OK, r.Requests)
	}
}

func scaleScenario() *Scenario {
	var b strings.Builder
	b.WriteString("name: scale\nseed: 42\nduration: 24h\nregions:\n")
	juris := []string{"eu", "us", "ap", "sa", "af"}
	for r := range 100 {
		fmt.Fprintf(&b, "  - {name: r%02d, jurisdiction: %s}\n", r, juris[r%len(juris)])
	}
	b.WriteString("providers:\n")
	for p := range 1000 {
		reach := "global"
		if p%2 == 0 {
			reach = "region"
		}
		fmt.Fprintf(&b, "  - {name: p%03d, region: r%02d, reach: %s, models: [{name: m%d, input_usd_per_mtok: %.2f, output_usd_per_mtok: %.2f}], ttft: {median: %dms, p99: %dms}, tokens_per_second: %d}\n",
			p, p%100, reach, p/50, 0.05+float64(p%7)/10, 0.1+float64(p%11)/5, 100+p%300, 1500+p%1000, 40+p%80)
	}
	b.WriteString("tenants:\n")
	for ti := range 20 {
		res := ""
		if ti%2 == 0 {
			res = juris[ti%len(juris)]
		}
		fmt.Fprintf(&b, "  - {name: t%d, residency: %q, budget_usd: %d}\n", ti, res, 50*(ti%3))
	}
	// Twenty models, each served by fifty providers across the regions.
	b.WriteString("workload: {sessions_per_hour: 10400, turns: 4, think_time: 30s, prompt_tokens: {median: 600, p99: 6000}, completion_tokens: {median: 180, p99: 1200}, stream: 0.7, models: [")
	for m := range 20 {
		fmt.Fprintf(&b, "{name: m%d, weight: %d}, ", m, 20-m)
	}
	b.WriteString("]}\n")
	s, err := ParseScenario([]byte(b.String()))
	if err != nil {
		panic(err)
	}
	return s
}
