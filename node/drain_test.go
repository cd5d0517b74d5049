package node_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llmesh/llmesh/node"
	"github.com/llmesh/llmesh/node/views"
	"github.com/llmesh/llmesh/sim/emulator"
	"github.com/llmesh/llmesh/sim/harness/wait"
)

// Draining the Raft leader of a three-voter mesh: /readyz turns 503 at
// once; requests that still reach it during the grace are handed to a
// peer (and answered); the stream it was serving finishes whole; it
// hands over leadership, leaves gossip, is removed from Raft, and stops.
func TestDrainHandsOffAndLeaves(t *testing.T) {
	m := startMeshWith(t, 3, []upstream{
		{name: "p", kind: "openai", in: 1, out: 1, emu: emulator.Config{TPS: 40}},
	}, voters(t, 3, func(i int, c *node.Config) {
		c.Node.Drain = node.DrainSection{Grace: node.Duration(1500 * time.Millisecond), Timeout: node.Duration(20 * time.Second)}
	}), fastRaft)
	leader := raftLeader(t, m)
	name, url := m.nodes[leader].Name(), m.urls[leader]
	var others []string
	for i, u := range m.urls {
		if i != leader {
			others = append(others, u)
		}
	}

	// A stream of about a second and a half, under way when the drain
	// begins.
	streamDone := make(chan string, 1)
	go func() { streamDone <- lastStreamLine(url) }()
	wait.For(t, 5*time.Second, "the stream to start", func() bool { return m.nodes[leader].Status(context.Background()).InFlight > 0 })

	drainStart := time.Now()
	resp, err := http.Post(url+"/v1/mesh/drain", "application/json", nil)
	if err != nil || resp.StatusCode != http.StatusAccepted {
		t.Fatalf("drain: %v %v", err, resp)
	}
	var ack struct{ Phase string }
	if err := json.NewDecoder(resp.Body).Decode(&ack); err != nil || ack.Phase != "grace" {
		t.Fatalf("the drain's answer: phase %q (%v), want the phase it started, grace", ack.Phase, err)
	}
	resp.Body.Close()
	if r := mustGet(t, url+"/readyz"); r.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("/readyz of a draining node: %d, want 503", r.StatusCode)
	}

	// Requests that still arrive during the grace are served by a peer.
	if handed, failures := lateRequests(t, url, name); len(failures) > 0 {
		t.Fatalf("requests during the grace: %d handed off, failures: %q", handed, failures)
	}
	if last := <-streamDone; last != "data: [DONE]" {
		t.Fatalf("the stream in flight ended with %q, want data: [DONE]", last)
	}

	select {
	case <-m.nodes[leader].Done():
	case <-time.After(30 * time.Second):
		t.Fatal("the drained node did not stop")
	}
	t.Logf("the drained node stopped %s after the drain began", time.Since(drainStart).Round(time.Millisecond))
	awaitLeft(t, others[0], name)
	// Raft removed it: the members list no longer calls it a voter.
	var members views.Members
	getJSON(t, others[0]+"/v1/mesh/members", "", &members)
	for _, mb := range members.Members {
		if mb.Name == name && (mb.Voter || mb.State != "left") {
			t.Fatalf("the drained node, out of Raft, in the members list: %+v", mb)
		}
	}
	t.Logf("the others agree on a new leader and the Raft configuration %s after the drain began", time.Since(drainStart).Round(time.Millisecond))
	// The mesh still serves.
	for _, u := range others {
		if r := postTo(t, u, `{"model":"gpt-4o-mini","max_tokens":3,"messages":[{"role":"user","content":"after"}]}`); r.StatusCode != http.StatusOK {
			t.Fatalf("after the drain, %s answered %d", u, r.StatusCode)
		}
	}
}

// raftLeader waits for a node of m to report itself the Raft leader and
// returns its index.
func raftLeader(t *testing.T, m *meshFixture) int {
	leader := -1
	wait.For(t, 20*time.Second, "a leader", func() bool {
		for i, u := range m.urls {
			var st views.Status
			if getJSON(t, u+"/v1/mesh/status", "", &st) == http.StatusOK && st.Raft == "Leader" {
				leader = i
				return true
			}
		}
		return false
	})
	return leader
}

// lastStreamLine streams a completion of 60 tokens from url and returns
// its last data line, or the error.
func lastStreamLine(url string) string {
	req, _ := http.NewRequest(http.MethodPost, url+"/v1/chat/completions", strings.NewReader(
		`{"model":"gpt-4o-mini","stream":true,"max_tokens":60,"messages":[{"role":"user","content":"hi"}]}`))
	req.Header.Set("Authorization", "Bearer "+testKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "error: " + err.Error()
	}
	defer resp.Body.Close()
	last := ""
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "data: ") {
			last = sc.Text()
		}
	}
	return last
}

// lateRequests sends six requests, half of them streams, to the draining
// node name at url, and returns how many were handed off to a peer and
// what was wrong with the others.
func lateRequests(t *testing.T, url, name string) (handed int, failures []string) {
	var wg sync.WaitGroup
	var mu sync.Mutex
	for i := range 6 {
		wg.Go(func() {
			body := fmt.Sprintf(`{"model":"gpt-4o-mini","max_tokens":5,"messages":[{"role":"user","content":"late %d"}]}`, i)
			if i%2 == 1 {
				body = fmt.Sprintf(`{"model":"gpt-4o-mini","stream":true,"max_tokens":5,"messages":[{"role":"user","content":"late %d"}]}`, i)
			}
			req, _ := http.NewRequest(http.MethodPost, url+"/v1/chat/completions", strings.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+testKey)
			resp, err := http.DefaultClient.Do(req)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				failures = append(failures, err.Error())
				return
			}
			b := readAll(t, resp.Body)
			resp.Body.Close()
			switch {
			case resp.StatusCode != http.StatusOK:
				failures = append(failures, fmt.Sprintf("%d %s", resp.StatusCode, b))
			case i%2 == 1 && !strings.Contains(b, "[DONE]"):
				failures = append(failures, "stream without [DONE]: "+b)
			case resp.Header.Get("X-Llmesh-Node") != name || resp.Header.Get("X-Llmesh-Via") == name ||
				!strings.Contains(resp.Header.Get("X-Llmesh-Route"), "handed off"):
				failures = append(failures, fmt.Sprintf("headers node=%q via=%q route=%q", resp.Header.Get("X-Llmesh-Node"),
					resp.Header.Get("X-Llmesh-Via"), resp.Header.Get("X-Llmesh-Route")))
			default:
				handed++
			}
		})
	}
	wg.Wait()
	return handed, failures
}

// awaitLeft waits until the node at url sees another leader than name,
// name left, and a Raft configuration of the two others.
func awaitLeft(t *testing.T, url, name string) {
	wait.For(t, 15*time.Second, "another leader, the drained node left and out of Raft", func() bool {
		var st views.Status
		if getJSON(t, url+"/v1/mesh/status", "", &st) != http.StatusOK || st.Leader == "" || st.Leader == name || st.Members["left"] != 1 {
			return false
		}
		var doc struct{ Peers []struct{ ID string } }
		if getJSON(t, url+"/v1/mesh/raft/peers", "", &doc) != http.StatusOK {
			return false
		}
		for _, p := range doc.Peers {
			if p.ID == name {
				return false
			}
		}
		return len(doc.Peers) == 2
	})
}
