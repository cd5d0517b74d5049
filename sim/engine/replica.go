package engine

import "time"

// Replica drives an Engine in the virtual time of a discrete-event
// simulator: it asks the simulator for an event at the end of each
// stretch of steps, and reports each request's progress at the virtual
// time it is made. A stretch of several steps (see Engine.Begin) is cut
// short when a request arrives during it, so that the request joins the
// batch at the next step, as it would stepping one step at a time: the
// events are the same, fewer of them are scheduled.
type Replica struct {
	eng      *Engine
	maxSteps int
	at       func(t time.Duration, fn func()) // schedules fn at virtual time t
	report   func(t time.Duration, ev Event)
	start    time.Duration // when the stretch under way began
	step     time.Duration // its steps' duration
	end      int           // how many steps it runs: when its End is scheduled; 0 when idle
	gen      uint64        // the scheduled End in force; others are stale
	ending   bool          // in End's callbacks
}

// NewReplica drives eng with at, which must run fn at virtual time t
// (never before the time of the call), and tells report of every event.
// maxSteps bounds a stretch (1 steps one step at a time).
func NewReplica(eng *Engine, maxSteps int, at func(t time.Duration, fn func()), report func(t time.Duration, ev Event)) *Replica {
	return &Replica{eng: eng, maxSteps: max(1, maxSteps), at: at, report: report}
}

// Engine is the engine driven.
func (p *Replica) Engine() *Engine { return p.eng }

// Add queues r at virtual time now, which must not be before the time
// of the last event: it joins the batch at the next step.
func (p *Replica) Add(now time.Duration, r Request) error {
	if err := p.eng.Add(r); err != nil {
		return err
	}
	switch {
	case p.ending:
		// the stretch is ending at now; the next begins after the events
	case p.end == 0:
		p.begin(now)
	case p.end > 1:
		if j := int((now-p.start)/p.step) + 1; j < p.end {
			p.schedule(max(j, 1))
		}
	}
	return nil
}

// Cancel removes request id at once (see Engine.Cancel).
func (p *Replica) Cancel(id uint64) bool { return p.eng.Cancel(id) }

func (p *Replica) begin(t time.Duration) {
	d, n := p.eng.Begin(p.maxSteps)
	if n == 0 {
		p.end = 0
		return
	}
	p.start, p.step = t, d
	p.schedule(n)
}

// schedule (re)schedules the stretch's End after n steps.
func (p *Replica) schedule(n int) {
	p.end = n
	p.gen++
	g, t := p.gen, p.start+time.Duration(n)*p.step
	p.at(t, func() {
		if g == p.gen {
			p.finish(t)
		}
	})
}

func (p *Replica) finish(t time.Duration) {
	p.ending = true
	p.eng.End(p.end, func(ev Event) { p.report(t, ev) })
	p.ending = false
	p.begin(t)
}
