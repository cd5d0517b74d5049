// Package wait waits in tests for a condition to hold, with a deadline,
// in place of fixed sleeps. It imports only the standard library, so
// that every package's tests, internal ones included, can use it without
// an import cycle.
package wait

import (
	"testing"
	"time"
)

// Interval is how often For polls its condition.
const Interval = 5 * time.Millisecond

// For polls cond every Interval until it holds or d passes, and returns
// how long that took. If d passes first, it fails t with
// "timed out after d waiting for what" and stops the test (t.Fatalf), so
// it must be called from the test's goroutine.
func For(t testing.TB, d time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > d {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(Interval)
	}
	return time.Since(start)
}
