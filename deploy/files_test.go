package deploy_test

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/labels"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/llmesh/llmesh/node"
	"github.com/llmesh/llmesh/sim/harness"
)

// secretEnv answers every environment variable a configuration names, as
// the container's environment does.
func secretEnv(name string) string {
	if name == "LLMESH_GOSSIP_KEY" {
		return "eo1+CYJuOW+p24MMhIDnsm9WibPdrVXqfQMtNEgixLs="
	}
	return "set-from-the-environment"
}

// checkNodeConfig loads a node configuration as the agent does, with the
// flags given, and builds the node: every field is checked as at start.
func checkNodeConfig(t *testing.T, what string, b []byte, name, advertise string) *node.Config {
	t.Helper()
	cfg, err := node.ParseConfig(b)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if name != "" {
		cfg.Node.Name = name
	}
	if advertise != "" {
		cfg.Node.Advertise = advertise
	}
	if _, err := node.New(cfg, node.Options{Getenv: secretEnv}); err != nil {
		t.Fatalf("%s does not make a node: %v", what, err)
	}
	return cfg
}

// TestKubernetesManifests decodes every object of deploy/k8s as the
// Kubernetes API types, refusing unknown fields (the API server's schema
// in Go), then checks what llmesh needs of them.
func TestKubernetesManifests(t *testing.T) {
	raw, err := os.ReadFile("k8s/llmesh.yaml")
	if err != nil {
		t.Fatal(err)
	}
	m := parseManifests(t, raw)
	if len(m.sets) != 3 || len(m.pdbs) != 1 {
		t.Fatalf("%d StatefulSets and %d PodDisruptionBudgets, want one per region (3) and one", len(m.sets), len(m.pdbs))
	}
	pdb := m.pdbs[0]
	if pdb.Spec.MaxUnavailable == nil || pdb.Spec.MaxUnavailable.IntValue() != 1 {
		t.Fatal("the disruption budget must let one pod go at a time: the Raft quorum")
	}
	seeds := m.services["llmesh-gossip"]
	if seeds.Spec.ClusterIP != "None" || !seeds.Spec.PublishNotReadyAddresses {
		t.Fatal("llmesh-gossip must be headless and publish pods before they are ready (a node is ready once it joined)")
	}
	voters := 0
	for _, s := range m.sets {
		if m.checkStatefulSet(t, s) {
			voters++
		}
	}
	if voters != 3 {
		t.Fatalf("%d voters, want 3 (one per region)", voters)
	}
}

// k8sManifests are the documents of k8s/llmesh.yaml, by kind.
type k8sManifests struct {
	sets     []appsv1.StatefulSet
	services map[string]corev1.Service
	configs  map[string]corev1.ConfigMap
	pdbs     []policyv1.PodDisruptionBudget
}

// parseManifests decodes each document strictly by its kind, and fails
// on a kind the manifests should not have.
func parseManifests(t *testing.T, raw []byte) *k8sManifests {
	m := &k8sManifests{services: map[string]corev1.Service{}, configs: map[string]corev1.ConfigMap{}}
	for i, doc := range bytes.Split(raw, []byte("\n---\n")) {
		var meta struct{ APIVersion, Kind string }
		if err := sigsyaml.Unmarshal(doc, &meta); err != nil {
			t.Fatalf("document %d: %v", i, err)
		}
		strict := func(v any) {
			if err := sigsyaml.UnmarshalStrict(doc, v); err != nil {
				t.Fatalf("document %d (%s): %v", i, meta.Kind, err)
			}
		}
		switch meta.APIVersion + " " + meta.Kind {
		case " ": // comments only
			continue
		case "apps/v1 StatefulSet":
			var s appsv1.StatefulSet
			strict(&s)
			m.sets = append(m.sets, s)
		case "v1 Service":
			var s corev1.Service
			strict(&s)
			m.services[s.Name] = s
		case "v1 ConfigMap":
			var c corev1.ConfigMap
			strict(&c)
			m.configs[c.Name] = c
		case "policy/v1 PodDisruptionBudget":
			var p policyv1.PodDisruptionBudget
			strict(&p)
			m.pdbs = append(m.pdbs, p)
		default:
			t.Fatalf("document %d: unexpected %s %s", i, meta.APIVersion, meta.Kind)
		}
	}
	return m
}

