// Package wait waits in tests for a condition to hold, with a deadline,
// in place of fixed sleeps. It imports no project package (only the
// standard library and goleak), so that every package's tests, internal
// ones included, can use it without an import cycle.
package wait

import (
	"fmt"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// Interval is how often For and Until poll their condition.
const Interval = 5 * time.Millisecond

// Poller polls conditions every Interval: Every(d) for conditions that
// cost more than a memory read (a request to a container, say).
type Poller struct {
	// Interval is the pause between two polls.
	Interval time.Duration
}

// Every returns a Poller that polls every d.
func Every(d time.Duration) Poller { return Poller{Interval: d} }

// For polls cond every Interval until it holds or d passes; see
// Poller.For.
func For(t testing.TB, d time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	return Every(Interval).For(t, d, what, cond)
}

// Until polls cond every Interval until it returns nil or d passes; see
// Poller.Until.
func Until(t testing.TB, d time.Duration, what string, cond func() error) time.Duration {
	t.Helper()
	return Every(Interval).Until(t, d, what, cond)
}

// For polls cond until it holds or d passes, and returns how long that
// took. If d passes first, it fails t with "timed out after d waiting for
// what" and stops the test (t.Fatalf), so it must be called from the
// test's goroutine.
func (p Poller) For(t testing.TB, d time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > d {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(p.Interval)
	}
	return time.Since(start)
}

// Until is For with a condition that says why it does not hold yet: it
// polls cond until it returns nil, and on timeout fails t with
// "timed out after d waiting for what (last: err)".
func (p Poller) Until(t testing.TB, d time.Duration, what string, cond func() error) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		err := cond()
		if err == nil {
			return time.Since(start)
		}
		if time.Since(start) > d {
			t.Fatalf("timed out after %v waiting for %s (last: %v)", d, what, err)
		}
		time.Sleep(p.Interval)
	}
}

// Within polls cond until it holds or d passes, and says whether it
// held: for a wait whose running out is not a failure (load that goes on
// until a budget is spent, or for at most d).
func (p Poller) Within(d time.Duration, cond func() bool) bool {
	for deadline := time.Now().Add(d); !cond(); time.Sleep(p.Interval) {
		if time.Now().After(deadline) {
			return false
		}
	}
	return true
}

// LeakWindow is how long after its tests NoLeaks lets goroutines wind
// down before it counts them as leaked.
const LeakWindow = 10 * time.Second

// NoLeaks runs m's tests and then fails the run if a goroutine they
// started outlives them by more than LeakWindow: the TestMain of every
// package that starts goroutines is os.Exit(wait.NoLeaks(m)).
//
// One goroutine is known not to end, and is not counted: the waiter
// consensus.Server.Apply starts on a Raft apply future. hashicorp/raft
// v1.7.3 leaves a future unresolved when it shuts down with the future's
// batch still queued for its FSM (runFSM returns on shutdown without
// answering what fsmMutateCh holds, and an apply future has no shutdown
// channel), and the waiter cannot be interrupted. Apply itself returns
// when its timeout passes; only the waiter stays.
func NoLeaks(m interface{ Run() int }) int {
	return Run(m, LeakWindow, func() error {
		return goleak.Find(goleak.IgnoreAnyFunction("github.com/llmesh/llmesh/consensus.(*Server).Apply.func1"),
			// A connection pool's cleaner sleeps out the idle timeout
			// after its last connection closed, then ends.
			goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*HostClient).connsCleaner"))
	})
}

// Run runs m's tests (a *testing.M) and, if they pass, polls check until it returns nil
// or d passes: for a goroutine-leak check (goleak.Find), which then
// tolerates what a library still winds down for a moment after its
// Shutdown returned (a memberlist probe in flight, say) but not what
// never ends. It returns the exit code for os.Exit: m.Run's, or 1 with
// check's last error printed if check never passed.
func Run(m interface{ Run() int }, d time.Duration, check func() error) int {
	code := m.Run()
	if code != 0 {
		return code
	}
	deadline := time.Now().Add(d)
	for {
		err := check()
		if err == nil {
			return 0
		}
		if time.Now().After(deadline) {
			fmt.Fprintf(os.Stderr, "after the tests passed, for %v: %v\n", d, err)
			return 1
		}
		time.Sleep(50 * time.Millisecond)
	}
}
