package des

import (
	"testing"
	"time"
)

// The simulator drives the executor's admission step, whose guard
// re-checks the invariant before every call: plans made as if the eu
// tenant had no residency (a stale plan, from before its residency was
// known) put a us provider among its targets, and the guard alone keeps
// them from being tried. Under every policy no request leaves the eu,
// the guard did refuse targets, and the tenant is still served.
func TestGuardRefusesStalePlans(t *testing.T) {
	s, err := LoadScenario("../scenarios/eu-outage-strict.yaml")
	if err != nil {
		t.Fatal(err)
	}
	s.Duration = time.Hour
	for i := range s.Providers { // the eu outage within the hour simulated
		if len(s.Providers[i].Outages) > 0 {
			s.Providers[i].Outages = []Window{{Start: 20 * time.Minute, End: 40 * time.Minute}}
		}
	}
	rs, err := run(s, runOpts{stalePlans: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		if r.ResidencyViolations != 0 {
			t.Errorf("%s: %d requests served outside their residency from stale plans", r.Policy, r.ResidencyViolations)
		}
		if r.blocked == 0 {
			t.Errorf("%s: the guard refused no target of a stale plan", r.Policy)
		}
		if r.SpentByTenant["acme"] == 0 {
			t.Errorf("%s: the eu tenant was not served", r.Policy)
		}
	}
	// The same plans without the residency dropped: nothing to refuse.
	rs, err = Run(s)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		if r.blocked != 0 || r.ResidencyViolations != 0 {
			t.Errorf("%s: %d targets blocked, %d violations from the planner's own plans", r.Policy, r.blocked, r.ResidencyViolations)
		}
	}
}