// checkStatefulSet checks one region's StatefulSet: its selectors and
// services, its pods' settings and container, and the configuration it
// mounts; it says whether that configuration makes a voter.
func (m *k8sManifests) checkStatefulSet(t *testing.T, s appsv1.StatefulSet) bool {
	pdb := m.pdbs[0]
	pod := labels.Set(s.Spec.Template.Labels)
	sel := labels.SelectorFromSet(s.Spec.Selector.MatchLabels)
	if !sel.Matches(pod) {
		t.Fatalf("%s: its selector does not select its pods", s.Name)
	}
	if pdbSel := labels.SelectorFromSet(pdb.Spec.Selector.MatchLabels); !pdbSel.Matches(pod) {
		t.Fatalf("%s: the disruption budget does not cover its pods", s.Name)
	}
	if svc, ok := m.services[s.Spec.ServiceName]; !ok || !labels.SelectorFromSet(svc.Spec.Selector).Matches(pod) {
		t.Fatalf("%s: serviceName %q is not a service selecting its pods", s.Name, s.Spec.ServiceName)
	}
	region := s.Spec.Template.Labels["llmesh.dev/region"]
	if api, ok := m.services["llmesh-"+region]; !ok || !labels.SelectorFromSet(api.Spec.Selector).Matches(pod) {
		t.Fatalf("%s: no API service llmesh-%s selects its pods", s.Name, region)
	}
	spec := s.Spec.Template.Spec
	if a := s.Spec.Template.Annotations; a["prometheus.io/scrape"] != "true" || a["prometheus.io/port"] != "8080" || a["prometheus.io/path"] != "/metrics" {
		t.Fatalf("%s: Prometheus scrape annotations %v", s.Name, a)
	}
	if spec.TerminationGracePeriodSeconds == nil || *spec.TerminationGracePeriodSeconds < 35 {
		t.Fatalf("%s: the grace period must cover a drain (5 s grace + 30 s timeout)", s.Name)
	}
	if sc := spec.SecurityContext; sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot {
		t.Fatalf("%s: pods must not run as root", s.Name)
	}
	if len(spec.Containers) != 1 {
		t.Fatalf("%s: %d containers", s.Name, len(spec.Containers))
	}
	c := spec.Containers[0]
	checkContainer(t, s.Name, c)
	// The configuration it mounts makes a node, with the pod's name and
	// IP as the arguments give them.
	var cmName string
	for _, v := range spec.Volumes {
		if v.ConfigMap != nil {
			cmName = v.ConfigMap.Name
		}
	}
	cm, ok := m.configs[cmName]
	if !ok {
		t.Fatalf("%s mounts ConfigMap %q, which is not there", s.Name, cmName)
	}
	args := strings.Join(c.Args, " ")
	if !strings.Contains(args, "-name $(POD_NAME)") || !strings.Contains(args, "-advertise $(POD_IP)") {
		t.Fatalf("%s: args %q: the node must take the pod's name and IP", s.Name, args)
	}
	cfg := checkNodeConfig(t, s.Name+"'s configuration", []byte(cm.Data["llmesh.yaml"]), s.Name+"-0", "10.1.2.3")
	if cfg.Node.Region != region {
		t.Fatalf("%s: configured for region %q, labelled %q", s.Name, cfg.Node.Region, region)
	}
	checkContainerFitsConfig(t, s.Name, c, cfg)
	return cfg.Node.Voter
}

