package gossip

// Merging what peers gossip (reports and push/pull state) and queueing
// reports to pass on.

// recvMsg merges a gossiped message or a push/pull state. New reports
// from gossip are passed on, so they spread epidemically; push/pull state
// is not, as every pair of nodes exchanges it anyway.
func (m *Mesh) recvMsg(b []byte, relay bool) {
	now := m.now()
	d := decoder{b: b[1:]}
	switch b[0] {
	case msgObservation:
		if o, err := decodeObservation(&d); err == nil && m.st.mergeObservation(o, now) {
			m.dirty.Store(true)
			if relay {
				m.queueObservation(m.st.record(o.Observer, o.Provider))
			}
		}
	case msgLoad:
		if l, err := decodeLoad(&d); err == nil && m.st.mergeLoad(l, now) && relay {
			m.queueLoad(m.st.loadRecordOf(l.Observer))
		}
	case msgLeaving:
		if name := d.str(); d.err == nil && name != "" {
			m.membersMu.Lock()
			if _, ok := m.members[name]; ok {
				m.leaving[name] = now
			}
			m.membersMu.Unlock()
		}
	case msgState:
		if d.byte1() < stateVersion || d.err != nil {
			return
		}
		for n := d.uvarint(); n > 0 && d.err == nil; n-- {
			// A state holds reports only, never another state.
			if rec := d.bytes(); len(rec) > 0 && (rec[0] == msgObservation || rec[0] == msgLoad) {
				m.recvMsg(rec, false)
			}
		}
	}
}

// queueObservation queues r for gossip. Each transmission encodes it
// afresh from its deadlines (see broadcast), so relays never stretch a
// time to live or a cooldown by the time they spent queued.
func (m *Mesh) queueObservation(r *obsRecord) {
	if r == nil {
		return
	}
	rec := *r
	m.queue.QueueBroadcast(&broadcast{name: "o\x00" + rec.Observer + "\x00" + rec.Provider, render: func(e *encoder) {
		o := rec.current(m.now())
		o.encode(e)
	}})
}

func (m *Mesh) queueLoad(l *loadRecord) {
	if l == nil {
		return
	}
	rec := *l
	m.queue.QueueBroadcast(&broadcast{name: "l\x00" + rec.Observer, render: func(e *encoder) {
		c := rec.current(m.now())
		c.encode(e)
	}})
}

// encodeState is the push/pull state: every fresh report, as it stands.
func (m *Mesh) encodeState() []byte {
	now := m.now()
	obs, loads := m.st.snapshot(now)
	var e encoder
	e.byte1(msgState)
	e.byte1(stateVersion)
	e.uvarint(uint64(len(obs) + len(loads)))
	var rec encoder
	for i := range obs {
		rec.b = rec.b[:0]
		o := obs[i].current(now)
		o.encode(&rec)
		e.bytes(rec.b)
	}
	for i := range loads {
		rec.b = rec.b[:0]
		l := loads[i].current(now)
		l.encode(&rec)
		e.bytes(rec.b)
	}
	return e.b
}
