package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"time"

	"github.com/llmesh/llmesh/sim/harness"
	"github.com/llmesh/llmesh/sim/lincheck"
)

// linKey is the key of tenant lin, whose budget, limits and key settings
// the fault run's operators change and read.
const linKey = "sk-fault-lin-0123456789ab"

var linKeyID = harness.KeySHA256(linKey)[:12]

// linWrite is one admin write: the key it sets in the model, and its
// request.
type linWrite struct {
	key, method, path string
	body              func(v int64) any
}

var linWrites = []linWrite{
	{"budget:lin", http.MethodPut, "/v1/mesh/budgets/lin", func(v int64) any { return map[string]any{"usd": v, "period": "total"} }},
	{"limits:lin", http.MethodPut, "/v1/mesh/tenants/lin/limits", func(v int64) any { return map[string]any{"rpm": v} }},
	{"key:lin", http.MethodPut, "/v1/mesh/tenants/lin/keys/" + linKeyID, func(v int64) any { return map[string]any{"rpm": v} }},
}

// linStart writes each register once, before the clients start, so that
// every read has a write before it.
func (f *faultRun) linStart() {
	for _, w := range linWrites {
		ok := false
		for range 50 {
			if f.linDo(0, w) == http.StatusOK {
				ok = true
				break
			}
			time.Sleep(100 * time.Millisecond) // the leader is being elected
		}
		if !ok {
			f.t.Fatalf("%s could not be set", w.key)
		}
	}
}

// linDo sends one write to an up node and records it: answered, refused
// (4xx: it was not applied, and is not recorded) or lost (it may have
// been applied). It returns the status, 0 for none.
func (f *faultRun) linDo(c int, w linWrite) int {
	n := f.upNode()
	if n == nil {
		return 0
	}
	v := f.linSeq.Add(1)
	b, _ := json.Marshal(w.body(v))
	op := f.lin.Call(c, lincheck.Input{Write: true, Key: w.key, Value: fmt.Sprint(v)})
	req, _ := http.NewRequest(w.method, n.http+w.path, bytes.NewReader(b))
	resp, err := linHTTP.Do(req)
	if err != nil {
		op.Lost()
		return 0
	}
	resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusOK:
		op.Return(lincheck.Output{})
	case resp.StatusCode >= 500:
		op.Lost()
	}
	return resp.StatusCode
}

var linHTTP = &http.Client{Timeout: 5 * time.Second}

// upNode is a node that is up, at random; nil when none is.
func (f *faultRun) upNode() *faultNode {
	var up []*faultNode
	for _, n := range f.nodes {
		if n.up.Load() {
			up = append(up, n)
		}
	}
	if len(up) == 0 {
		return nil
	}
	return up[rand.IntN(len(up))]
}

// linClient is operator c: writes and linearizable reads, one at a time,
// to nodes that are up, until ctx ends.
func (f *faultRun) linClient(ctx context.Context, c int) {
	for ctx.Err() == nil {
		time.Sleep(time.Duration(50+rand.IntN(150)) * time.Millisecond) // an operator's pace
		switch k := rand.IntN(5); {
		case k < 3:
			f.linDo(c, linWrites[k])
		case k == 3:
			f.linReadTenants(c)
		default:
			f.linReadSettled(c)
		}
	}
}

// linReadTenants reads lin's budget, limits and key settings at once,
// through the leader.
func (f *faultRun) linReadTenants(c int) {
	n := f.upNode()
	if n == nil {
		return
	}
	keys := []string{"budget:lin", "limits:lin", "key:lin"}
	ops := make([]*lincheck.Op, len(keys))
	for i, k := range keys {
		ops[i] = f.lin.Call(c, lincheck.Input{Key: k})
	}
	var doc struct {
		Tenants []struct {
			Name        string
			BudgetUSD   *float64 `json:"budget_usd"`
			Limits      *struct{ RPM int64 }
			KeySettings []struct {
				ID     string
				Limits *struct{ RPM int64 }
			} `json:"key_settings"`
		}
	}
	resp, err := linHTTP.Get(n.http + "/v1/mesh/tenants")
	if err != nil {
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&doc) != nil {
		return
	}
	for _, t := range doc.Tenants {
		if t.Name != "lin" {
			continue
		}
		vals := []string{"", "", ""}
		if t.BudgetUSD != nil {
			vals[0] = fmt.Sprint(int64(*t.BudgetUSD))
		}
		if t.Limits != nil {
			vals[1] = fmt.Sprint(t.Limits.RPM)
		}
		for _, k := range t.KeySettings {
			if k.ID == linKeyID && k.Limits != nil {
				vals[2] = fmt.Sprint(k.Limits.RPM)
			}
		}
		for i, op := range ops {
			op.Return(lincheck.Output{Value: vals[i]})
		}
	}
}

// linReadSettled reads what acme's books have settled, linearizably.
func (f *faultRun) linReadSettled(c int) {
	n := f.upNode()
	if n == nil {
		return
	}
	op := f.lin.Call(c, lincheck.Input{Key: "settled:acme"})
	resp, err := linHTTP.Get(n.http + "/v1/mesh/budgets")
	if err != nil {
		return
	}
	defer resp.Body.Close()
	var doc struct {
		Consistency string
		Budgets     []struct {
			Tenant     string
			SettledUSD float64 `json:"settled_usd"`
		}
	}
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&doc) != nil || doc.Consistency != "linearizable" {
		return
	}
	for _, b := range doc.Budgets {
		if b.Tenant == "acme" {
			op.Return(lincheck.Output{Value: fmt.Sprintf("%.9f", b.SettledUSD)})
		}
	}
}
