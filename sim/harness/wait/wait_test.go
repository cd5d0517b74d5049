package wait_test

import (
	"errors"
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

// Until fails with the condition's last reason.
func TestUntilSaysWhyAtTheDeadline(t *testing.T) {
	r := &recorder{TB: t}
	func() {
		defer func() { _ = recover() }()
		wait.Every(time.Millisecond).Until(r, 10*time.Millisecond, "the mesh", func() error { return errors.New("2 of 3 alive") })
	}()
	if want := "timed out after 10ms waiting for the mesh (last: 2 of 3 alive)"; r.msg != want {
		t.Fatalf("message %q, want %q", r.msg, want)
	}
	var calls int
	wait.Until(t, time.Second, "the third call", func() error {
		if calls++; calls < 3 {
			return errors.New("not yet")
		}
		return nil
	})
	if calls != 3 {
		t.Fatalf("called %d times, want 3", calls)
	}
}

type fakeM int

func (m fakeM) Run() int { return int(m) }

// Run passes once the check does, fails if it never does, and keeps a
// failed run's code without checking.
func TestRunChecksAfterPassingTests(t *testing.T) {
	calls := 0
	if code := wait.Run(fakeM(0), time.Second, func() error {
		if calls++; calls < 3 {
			return errors.New("a goroutine still winding down")
		}
		return nil
	}); code != 0 || calls != 3 {
		t.Fatalf("code %d after %d checks, want 0 after 3", code, calls)
	}
	if code := wait.Run(fakeM(0), 100*time.Millisecond, func() error { return errors.New("leaked") }); code != 1 {
		t.Fatalf("code %d for a check that never passes, want 1", code)
	}
	if code := wait.Run(fakeM(2), time.Second, func() error { t.Fatal("checked after failing tests"); return nil }); code != 2 {
		t.Fatalf("code %d, want the tests' 2", code)
	}
}

// Within says whether the condition held before the deadline.
func TestWithin(t *testing.T) {
	n := 0
	if !wait.Every(time.Millisecond).Within(time.Second, func() bool { n++; return n == 3 }) || n != 3 {
		t.Fatalf("Within gave up, or polled %d times for a condition true at the third", n)
	}
	if wait.Every(time.Millisecond).Within(10*time.Millisecond, func() bool { return false }) {
		t.Fatal("Within says a condition that never held did")
	}
}
