package gossip

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/llmesh/llmesh/route"
)

var testLimits = storeLimits{maxTTL: time.Minute, maxHold: 15 * time.Minute, maxPerObserver: 100}

func TestStoreMergeAndAge(t *testing.T) {
	s := newStore(testLimits)
	now := time.Unix(1000, 0)
	o := Observation{Observer: "a", Provider: "p", Version: 5, TTL: 10 * time.Second, Ejected: true, EjectedFor: 3 * time.Second}
	if s.mergeObservation(o, now) {
		t.Fatal("a report from a non-member was kept")
	}
	s.join("a")
	if !s.mergeObservation(o, now) {
		t.Fatal("first report refused")
	}
	older := o
	older.Version = 4
	if s.mergeObservation(older, now) || s.mergeObservation(o, now) {
		t.Fatal("an older or equal version replaced the newer")
	}
	sum := s.summarize("self", now, time.Minute)["p"]
	if sum == nil || sum.Failing != 1 || sum.Observers != 1 {
		t.Fatalf("summary %+v", sum)
	}
	// The ejection ran out; the report is still fresh but no longer failing.
	if sum := s.summarize("self", now.Add(4*time.Second), time.Minute)["p"]; sum.Failing != 0 {
		t.Fatalf("after the ejection: %+v", sum)
	}
	// A node's own reports are not "peers".
	if s.summarize("a", now, time.Minute)["p"] != nil {
		t.Fatal("own report counted as a peer's")
	}
	// Expired reports are gone.
	if n := s.expire(now.Add(10 * time.Second)); n != 1 || len(s.summarize("self", now.Add(10*time.Second), time.Minute)) != 0 {
		t.Fatalf("expire dropped %d", n)
	}
	// Leaving drops a node's reports and refuses new ones until it joins
	// again.
	o.Version = 10
	s.mergeObservation(o, now)
	s.leave("a")
	if len(s.summarize("self", now, time.Minute)) != 0 {
		t.Fatal("a departed node's report is still held")
	}
	o.Version = 11
	if s.mergeObservation(o, now) {
		t.Fatal("a report of a departed node was taken")
	}
	s.join("a")
	if !s.mergeObservation(o, now) {
		t.Fatal("a new report after rejoining refused")
	}
}

// A high error rate counts as failing only while the observer keeps
// calling the provider: a moving average that no attempt moves says
// nothing of now.
func TestOldErrorRatesDoNotCount(t *testing.T) {
	s := newStore(testLimits)
	s.join("a")
	now := time.Unix(1000, 0)
	s.mergeObservation(Observation{Observer: "a", Provider: "p", Version: 1, TTL: time.Minute, ErrorRate: 0.9, IdleFor: 50 * time.Second}, now)
	if sum := s.summarize("self", now, 30*time.Second)["p"]; sum.Failing != 0 {
		t.Fatalf("an idle observer's old error rate counted: %+v", sum)
	}
	s.mergeObservation(Observation{Observer: "a", Provider: "p", Version: 2, TTL: time.Minute, ErrorRate: 0.9, IdleFor: time.Second}, now)
	if sum := s.summarize("self", now, 30*time.Second)["p"]; sum.Failing != 1 {
		t.Fatalf("a current error rate did not count: %+v", sum)
	}
}

// What a peer can make a node hold is bounded.
func TestStoreBoundsWhatPeersSend(t *testing.T) {
	s := newStore(storeLimits{maxTTL: time.Minute, maxHold: 15 * time.Minute, maxPerObserver: 10,
		known: func(p string) bool { return strings.HasPrefix(p, "known") }})
	s.join("a")
	now := time.Unix(1000, 0)
	if s.mergeObservation(Observation{Observer: "a", Provider: "unknown", Version: 1, TTL: time.Second}, now) {
		t.Fatal("a report on an unknown provider was taken")
	}
	for i := range 50 {
		s.mergeObservation(Observation{Observer: "a", Provider: fmt.Sprintf("known%d", i), Version: 1, TTL: time.Second}, now)
	}
	if n := len(s.summarize("self", now, time.Minute)); n != 10 {
		t.Fatalf("held %d reports of one observer, want the cap of 10", n)
	}
	// Clamped: a year's cooldown and a century's time to live.
	s.mergeObservation(Observation{Observer: "a", Provider: "known0", Version: 2, TTL: 100 * 365 * 24 * time.Hour, CoolingFor: 365 * 24 * time.Hour}, now)
	r := s.record("a", "known0")
	if r.Expires.Sub(now) != time.Minute || r.CoolingUntil.Sub(now) != 15*time.Minute {
		t.Fatalf("not clamped: expires in %v, cools for %v", r.Expires.Sub(now), r.CoolingUntil.Sub(now))
	}
	// A version far in the future (it would lock the observer out) is refused.
	if s.mergeObservation(Observation{Observer: "a", Provider: "known0", Version: 1 << 63, TTL: time.Second}, now) {
		t.Fatal("a version from the far future was taken")
	}
}

