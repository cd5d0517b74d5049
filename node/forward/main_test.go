package forward

import (
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/llmesh/llmesh/sim/harness/wait"
)

// TestMain fails the run if a goroutine the tests started (a gRPC
// connection, a server stream, a hop's timer) outlives them.
func TestMain(m *testing.M) {
	os.Exit(wait.Run(m, 10*time.Second, func() error { return goleak.Find() }))
}
