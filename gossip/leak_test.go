package gossip

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the run if a goroutine the tests started outlives them.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
