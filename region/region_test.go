package region

import (
	"testing"
	"time"
)

func TestResidencyAllows(t *testing.T) {
	eu, us := NewSet("eu"), NewSet("us", "eu", "us")
	if us.String() != "eu,us" {
		t.Fatalf("set not sorted and de-duplicated: %s", us)
	}
	any := Residency{}
	euOnly := Residency{Jurisdiction: "eu"}
	usOnly := Residency{Jurisdiction: "us"}
	for _, tc := range []struct {
		r    Residency
		js   Set
		want bool
	}{
		{any, eu, true}, {any, nil, true},
		{euOnly, eu, true}, {euOnly, us, true}, {euOnly, NewSet("us"), false}, {euOnly, nil, false},
		{usOnly, eu, false},
	} {
		if got := tc.r.Allows(tc.js); got != tc.want {
			t.Errorf("%s allows %s = %v, want %v", tc.r, tc.js, got, tc.want)
		}
	}
}

func TestMap(t *testing.T) {
	m, err := NewMap([]Region{{"eu-west", "eu"}, {"us-east", "us"}, {"eu-north", "eu"}})
	if err != nil {
		t.Fatal(err)
	}
	if r, ok := m.Lookup("eu-north"); !ok || r.Jurisdiction != "eu" {
		t.Fatal("lookup")
	}
	if js := m.Jurisdictions(); len(js) != 2 || js[0] != "eu" || js[1] != "us" {
		t.Fatalf("jurisdictions %v", js)
	}
	for _, bad := range [][]Region{
		{{"eu-west", "eu"}, {"eu-west", "us"}},
		{{"EU West", "eu"}},
		{{"eu-west", ""}},
	} {
		if _, err := NewMap(bad); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
}

func TestNarrow(t *testing.T) {
	if r, err := (Residency{}).Narrow("eu"); err != nil || r.Jurisdiction != "eu" {
		t.Fatalf("narrowing any to eu: %v %v", r, err)
	}
	if r, err := (Residency{Jurisdiction: "eu"}).Narrow("eu"); err != nil || r.Jurisdiction != "eu" {
		t.Fatalf("eu to eu: %v %v", r, err)
	}
	if _, err := (Residency{Jurisdiction: "eu"}).Narrow("us"); err == nil {
		t.Fatal("eu widened to us")
	}
	if _, err := (Residency{}).Narrow("Not A Name"); err == nil {
		t.Fatal("invalid name accepted")
	}
}

func TestNearest(t *testing.T) {
	ms := time.Millisecond
	cases := []struct {
		cands []Candidate
		want  int
	}{
		{nil, -1},
		{[]Candidate{{Name: "a"}, {Name: "b", Load: -1}}, 1},                                      // nothing known: least loaded
		{[]Candidate{{RTT: 80 * ms, RTTKnown: true}, {RTT: 20 * ms, RTTKnown: true, Load: 9}}, 1}, // the far one is not near
		{[]Candidate{{RTT: 20 * ms, RTTKnown: true, Load: 9}, {RTT: 23 * ms, RTTKnown: true, Load: 2}}, 1},
		{[]Candidate{{RTT: 20 * ms, RTTKnown: true, Load: 2}, {RTT: 22 * ms, RTTKnown: true, Load: 2}}, 0},
		{[]Candidate{{Load: 0}, {RTT: 50 * ms, RTTKnown: true, Load: 7}}, 1}, // unknown loses to known
	}
	for i, c := range cases {
		if got := Nearest(c.cands); got != c.want {
			t.Errorf("case %d: got %d, want %d", i, got, c.want)
		}
	}
}