// checkContainer checks a node's container: its probes, its drain before
// it stops, and its security settings.
func checkContainer(t *testing.T, name string, c corev1.Container) {
	if c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet == nil || c.ReadinessProbe.HTTPGet.Path != "/readyz" ||
		c.LivenessProbe == nil || c.LivenessProbe.HTTPGet == nil || c.LivenessProbe.HTTPGet.Path != "/healthz" {
		t.Fatalf("%s: readiness must be /readyz and liveness /healthz", name)
	}
	if c.Lifecycle == nil || c.Lifecycle.PreStop == nil || c.Lifecycle.PreStop.Exec == nil ||
		!slices.Equal(c.Lifecycle.PreStop.Exec.Command[:3], []string{"/llmesh", "drain", "-wait"}) {
		t.Fatalf("%s: preStop must drain the node", name)
	}
	if c.SecurityContext == nil || c.SecurityContext.ReadOnlyRootFilesystem == nil || !*c.SecurityContext.ReadOnlyRootFilesystem ||
		c.SecurityContext.AllowPrivilegeEscalation == nil || *c.SecurityContext.AllowPrivilegeEscalation {
		t.Fatalf("%s: the container must have a read-only root and no privilege escalation", name)
	}
	for _, e := range c.Env {
		if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil && e.Value != "" {
			t.Fatalf("%s: %s is both a value and a secret", name, e.Name)
		}
	}
}

// checkContainerFitsConfig checks that the container declares the ports
// the configuration listens on and sets every secret it reads.
func checkContainerFitsConfig(t *testing.T, name string, c corev1.Container, cfg *node.Config) {
	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[string(p.Protocol)+" "+p.Name] = p.ContainerPort
	}
	for field, want := range map[string]string{cfg.Node.HTTP: "TCP http", cfg.Node.RPC: "TCP rpc", cfg.Node.Gossip: "UDP gossip-udp", cfg.Node.Raft: "TCP raft"} {
		if p, ok := ports[want]; !ok || !strings.HasSuffix(field, fmt.Sprintf(":%d", p)) {
			t.Fatalf("%s: the config listens on %s, the container declares %s on %d", name, field, want, p)
		}
	}
	// Every secret the configuration reads is in the environment.
	env := map[string]bool{}
	for _, e := range c.Env {
		env[e.Name] = true
	}
	for _, n := range configEnv(cfg) {
		if !env[n] {
			t.Fatalf("%s: the configuration reads $%s, which the container does not set", name, n)
		}
	}
}

// configEnv lists the environment variables a configuration reads.
func configEnv(cfg *node.Config) []string {
	out := []string{cfg.Node.AdminTokenEnv, cfg.Node.GossipKeyEnv}
	for _, p := range cfg.Providers {
		out = append(out, p.APIKeyEnv)
	}
	return slices.DeleteFunc(out, func(s string) bool { return s == "" })
}

// TestComposeFiles checks the compose mesh: every node's configuration
// makes a node, advertises the address compose gives it, and reads only
// secrets compose sets; providers are services of the file.
func TestComposeFiles(t *testing.T) {
	var compose struct {
		Services map[string]struct {
			Command     []string          `yaml:"command"`
			Environment map[string]string `yaml:"environment"`
			Volumes     []string          `yaml:"volumes"`
			Networks    map[string]struct {
				IPv4 string `yaml:"ipv4_address"`
			} `yaml:"networks"`
		} `yaml:"services"`
	}
	raw, err := os.ReadFile("compose/docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(raw, &compose); err != nil {
		t.Fatal(err)
	}
	nodes := 0
	for name, svc := range compose.Services {
		if len(svc.Command) == 0 || svc.Command[0] != "agent" {
			continue
		}
		nodes++
		file := filepath.Join("compose", name+".yaml")
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(svc.Volumes, "./"+name+".yaml:/etc/llmesh/llmesh.yaml:ro") {
			t.Fatalf("%s does not mount %s", name, file)
		}
		cfg := checkNodeConfig(t, file, b, "", "")
		if cfg.Node.Name != name || cfg.Node.Advertise != svc.Networks["mesh"].IPv4 {
			t.Fatalf("%s: named %q advertising %s; compose gives it %s on the mesh network", name, cfg.Node.Name, cfg.Node.Advertise, svc.Networks["mesh"].IPv4)
		}
		for _, env := range configEnv(cfg) {
			if _, ok := svc.Environment[env]; !ok {
				t.Fatalf("%s: the configuration reads $%s, which compose does not set", name, env)
			}
		}
		for _, p := range cfg.Providers {
			host := strings.Split(strings.TrimPrefix(p.BaseURL, "http://"), ":")[0]
			if _, ok := compose.Services[host]; !ok {
				t.Fatalf("%s: provider %s at %s is not a service", name, p.Name, p.BaseURL)
			}
		}
	}
	if nodes != 3 {
		t.Fatalf("%d nodes, want 3", nodes)
	}
}

