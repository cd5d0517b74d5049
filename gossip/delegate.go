package gossip

import (
	"github.com/hashicorp/memberlist"
)

// delegate is memberlist's view of the mesh's user data: metadata,
// observation messages and push/pull state. Its methods never block: they
// decode, merge under a short lock and queue.
type delegate struct{ m *Mesh }

var _ memberlist.Delegate = delegate{}

// NodeMeta implements memberlist.Delegate.
func (d delegate) NodeMeta(limit int) []byte {
	b := *d.m.metaBytes.Load()
	if len(b) > limit {
		return nil // cannot happen: SetMeta refuses what does not fit
	}
	return b
}

// NotifyMsg implements memberlist.Delegate. The buffer is not kept:
// decoding copies every field.
func (d delegate) NotifyMsg(b []byte) {
	if len(b) == 0 {
		return
	}
	d.m.recvMsg(b, true)
}

// GetBroadcasts implements memberlist.Delegate.
func (d delegate) GetBroadcasts(overhead, limit int) [][]byte {
	return d.m.queue.GetBroadcasts(overhead, limit)
}

// LocalState implements memberlist.Delegate: every fresh observation and
// load report this node holds, so a joining node catches up at once.
func (d delegate) LocalState(join bool) []byte { return d.m.encodeState() }

// MergeRemoteState implements memberlist.Delegate.
func (d delegate) MergeRemoteState(buf []byte, join bool) {
	if len(buf) > 0 {
		d.m.recvMsg(buf, false)
	}
}

// events keeps the store's idea of who may report in step with the
// membership. It implements memberlist.EventDelegate.
type events struct{ m *Mesh }

var _ memberlist.EventDelegate = events{}

// NotifyJoin implements memberlist.EventDelegate.
func (e events) NotifyJoin(n *memberlist.Node) { e.m.joinedNode(n) }

// NotifyLeave implements memberlist.EventDelegate: called for a node that
// left gracefully and for one declared dead.
func (e events) NotifyLeave(n *memberlist.Node) { e.m.leftNode(n) }

// NotifyUpdate implements memberlist.EventDelegate: metadata changed.
func (e events) NotifyUpdate(n *memberlist.Node) { e.m.updatedNode(n) }

// broadcast is one queued message. Named by what it reports, a newer one
// replaces an older one still queued: the queue holds at most one message
// per (observer, provider) and per observer's load. Its bytes are rendered
// at each transmission (durations are fixed-width, so the length the
// queue indexes it by does not change).
type broadcast struct {
	name   string
	render func(*encoder)
}

var _ memberlist.NamedBroadcast = (*broadcast)(nil)

func (b *broadcast) Invalidates(other memberlist.Broadcast) bool {
	o, ok := other.(*broadcast)
	return ok && o.name == b.name
}
func (b *broadcast) Name() string { return b.name }
func (b *broadcast) Message() []byte {
	var e encoder
	b.render(&e)
	return e.b
}
func (b *broadcast) Finished() {}
