package ledger

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/llmesh/llmesh/consensus"
	"github.com/llmesh/llmesh/node/config"
	"github.com/llmesh/llmesh/route"
	"github.com/llmesh/llmesh/sim/harness/wait"
)

// A node that saw no voter for a while holds the file's settings alone
// meanwhile; once a voter is back it takes the ledger's again, though
// they did not change while it was away. (It compared the ledger's
// tenants with the last it read before the gap, found them unchanged,
// and kept the file's: a key's live limit, and a key's live budget,
// stayed lifted on that node until some tenant changed.)
func TestLedgerSettingsBackAfterNoVoters(t *testing.T) {
	sum := sha256.Sum256([]byte("sk-acme"))
	h := hex.EncodeToString(sum[:])
	s := &config.Runtime{Name: "a", Ledger: true, AdmissionQueue: 10,
		Tenants: []config.Tenant{{Name: "acme", Keys: [][sha256.Size]byte{sum}}},
		Raft:    &consensus.ServerConfig{ID: "a", Bind: "127.0.0.1:0", InMemory: true, BootstrapExpect: 1, Timings: consensus.FastTimings}}
	cat := testCatalog(t)
	l, err := New(s, cat, Deps{
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Now: time.Now,
		Catalog: func() *route.Catalog { return cat }, RPCAddr: func() string { return "" },
		ObserveApply: func(time.Duration) {}, SetTenants: func([]consensus.Tenant) {},
	})
	if err != nil {
		t.Fatal(err)
	}
	var gone atomic.Bool // the voter out of sight
	raftAddr := l.members.raftAddr
	l.members.raftAddr = func() string {
		if gone.Load() {
			return ""
		}
		return raftAddr()
	}
	if err := l.Listen(context.Background()); err != nil {
		t.Fatal(err)
	}
	l.Run()
	defer func() {
		l.Settle()
		l.Close()
	}()
	wait.For(t, 10*time.Second, "a leader", l.Server().IsLeader)
	rpm := int64(5)
	body, _ := json.Marshal(consensus.SetKey{Tenant: "acme", Key: h, RPM: &rpm})
	wait.For(t, 10*time.Second, "the live limit to apply", func() bool {
		r, err := l.Client().Apply(context.Background(), consensus.Command{Type: consensus.CmdSetKey, Body: body})
		return err == nil && r.Err == ""
	})
	limit := func() int64 {
		n, _ := l.Subjects().Capacity(consensus.KeyRate("acme", consensus.KeyID(h)))
		return n
	}
	wait.For(t, 5*time.Second, "the key's live limit in force", func() bool { return limit() == 5 })
	gone.Store(true)
	wait.For(t, 5*time.Second, "the file's settings alone, without a voter", func() bool { return limit() == 0 })
	gone.Store(false)
	wait.For(t, 5*time.Second, "the key's live limit in force again", func() bool { return limit() == 5 })
}
