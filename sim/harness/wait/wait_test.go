package wait_test

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/llmesh/llmesh/sim/harness/wait"
)

// A condition that holds after a few polls is waited for, and the time
// taken is returned.
func TestForReturnsOnceTheConditionHolds(t *testing.T) {
	var polls atomic.Int32
	took := wait.For(t, time.Second, "three polls", func() bool { return polls.Add(1) >= 3 })
	if polls.Load() != 3 {
		t.Fatalf("polled %d times, want 3", polls.Load())
	}
	if took < 2*wait.Interval {
		t.Fatalf("took %v for three polls %v apart", took, wait.Interval)
	}
}

// recorder is a testing.TB that records a Fatalf instead of stopping the
// test.
type recorder struct {
	testing.TB
	msg string
}

func (r *recorder) Helper() {}

func (r *recorder) Fatalf(format string, args ...any) {
	r.msg = fmt.Sprintf(format, args...)
	panic(r)
}

// A condition that never holds fails the test once the deadline passes,
// saying what was waited for and for how long.
func TestForFailsAtTheDeadline(t *testing.T) {
	r := &recorder{TB: t}
	start := time.Now()
	func() {
		defer func() {
			if p := recover(); p != r {
				t.Fatalf("recovered %v, want the recorder's Fatalf", p)
			}
		}()
		wait.For(r, 20*time.Millisecond, "nothing", func() bool { return false })
	}()
	if took := time.Since(start); took < 20*time.Millisecond {
		t.Fatalf("gave up after %v, before the 20ms deadline", took)
	}
	if !strings.Contains(r.msg, "timed out after") || !strings.Contains(r.msg, "20ms") || !strings.Contains(r.msg, "nothing") {
		t.Fatalf("message %q does not say what was waited for and how long", r.msg)
	}
}
