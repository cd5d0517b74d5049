package forward

import (
	"os"
	"testing"

	"github.com/llmesh/llmesh/sim/harness/wait"
)

// TestMain fails the run if a goroutine the tests started (a gRPC
// connection, a server stream, a hop's timer) outlives them.
func TestMain(m *testing.M) {
	os.Exit(wait.NoLeaks(m))
}
