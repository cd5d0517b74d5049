// Package region owns jurisdictions, regions and the residency policy: which
// places may see a request's data. It is pure code and imports only the
// standard library, so the planner, the simulator and the nodes all share one
// definition of where data may go.
package region

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// Jurisdiction names a legal area whose rules govern data processed in it,
// e.g. "eu" or "us". Jurisdictions are compared exactly.
type Jurisdiction string

// Region is a deployment region, e.g. "eu-west", and the jurisdiction its
// nodes and region-reach providers sit in.
type Region struct {
	Name         string
	Jurisdiction Jurisdiction
}

var namePattern = regexp.MustCompile(`^[a-z0-9]([a-z0-9._-]{0,62}[a-z0-9])?$`)

// ValidName reports whether s is usable as a region or jurisdiction name:
// lower-case letters, digits, '.', '_' and '-', 1 to 64 characters, starting
// and ending with a letter or digit. Names travel in headers and metrics
// labels, so they are kept plain.
func ValidName(s string) bool { return namePattern.MatchString(s) }

// Map is the set of known regions, by name.
type Map struct {
	byName map[string]Region
}

// NewMap validates regions and indexes them. Names must be valid and unique.
func NewMap(regions []Region) (*Map, error) {
	m := &Map{byName: make(map[string]Region, len(regions))}
	for i, r := range regions {
		if !ValidName(r.Name) {
			return nil, fmt.Errorf("regions[%d].name: %q is not a valid region name", i, r.Name)
		}
		if !ValidName(string(r.Jurisdiction)) {
			return nil, fmt.Errorf("regions[%d].jurisdiction: %q is not a valid jurisdiction", i, r.Jurisdiction)
		}
		if _, dup := m.byName[r.Name]; dup {
			return nil, fmt.Errorf("regions[%d].name: %q is defined twice", i, r.Name)
		}
		m.byName[r.Name] = r
	}
	return m, nil
}

// Lookup returns the region named name.
func (m *Map) Lookup(name string) (Region, bool) {
	r, ok := m.byName[name]
	return r, ok
}

// Jurisdictions returns every jurisdiction some region is in, sorted.
func (m *Map) Jurisdictions() []Jurisdiction {
	var out []Jurisdiction
	for _, r := range m.byName {
		if !slices.Contains(out, r.Jurisdiction) {
			out = append(out, r.Jurisdiction)
		}
	}
	slices.Sort(out)
	return out
}

// Set is a small set of jurisdictions, kept sorted and without duplicates so
// that it can be compared and printed deterministically.
type Set []Jurisdiction

// NewSet returns the sorted, de-duplicated set of js.
func NewSet(js ...Jurisdiction) Set {
	s := slices.Clone(js)
	slices.Sort(s)
	return slices.Compact(s)
}

// Contains reports whether j is in s.
func (s Set) Contains(j Jurisdiction) bool {
	_, found := slices.BinarySearch(s, j)
	return found
}

// String renders s as "eu,us".
func (s Set) String() string {
	if len(s) == 1 {
		return string(s[0]) // most providers: no allocation
	}
	parts := make([]string, len(s))
	for i, j := range s {
		parts[i] = string(j)
	}
	return strings.Join(parts, ",")
}

// Residency is where a request's data may be processed. The zero value means
// unrestricted: any provider may see it.
type Residency struct {
	// Jurisdiction is the only jurisdiction allowed, or "" for any.
	Jurisdiction Jurisdiction
}

// Restricted reports whether the residency limits where data may go.
func (r Residency) Restricted() bool { return r.Jurisdiction != "" }

// Allows reports whether a provider processing data in jurisdictions may
// serve a request with residency r. This is the invariant: a restricted
// request is only ever sent to a provider whose jurisdictions include it.
func (r Residency) Allows(jurisdictions Set) bool {
	return !r.Restricted() || jurisdictions.Contains(r.Jurisdiction)
}

// String renders r as its jurisdiction, or "any".
func (r Residency) String() string {
	if !r.Restricted() {
		return "any"
	}
	return string(r.Jurisdiction)
}

// Narrow returns r restricted further to j, as a request header may ask:
// an unrestricted residency becomes j, a residency already j stays, and
// anything else would widen it and is refused.
func (r Residency) Narrow(j Jurisdiction) (Residency, error) {
	switch {
	case !ValidName(string(j)):
		return r, fmt.Errorf("%q is not a jurisdiction name", j)
	case r.Restricted() && r.Jurisdiction != j:
		return r, fmt.Errorf("%q would widen the tenant's residency %q; a request may only narrow it", j, r.Jurisdiction)
	}
	return Residency{Jurisdiction: j}, nil
}
