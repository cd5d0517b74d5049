package node

import (
	"testing"
	"time"
)

// The ring keeps the last decisionsKept decisions, newest first, and
// recording one allocates nothing.
func TestDecisionRing(t *testing.T) {
	var d decisions
	if got := d.last(10); len(got) != 0 {
		t.Fatalf("empty ring: %d", len(got))
	}
	for i := range decisionsKept + 44 {
		d.record(decision{id: string(rune('a' + i%26)), status: i})
	}
	got := d.last(1000)
	if len(got) != decisionsKept || got[0].status != decisionsKept+43 || got[len(got)-1].status != 44 {
		t.Fatalf("%d kept, newest %d, oldest %d", len(got), got[0].status, got[len(got)-1].status)
	}
	if got := d.last(3); len(got) != 3 || got[2].status != decisionsKept+41 {
		t.Fatalf("last 3: %+v", got)
	}
	e := decision{at: time.Now(), id: "x", tenant: "t", model: "m", status: 200}
	if a := testing.AllocsPerRun(100, func() { d.record(e) }); a != 0 {
		t.Fatalf("record allocates %v times", a)
	}
}
