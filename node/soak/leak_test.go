package soak_test

import (
	"os"
	"testing"

	"github.com/llmesh/llmesh/sim/harness/wait"
)

// TestMain fails the run if a goroutine the tests started outlives them,
// allowing libraries some seconds to wind down what they stop.
func TestMain(m *testing.M) {
	os.Exit(wait.NoLeaks(m))
}