// TestSystemdUnit checks that the unit drains on stop within its timeout
// and is hardened, and has systemd-analyze verify it where systemd is
// installed.
func TestSystemdUnit(t *testing.T) {
	raw, err := os.ReadFile("systemd/llmesh.service")
	if err != nil {
		t.Fatal(err)
	}
	set := map[string][]string{}
	sc := bufio.NewScanner(bytes.NewReader(raw))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if k, v, ok := strings.Cut(line, "="); ok && !strings.HasPrefix(line, "#") {
			set[k] = append(set[k], v)
		}
	}
	for k, want := range map[string]string{
		"KillSignal": "SIGTERM", "DynamicUser": "yes", "NoNewPrivileges": "yes", "ProtectSystem": "strict",
		"ProtectHome": "yes", "PrivateTmp": "yes", "StateDirectory": "llmesh", "CapabilityBoundingSet": "",
	} {
		if len(set[k]) == 0 || set[k][0] != want {
			t.Errorf("%s=%v, want %q", k, set[k], want)
		}
	}
	stop, err := time.ParseDuration(strings.TrimSpace(firstOf(set["TimeoutStopSec"])))
	if err != nil || stop < 35*time.Second {
		t.Errorf("TimeoutStopSec=%v must cover a drain (5 s grace + 30 s timeout)", set["TimeoutStopSec"])
	}
	if !strings.Contains(firstOf(set["ExecStart"]), " agent -config ") || !strings.Contains(firstOf(set["ExecReload"]), "-HUP") {
		t.Errorf("ExecStart %v, ExecReload %v", set["ExecStart"], set["ExecReload"])
	}
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze is not installed (apt-get install systemd): the unit's syntax is not verified")
	}
	// verify needs the binary the unit names: point it at a real one.
	dir := t.TempDir()
	bin := filepath.Join(dir, "llmesh")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	unit := filepath.Join(dir, "llmesh.service")
	if err := os.WriteFile(unit, bytes.ReplaceAll(raw, []byte("/usr/local/bin/llmesh"), []byte(bin)), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(analyze, "verify", unit).CombinedOutput()
	// Outside a booted system verify may complain about the machine
	// (no D-Bus, no /run/systemd); what concerns the unit names it.
	var bad []string
	for line := range strings.SplitSeq(string(out), "\n") {
		if strings.Contains(line, "llmesh.service") {
			bad = append(bad, line)
		}
	}
	if len(bad) > 0 {
		t.Fatalf("systemd-analyze verify (%v):\n%s", err, strings.Join(bad, "\n"))
	}
}

func firstOf(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[0]
}

// metricRef is a metric name in a PromQL expression, with the labels the
// expression groups or matches by.
var (
	metricRef = regexp.MustCompile(`\bllmesh_[a-z_]+`)
	byLabels  = regexp.MustCompile(`by \(([^)]*)\)`)
)

