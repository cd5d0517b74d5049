package gossip

// Joining the mesh and staying in it: the first join retried with backoff
// until a seed answers, and failed members tried again so that the two
// sides of a healed partition find each other.

import (
	"errors"
	"math/rand/v2"
	"time"
)

// Join contacts addrs now and reports how many answered.
func (m *Mesh) Join(addrs []string) (int, error) {
	if m.ml == nil {
		return 0, errors.New("gossip: not started")
	}
	n, err := m.ml.Join(addrs)
	if n > 0 {
		m.joined.Store(true)
		err = nil
	}
	return n, err
}

func (m *Mesh) joinLoop() {
	backoff := m.cfg.JoinBackoff
	for {
		n, err := m.ml.Join(m.cfg.Seeds)
		if n > 0 {
			m.joined.Store(true)
			m.log.Info("joined the mesh", "contacted", n, "members", m.ml.NumMembers())
			return
		}
		m.log.Warn("no seed answered; retrying", "seeds", m.cfg.Seeds, "in", backoff, "err", err)
		jitter := time.Duration(rand.Int64N(int64(backoff)/4 + 1))
		select {
		case <-m.stop:
			return
		case <-time.After(backoff + jitter):
		}
		backoff = min(2*backoff, m.cfg.JoinBackoffMax)
	}
}

// reconnectLoop tries a failed member again every ReconnectInterval, as
// serf does: memberlist itself stops talking to the dead after a while, so
// without it two sides of a healed partition would stay apart.
func (m *Mesh) reconnectLoop() {
	t := time.NewTicker(m.cfg.ReconnectInterval)
	defer t.Stop()
	for {
		select {
		case <-m.stop:
			return
		case <-t.C:
		}
		now := m.now()
		var failed []string
		m.membersMu.Lock()
		for name, d := range m.departed {
			if d.node.State == "failed" && now.Sub(d.since) < m.cfg.ReconnectTimeout {
				failed = append(failed, d.node.Addr)
			} else if now.Sub(d.since) >= m.cfg.ReconnectTimeout {
				delete(m.departed, name)
			}
		}
		m.membersMu.Unlock()
		if len(failed) == 0 {
			continue
		}
		addr := failed[rand.IntN(len(failed))]
		if n, _ := m.ml.Join([]string{addr}); n > 0 {
			m.log.Info("reconnected to a failed member", "addr", addr)
		}
	}
}
