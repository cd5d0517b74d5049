package gossip

import (
	"fmt"
	"math"
	"time"
)

// Observation is what one node has seen of one provider. Durations are
// relative to the moment it is sent, not absolute times: nodes' clocks
// disagree, and a receiver turns each into a deadline on its own clock.
// Every transmission, the first or a relay, re-encodes them from those
// deadlines, so time spent queued or relayed is never added back; only
// network delay is, which makes a cooldown seen elsewhere end a little
// later, never earlier.
type Observation struct {
	Observer string
	Provider string
	// Version orders the observer's reports; the highest wins.
	Version uint64
	// TTL is how long the report stays valid after it is sent.
	TTL time.Duration
	// TTFT and Latency are the observer's moving averages; 0 if unknown.
	TTFT, Latency time.Duration
	// ErrorRate is the observer's moving average of failed attempts.
	ErrorRate float64
	// Ejected, with EjectedFor left of its backoff, says the observer's
	// outlier detector has taken the provider out.
	Ejected    bool
	EjectedFor time.Duration
	// CoolingFor is what was left of a 429 cooldown; 0 if none.
	CoolingFor time.Duration
	// IdleFor is how long since the observer last sent it a request.
	IdleFor time.Duration
	// RemainingRequests and RemainingTokens are the provider's own count
	// of its rate window (x-ratelimit-remaining-*); -1 when unknown.
	RemainingRequests, RemainingTokens int64
}

// Load is what a node reports of its own load.
type Load struct {
	Observer string
	Version  uint64
	TTL      time.Duration
	InFlight int // requests being served
	Queue    int // requests waiting for capacity
	// Spare is the unspent part of the node's rate share of each limited
	// provider it holds one of (requests it may still send in the current
	// window): a peer whose own share is spent forwards there. At most
	// MaxSpares, most spare first.
	Spare []Spare
	// Engines is what the node's scrapes say of the self-hosted
	// providers it calls: how much room each has, so that a node of
	// another region can tell whether forwarding there will queue. At
	// most MaxEngines.
	Engines []Engine
}

// Engine is one self-hosted provider's replicas as a node scraped them.
type Engine struct {
	Provider string
	Replicas int // replicas with fresh figures
	// Running and Waiting are the requests they run and queue, summed.
	Running, Waiting int
	KVUsage          float64 // the fullest replica's KV cache, 0 to 1
}

// MaxEngines bounds the providers one load report's engines name.
const MaxEngines = 16

// Spare is what is left of one node's rate share of one provider.
type Spare struct {
	Provider string
	Requests int
}

// MaxSpares bounds the providers one load report names.
const MaxSpares = 32

// Message types, the first byte of every gossip message.
const (
	msgObservation byte = 1
	msgLoad        byte = 2
	msgState       byte = 3 // push/pull: a batch of the above
	msgLeaving     byte = 4 // sent straight to every member before a graceful leave

	observationVersion = 1
	loadVersion        = 1
	stateVersion       = 1
)

func ms(d time.Duration) uint64 { return uint64(max(d, 0) / time.Millisecond) }

// ms32 renders a duration in fixed-width milliseconds (up to 49 days), so
// that a message re-encoded later keeps its length, as memberlist's
// broadcast queue requires.
func ms32(d time.Duration) uint32 { return uint32(min(ms(d), math.MaxUint32)) }
func us(d time.Duration) uint64   { return uint64(max(d, 0) / time.Microsecond) }

func fromMS(v uint64) time.Duration {
	return time.Duration(min(v, math.MaxInt64/uint64(time.Millisecond))) * time.Millisecond
}
func fromUS(v uint64) time.Duration {
	return time.Duration(min(v, math.MaxInt64/uint64(time.Microsecond))) * time.Microsecond
}

func (o *Observation) encode(e *encoder) {
	e.byte1(msgObservation)
	e.byte1(observationVersion)
	e.str(o.Observer)
	e.str(o.Provider)
	e.uvarint(o.Version)
	e.u32(ms32(o.TTL))
	e.uvarint(us(o.TTFT))
	e.uvarint(us(o.Latency))
	e.uvarint(uint64(math.Round(math.Max(0, math.Min(1, o.ErrorRate)) * 1e4)))
	e.boolean(o.Ejected)
	e.u32(ms32(o.EjectedFor))
	e.u32(ms32(o.CoolingFor))
	e.u32(ms32(o.IdleFor))
	e.varint(o.RemainingRequests)
	e.varint(o.RemainingTokens)
}