func TestObservationWireRoundTrip(t *testing.T) {
	o := Observation{Observer: "eu-1", Provider: "azure-eu", Version: 1 << 62, TTL: 30 * time.Second,
		TTFT: 180 * time.Millisecond, Latency: 2 * time.Second, ErrorRate: 0.25, Ejected: true,
		EjectedFor: 5 * time.Second, CoolingFor: 1500 * time.Millisecond, IdleFor: time.Minute,
		RemainingRequests: 0, RemainingTokens: -1}
	var e encoder
	o.encode(&e)
	d := decoder{b: e.b[1:]}
	got, err := decodeObservation(&d)
	if err != nil || got != o {
		t.Fatalf("round trip:\n got %+v\nwant %+v (%v)", got, o, err)
	}
	l := Load{Observer: "eu-1", Version: 7, TTL: time.Second, InFlight: 12, Queue: 3,
		Spare:   []Spare{{Provider: "openai-us", Requests: 120}, {Provider: "gpu-eu", Requests: 0}},
		Engines: []Engine{{Provider: "gpu-eu", Replicas: 4, Running: 60, Waiting: 9, KVUsage: 0.875}}}
	e.b = nil
	l.encode(&e)
	d = decoder{b: e.b[1:]}
	if gl, err := decodeLoad(&d); err != nil || !reflect.DeepEqual(gl, l) {
		t.Fatalf("load round trip: %+v %v", gl, err)
	}
	// A report of a node before engine signals, with spares only, still
	// decodes.
	e.b = nil
	spares := l
	spares.Engines = nil
	spares.encode(&e)
	d = decoder{b: e.b[1 : len(e.b)-1]} // its last byte: the count of engines, 0
	if gl, err := decodeLoad(&d); err != nil || !reflect.DeepEqual(gl, spares) {
		t.Fatalf("a load without engines: %+v %v", gl, err)
	}
	// A report of an older node, without spare shares, still decodes.
	var old encoder
	old.byte1(msgLoad)
	old.byte1(loadVersion)
	old.str("us-1")
	old.uvarint(3)
	old.u32(1000)
	old.uvarint(5)
	old.uvarint(0)
	d = decoder{b: old.b[1:]}
	if gl, err := decodeLoad(&d); err != nil || gl.Observer != "us-1" || gl.InFlight != 5 || gl.Spare != nil {
		t.Fatalf("an older node's load: %+v %v", gl, err)
	}
}

// Nothing a peer sends can crash a node: every decoder and the message
// dispatcher take arbitrary bytes.
func FuzzGossipMessages(f *testing.F) {
	var e encoder
	(&Observation{Observer: "a", Provider: "p", Version: 1, TTL: time.Second}).encode(&e)
	f.Add(e.b)
	e.b = nil
	(&Load{Observer: "a", Version: 1}).encode(&e)
	f.Add(e.b)
	meta, _ := Meta{Region: "eu"}.Encode()
	f.Add(meta)
	f.Add([]byte{msgState, stateVersion, 200})
	f.Add([]byte{msgLeaving})
	m, err := New(DefaultConfig("self"), route.NewTracker(route.DefaultHealthConfig(), route.TrackerHooks{}), nil)
	if err != nil {
		f.Fatal(err)
	}
	m.st.join("a")
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) > 0 {
			m.recvMsg(b, true)
		}
		_, _ = DecodeMeta(b)
		_, _ = decodeCoord(b)
		delegate{m}.MergeRemoteState(b, false)
	})
}
