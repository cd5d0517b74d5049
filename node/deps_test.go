package node_test

import (
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/llmesh/llmesh"

// TestImportRules keeps DESIGN.md's package table true: each package may
// import only the project packages listed for it.
func TestImportRules(t *testing.T) {
	allowed := map[string][]string{
		"region":       {},
		"route":        {"region"},
		"gossip":       {"route", "region"},
		"proto":        {},
		"consensus":    {"proto", "route", "region"},
		"sim/emulator": {"route", "region"},
		"node":         {"route", "region", "gossip", "consensus", "proto", "node/config", "node/pki"},
		"node/config":  {"route", "region", "gossip", "consensus", "proto", "node/pki"},
		"node/pki":     {},
		"sim/harness":  {"node", "route", "region", "gossip", "consensus", "proto", "sim/emulator"},
		"sim/bench":    {}, // the load generator: standard library only
		"cmd/llmesh":   {"*"},
		"sim/loadtest": {}, // tests' balancer and load: standard library and openai-go
		"sim/des":      {"route", "region", "consensus", "proto"},
		"deploy":       {}, // files and their tests only
	}
	out, err := exec.Command("go", "list", "-json=ImportPath,Deps,Doc,Standard", module+"/...").Output()
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	seen := 0
	for dec.More() {
		var p struct {
			ImportPath, Doc string
			Deps            []string
		}
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		rel := strings.TrimPrefix(strings.TrimPrefix(p.ImportPath, module), "/")
		if p.Doc == "" && rel != "" {
			t.Errorf("%s has no package doc saying what it owns", rel)
		}
		rules, ok := allowed[rel]
		if !ok {
			if rel != "sim" {
				t.Errorf("%s is not in the import rules; add it to this test and DESIGN.md", rel)
			}
			continue
		}
		seen++
		if len(rules) == 1 && rules[0] == "*" {
			continue
		}
		for _, d := range p.Deps {
			if !strings.HasPrefix(d, module+"/") {
				continue
			}
			dep := strings.TrimPrefix(d, module+"/")
			ok := false
			for _, a := range rules {
				if dep == a || strings.HasPrefix(dep, a+"/") {
					ok = true
				}
			}
			if !ok {
				t.Errorf("%s imports %s, which it must not", rel, dep)
			}
		}
	}
	if seen < len(allowed) {
		t.Errorf("only %d of %d packages listed", seen, len(allowed))
	}
}