func decodeObservation(d *decoder) (Observation, error) {
	if v := d.byte1(); d.err == nil && v < observationVersion {
		return Observation{}, fmt.Errorf("gossip: observation version %d is not supported", v)
	}
	o := Observation{
		Observer:          d.str(),
		Provider:          d.str(),
		Version:           d.uvarint(),
		TTL:               fromMS(uint64(d.u32())),
		TTFT:              fromUS(d.uvarint()),
		Latency:           fromUS(d.uvarint()),
		ErrorRate:         float64(min(d.uvarint(), 1e4)) / 1e4,
		Ejected:           d.boolean(),
		EjectedFor:        fromMS(uint64(d.u32())),
		CoolingFor:        fromMS(uint64(d.u32())),
		IdleFor:           fromMS(uint64(d.u32())),
		RemainingRequests: d.varint(),
		RemainingTokens:   d.varint(),
	}
	if d.err == nil && (o.Observer == "" || o.Provider == "") {
		return Observation{}, fmt.Errorf("gossip: observation without observer or provider")
	}
	return o, d.err
}

func (l *Load) encode(e *encoder) {
	e.byte1(msgLoad)
	e.byte1(loadVersion)
	e.str(l.Observer)
	e.uvarint(l.Version)
	e.u32(ms32(l.TTL))
	e.uvarint(uint64(max(l.InFlight, 0)))
	e.uvarint(uint64(max(l.Queue, 0)))
	// Added after the first release: older nodes stop reading here.
	n := min(len(l.Spare), MaxSpares)
	e.uvarint(uint64(n))
	for _, s := range l.Spare[:n] {
		e.str(s.Provider)
		e.uvarint(uint64(max(s.Requests, 0)))
	}
	// Added with engine signals: older nodes stop reading here.
	n = min(len(l.Engines), MaxEngines)
	e.uvarint(uint64(n))
	for _, g := range l.Engines[:n] {
		e.str(g.Provider)
		e.uvarint(uint64(max(g.Replicas, 0)))
		e.uvarint(uint64(max(g.Running, 0)))
		e.uvarint(uint64(max(g.Waiting, 0)))
		e.uvarint(uint64(math.Round(min(max(g.KVUsage, 0), 1) * 1000))) // per mille
	}
}

func decodeLoad(d *decoder) (Load, error) {
	if v := d.byte1(); d.err == nil && v < loadVersion {
		return Load{}, fmt.Errorf("gossip: load version %d is not supported", v)
	}
	l := Load{
		Observer: d.str(),
		Version:  d.uvarint(),
		TTL:      fromMS(uint64(d.u32())),
		InFlight: int(min(d.uvarint(), math.MaxInt32)),
		Queue:    int(min(d.uvarint(), math.MaxInt32)),
	}
	if d.err == nil && len(d.b) > 0 { // a report of a newer node
		n := d.uvarint()
		if n > MaxSpares {
			return Load{}, fmt.Errorf("gossip: load names %d spare shares, more than %d", n, MaxSpares)
		}
		for range n {
			s := Spare{Provider: d.str(), Requests: int(min(d.uvarint(), math.MaxInt32))}
			if d.err != nil || s.Provider == "" {
				break
			}
			l.Spare = append(l.Spare, s)
		}
	}
	if d.err == nil && len(d.b) > 0 {
		if err := decodeEngines(d, &l); err != nil {
			return Load{}, err
		}
	}
	if d.err == nil && l.Observer == "" {
		return Load{}, fmt.Errorf("gossip: load without observer")
	}
	return l, d.err
}

// decodeEngines reads a load report's engines.
func decodeEngines(d *decoder, l *Load) error {
	n := d.uvarint()
	if n > MaxEngines {
		return fmt.Errorf("gossip: load names %d engines, more than %d", n, MaxEngines)
	}
	for range n {
		g := Engine{Provider: d.str(), Replicas: int(min(d.uvarint(), math.MaxInt32)),
			Running: int(min(d.uvarint(), math.MaxInt32)), Waiting: int(min(d.uvarint(), math.MaxInt32)),
			KVUsage: float64(min(d.uvarint(), 1000)) / 1000}
		if d.err != nil || g.Provider == "" {
			break
		}
		l.Engines = append(l.Engines, g)
	}
	return nil
}
