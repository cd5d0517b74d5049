package consensus

import (
	"os"
	"testing"
	"time"

	"github.com/llmesh/llmesh/sim/harness/wait"
	"go.uber.org/goleak"
)

// TestMain fails the run if a goroutine the tests started outlives them,
// allowing libraries some seconds to wind down what they stop (a
// memberlist probe in flight ends after Shutdown returns).
func TestMain(m *testing.M) {
	os.Exit(wait.Run(m, 10*time.Second, func() error { return goleak.Find() }))
}
