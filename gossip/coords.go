package gossip

import (
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/hashicorp/serf/coordinate"
)

// coords estimates round-trip times to peers with Vivaldi network
// coordinates: every ack memberlist sends carries this node's coordinate,
// and every completed ping updates it with the measured RTT and caches the
// peer's. It implements memberlist.PingDelegate.
type coords struct {
	client *coordinate.Client
	mu     sync.RWMutex
	peers  map[string]*coordinate.Coordinate
}

var _ memberlist.PingDelegate = (*coords)(nil)

const coordVersion = 1

func newCoords() (*coords, error) {
	c, err := coordinate.NewClient(coordinate.DefaultConfig())
	if err != nil {
		return nil, err
	}
	return &coords{client: c, peers: map[string]*coordinate.Coordinate{}}, nil
}

func encodeCoord(c *coordinate.Coordinate) []byte {
	var e encoder
	e.byte1(coordVersion)
	e.uvarint(uint64(len(c.Vec)))
	for _, x := range c.Vec {
		e.f64(x)
	}
	e.f64(c.Error)
	e.f64(c.Adjustment)
	e.f64(c.Height)
	return e.b
}

func decodeCoord(b []byte) (*coordinate.Coordinate, error) {
	d := decoder{b: b}
	if v := d.byte1(); d.err == nil && v != coordVersion {
		return nil, fmt.Errorf("gossip: coordinate version %d is not supported", v)
	}
	n := d.uvarint()
	if n > 64 {
		return nil, errShort
	}
	c := &coordinate.Coordinate{Vec: make([]float64, n)}
	for i := range c.Vec {
		c.Vec[i] = d.f64()
	}
	c.Error, c.Adjustment, c.Height = d.f64(), d.f64(), d.f64()
	if d.err != nil {
		return nil, d.err
	}
	if !c.IsValid() {
		return nil, fmt.Errorf("gossip: invalid coordinate")
	}
	return c, nil
}

// AckPayload implements memberlist.PingDelegate.
func (c *coords) AckPayload() []byte { return encodeCoord(c.client.GetCoordinate()) }

// NotifyPingComplete implements memberlist.PingDelegate.
func (c *coords) NotifyPingComplete(other *memberlist.Node, rtt time.Duration, payload []byte) {
	peer, err := decodeCoord(payload)
	if err != nil {
		return
	}
	if _, err := c.client.Update(other.Name, peer, rtt); err != nil {
		return // incompatible or implausible: ignored, as serf does
	}
	c.mu.Lock()
	c.peers[other.Name] = peer
	c.mu.Unlock()
}

// rtt estimates the round trip to name.
func (c *coords) rtt(name string) (time.Duration, bool) {
	c.mu.RLock()
	peer := c.peers[name]
	c.mu.RUnlock()
	if peer == nil {
		return 0, false
	}
	return c.client.GetCoordinate().DistanceTo(peer), true
}

func (c *coords) forget(name string) {
	c.client.ForgetNode(name)
	c.mu.Lock()
	delete(c.peers, name)
	c.mu.Unlock()
}
