package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/llmesh/llmesh/node/audit"
)

// llmesh audit filters a trail by tenant, request and time, prints JSON,
// and -verify fails on a changed line.
func TestAuditVerb(t *testing.T) {
	dir := t.TempDir()
	var lines []string
	prev := ""
	now := time.Now().UTC()
	for _, r := range []audit.Record{
		{Time: now.Add(-48 * time.Hour), RequestID: "old", Tenant: "acme", Residency: "eu", Nodes: []string{"eu-1"}, Provider: "gpu-eu", ProviderJurisdictions: "eu", Status: 200, Outcome: "ok"},
		{Time: now.Add(-time.Hour), RequestID: "r1", Tenant: "acme", Residency: "eu", Nodes: []string{"us-1", "eu-1"}, Provider: "gpu-eu", ProviderJurisdictions: "eu", Status: 200, Outcome: "ok"},
		{Time: now.Add(-time.Minute), RequestID: "r2", Tenant: "globex", Residency: "us", Nodes: []string{"us-1"}, Status: 503, Outcome: "refused", Error: "no_compliant_provider"},
	} {
		r.Node, r.Prev = "eu-1", prev
		b, _ := json.Marshal(r)
		sum := sha256.Sum256(b)
		prev = hex.EncodeToString(sum[:])
		lines = append(lines, string(b))
	}
	trail := filepath.Join(dir, "audit.jsonl")
	if err := os.WriteFile(trail, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) (string, error) {
		out, err := exec.Command(binary, append([]string{"audit", "-dir", dir}, args...)...).CombinedOutput()
		return string(out), err
	}
	out, err := run("-tenant", "acme", "-since", "24h")
	if err != nil || !strings.Contains(out, "r1") || !strings.Contains(out, "us-1>eu-1") || strings.Contains(out, "old") || strings.Contains(out, "r2") {
		t.Fatalf("-tenant acme -since 24h: %v\n%s", err, out)
	}
	out, err = run("-request", "r2", "-json")
	var rec audit.Record
	if err != nil || json.Unmarshal([]byte(out), &rec) != nil || rec.Error != "no_compliant_provider" || rec.Tenant != "globex" {
		t.Fatalf("-request r2 -json: %v\n%s", err, out)
	}
	if out, err := run("-verify"); err != nil || !strings.Contains(out, "3 records, chain intact") {
		t.Fatalf("-verify: %v\n%s", err, out)
	}
	changed := strings.Replace(strings.Join(lines, "\n"), `"provider":"gpu-eu","provider_jurisdictions":"eu"`, `"provider":"gpu-eu","provider_jurisdictions":"us"`, 1)
	if err := os.WriteFile(trail, []byte(changed+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := run("-verify"); err == nil || !strings.Contains(out, "line 2: the audit chain breaks here") {
		t.Fatalf("-verify of a changed trail: %v\n%s", err, out)
	}
}
