package gossip

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// collector reads the mesh's figures when Prometheus scrapes: nothing is
// updated on the gossip path for metrics' sake.
type collector struct{ m *Mesh }

var (
	descMembers = prometheus.NewDesc("llmesh_gossip_members",
		"Members of the mesh this node knows of, by state (alive, draining, leaving, failed, left).", []string{"state"}, nil)
	descQueue = prometheus.NewDesc("llmesh_gossip_broadcast_queue_depth",
		"Broadcasts waiting to be gossiped.", nil, nil)
	descBytes = prometheus.NewDesc("llmesh_gossip_bytes_total",
		"Gossip bytes, packets and streams, by direction (sent or received).", []string{"direction"}, nil)
	descObservations = prometheus.NewDesc("llmesh_gossip_observations",
		"Fresh provider observations held, this node's own included.", nil, nil)
	descAge = prometheus.NewDesc("llmesh_gossip_observation_age_max_seconds",
		"Age of the oldest fresh observation held: how long since its observer's report was last heard.", nil, nil)
	descJoined = prometheus.NewDesc("llmesh_gossip_joined",
		"1 once this node has joined the mesh through a seed (or needs none).", nil, nil)
)

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descMembers, descQueue, descBytes, descObservations, descAge, descJoined} {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	m := c.m
	counts := map[string]int{"alive": 0, "draining": 0, "leaving": 0, "failed": 0, "left": 0}
	for _, mem := range m.Members() {
		counts[mem.State]++
	}
	for state, n := range counts {
		ch <- prometheus.MustNewConstMetric(descMembers, prometheus.GaugeValue, float64(n), state)
	}
	ch <- prometheus.MustNewConstMetric(descQueue, prometheus.GaugeValue, float64(m.QueueDepth()))
	sent, recv := m.Bytes()
	ch <- prometheus.MustNewConstMetric(descBytes, prometheus.CounterValue, float64(sent), "sent")
	ch <- prometheus.MustNewConstMetric(descBytes, prometheus.CounterValue, float64(recv), "received")
	now := m.now()
	obs, _ := m.st.snapshot(now)
	var oldest time.Duration
	for i := range obs {
		oldest = max(oldest, now.Sub(obs[i].Received))
	}
	ch <- prometheus.MustNewConstMetric(descObservations, prometheus.GaugeValue, float64(len(obs)))
	ch <- prometheus.MustNewConstMetric(descAge, prometheus.GaugeValue, oldest.Seconds())
	joined := 0.0
	if m.Joined() {
		joined = 1
	}
	ch <- prometheus.MustNewConstMetric(descJoined, prometheus.GaugeValue, joined)
}