// TestMonitoringReferencesRealMetrics reads the Grafana dashboard and the
// alert rules and checks that every llmesh metric they use is one a node
// serves, with the labels they group by: a renamed metric must not leave
// a silent panel or an alert that never fires.
func TestMonitoringReferencesRealMetrics(t *testing.T) {
	served := nodeMetrics(t)
	var exprs []string
	dash, err := os.ReadFile("monitoring/grafana-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range regexp.MustCompile(`"expr": "((?:[^"\\]|\\.)*)"`).FindAllStringSubmatch(string(dash), -1) {
		exprs = append(exprs, strings.ReplaceAll(m[1], `\"`, `"`))
	}
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert, Expr string
			}
		}
	}
	raw, err := os.ReadFile("monitoring/alerts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(raw, &rules); err != nil {
		t.Fatal(err)
	}
	alerts := map[string]bool{}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			alerts[r.Alert] = true
			exprs = append(exprs, r.Expr)
		}
	}
	for _, want := range []string{"LlmeshNoLeader", "LlmeshBudgetNearlySpent", "LlmeshProviderEjected", "LlmeshMembersLost", "LlmeshResidencyRefusalsRising"} {
		if !alerts[want] {
			t.Errorf("no alert %s", want)
		}
	}
	if len(exprs) < 20 {
		t.Fatalf("only %d expressions found", len(exprs))
	}
	for _, e := range exprs {
		names := metricRef.FindAllString(e, -1)
		if len(names) == 0 && !strings.HasPrefix(e, `up{job="llmesh"}`) {
			t.Errorf("%q uses no llmesh metric", e)
		}
		for _, name := range names {
			base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(name, "_bucket"), "_sum"), "_count")
			_, ok := served[base]
			if !ok {
				t.Errorf("%q: the node serves no metric %s", e, base)
				continue
			}
		}
		// A label grouped by must be one of the metrics' it groups: with
		// several metrics in one expression, one of theirs.
		union, known := map[string]bool{}, true
		for _, name := range names {
			base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(name, "_bucket"), "_sum"), "_count")
			for l := range served[base] {
				union[l] = true
			}
			known = known && !served[base]["*"]
		}
		for _, by := range byLabels.FindAllStringSubmatch(e, -1) {
			for l := range strings.SplitSeq(by[1], ",") {
				if l = strings.TrimSpace(l); known && l != "" && l != "le" && l != "instance" && !union[l] {
					t.Errorf("%q: no metric of it has the label %q (they have %v)", e, l, union)
				}
			}
		}
	}
}

// nodeMetrics starts a dev node, sends it a request, and returns the
// metric families it serves with their labels. Families with no series
// yet (a counter by provider nothing has incremented) are described in
// the text exposition's HELP lines only when they have a series, so the
// node's sources fill in the names of those.
func nodeMetrics(t *testing.T) map[string]map[string]bool {
	t.Helper()
	dev, n := harness.StartDevNode(t)
	base := "http://" + n.HTTPAddr()
	req, _ := http.NewRequest(http.MethodPost, base+"/v1/chat/completions",
		strings.NewReader(`{"model":"gpt-4o-mini","max_tokens":3,"messages":[{"role":"user","content":"hi"}]}`))
	req.Header.Set("Authorization", "Bearer "+dev.Key)
	if resp, err := http.DefaultClient.Do(req); err != nil {
		t.Fatal(err)
	} else {
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out := map[string]map[string]bool{}
	series := regexp.MustCompile(`^(llmesh_[a-z_]+?)(?:_bucket|_sum|_count)?(?:\{(.*)\})? `)
	label := regexp.MustCompile(`([a-z_]+)="`)
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		m := series.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		if out[m[1]] == nil {
			out[m[1]] = map[string]bool{}
		}
		for _, l := range label.FindAllStringSubmatch(m[2], -1) {
			out[m[1]][l[1]] = true
		}
	}
	// Vectors nothing has touched yet: their names, from the sources
	// (sub-packages included: node/metrics holds most).
	src := regexp.MustCompile(`"(llmesh_[a-z_]+)"`)
	for _, dir := range []string{"../node", "../gossip", "../consensus"} {
		_ = filepath.WalkDir(dir, func(f string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(f, ".go") || strings.HasSuffix(f, "_test.go") {
				return nil
			}
			b, _ := os.ReadFile(f)
			for _, m := range src.FindAllStringSubmatch(string(b), -1) {
				if out[m[1]] == nil {
					out[m[1]] = map[string]bool{"*": true}
				}
			}
			return nil
		})
	}
	return out
}
