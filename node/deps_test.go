package node_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/llmesh/llmesh"

// TestImportRules keeps docs/architecture.md's package table true: every
// package of the module has a row and a package doc, and imports only the
// project packages its row lists.
func TestImportRules(t *testing.T) {
	doc, err := os.ReadFile("../docs/architecture.md")
	if err != nil {
		t.Fatal(err)
	}
	table, err := parsePackageTable(string(doc))
	if err != nil {
		t.Fatal(err)
	}
	pkgs, err := listPackages()
	if err != nil {
		t.Fatal(err)
	}
	problems, absent := checkImports(table, pkgs)
	for _, p := range append(problems, absent...) {
		t.Error(p)
	}
}

// The checker itself: an import the table does not list is reported, as
// are a package without a row or a doc and a row naming no package.
func TestImportCheckerReportsUnlistedImport(t *testing.T) {
	table, err := parsePackageTable(`# Architecture

## Packages

| package | owns | may import |
|---|---|---|
| ` + "`a`" + ` | pure code | — |
| ` + "`b`" + ` | uses a and c's tree | ` + "`a`, `c/...`" + ` |
| ` + "`c`" + ` | c | — |
| ` + "`c/d`" + ` | d | ` + "`c`" + ` |
| ` + "`cmd`" + ` | the binary | everything |
| ` + "`gone`" + ` | nothing any more | — |

## Next
| ` + "`z`" + ` | not in the table | — |
`)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := table["z"]; ok {
		t.Fatal("a row after the Packages section was read as part of the table")
	}
	pkgs := []pkgInfo{
		{Path: "a", Doc: "a"},
		{Path: "b", Doc: "b", Imports: []string{"a", "c", "c/d"}},
		{Path: "c", Doc: "c", Imports: []string{"a"}}, // not listed
		{Path: "c/d", Doc: "d", Imports: []string{"c"}},
		{Path: "cmd", Doc: "cmd", Imports: []string{"a", "b", "c/d"}},
		{Path: "e", Doc: "e"},            // no row
		{Path: "z", Imports: []string{}}, // no row, no doc
	}
	problems, absent := checkImports(table, pkgs)
	want := []string{
		"c imports a, which its row in docs/architecture.md does not list",
		"e has no row in docs/architecture.md's package table",
		"z has no package doc saying what it owns",
		"z has no row in docs/architecture.md's package table",
	}
	if !slices.Equal(problems, want) {
		t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(problems, "\n"), strings.Join(want, "\n"))
	}
	if wantAbsent := []string{"gone has a row in docs/architecture.md but no package"}; !slices.Equal(absent, wantAbsent) {
		t.Errorf("absent: %q, want %q", absent, wantAbsent)
	}
	if _, err := parsePackageTable("## Packages\n\n| package | owns | may import |\n|---|---|---|\n| `a` | x | a, b |\n"); err == nil {
		t.Error("an entry without backticks was accepted")
	}
}

// importRule is one row's "may import" column.
type importRule struct {
	everything bool
	entries    []string // package paths; "p/..." is p and its sub-packages
}

func (r importRule) allows(dep string) bool {
	if r.everything {
		return true
	}
	for _, e := range r.entries {
		if tree, ok := strings.CutSuffix(e, "/..."); ok {
			if dep == tree || strings.HasPrefix(dep, tree+"/") {
				return true
			}
		} else if dep == e {
			return true
		}
	}
	return false
}

// parsePackageTable reads the table of the "## Packages" section of md:
// package path (relative to the module) → what it may import.
func parsePackageTable(md string) (map[string]importRule, error) {
	table := map[string]importRule{}
	in := false
	sc := bufio.NewScanner(strings.NewReader(md))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(line, "## ") {
			in = line == "## Packages"
			continue
		}
		if !in || !strings.HasPrefix(line, "|") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		if len(cells) != 3 {
			return nil, fmt.Errorf("package table row %q has %d columns, not 3", line, len(cells))
		}
		name := strings.TrimSpace(cells[0])
		if name == "package" || strings.Trim(name, "-") == "" {
			continue // the header and its rule
		}
		pkg, err := backticked(name)
		if err != nil {
			return nil, err
		}
		rule, err := parseRule(strings.TrimSpace(cells[2]))
		if err != nil {
			return nil, fmt.Errorf("row %s: %w", pkg, err)
		}
		if _, dup := table[pkg]; dup {
			return nil, fmt.Errorf("package %s has two rows", pkg)
		}
		table[pkg] = rule
	}
	if len(table) == 0 {
		return nil, fmt.Errorf("no package table under ## Packages")
	}
	return table, sc.Err()
}

func parseRule(cell string) (importRule, error) {
	switch cell {
	case "—":
		return importRule{}, nil
	case "everything":
		return importRule{everything: true}, nil
	}
	var r importRule
	for e := range strings.SplitSeq(cell, ",") {
		p, err := backticked(strings.TrimSpace(e))
		if err != nil {
			return importRule{}, err
		}
		r.entries = append(r.entries, p)
	}
	return r, nil
}

func backticked(s string) (string, error) {
	if len(s) < 3 || s[0] != '`' || s[len(s)-1] != '`' || strings.Contains(s[1:len(s)-1], "`") {
		return "", fmt.Errorf("%q is not one backticked package", s)
	}
	return s[1 : len(s)-1], nil
}

// pkgInfo is one package of the module: its path relative to the module,
// its doc, and the project packages it imports (non-test files).
type pkgInfo struct {
	Path, Doc string
	Imports   []string
}

func listPackages() ([]pkgInfo, error) {
	out, err := exec.Command("go", "list", "-json=ImportPath,Imports,Doc", module+"/...").Output()
	if err != nil {
		return nil, err
	}
	var pkgs []pkgInfo
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for dec.More() {
		var p struct {
			ImportPath, Doc string
			Imports         []string
		}
		if err := dec.Decode(&p); err != nil {
			return nil, err
		}
		info := pkgInfo{Path: relative(p.ImportPath), Doc: p.Doc}
		for _, imp := range p.Imports {
			if imp == module || strings.HasPrefix(imp, module+"/") {
				info.Imports = append(info.Imports, relative(imp))
			}
		}
		pkgs = append(pkgs, info)
	}
	return pkgs, nil
}

func relative(path string) string {
	return strings.TrimPrefix(strings.TrimPrefix(path, module), "/")
}

// checkImports holds pkgs to table. problems are packages without a row
// or a doc and imports a row does not list; absent are rows (and
// entries) naming a package the module does not have. Both are sorted.
func checkImports(table map[string]importRule, pkgs []pkgInfo) (problems, absent []string) {
	exists := map[string]bool{}
	for _, p := range pkgs {
		exists[p.Path] = true
		if p.Doc == "" {
			problems = append(problems, fmt.Sprintf("%s has no package doc saying what it owns", p.Path))
		}
		rule, ok := table[p.Path]
		if !ok {
			problems = append(problems, fmt.Sprintf("%s has no row in docs/architecture.md's package table", p.Path))
			continue
		}
		for _, dep := range p.Imports {
			if !rule.allows(dep) {
				problems = append(problems, fmt.Sprintf("%s imports %s, which its row in docs/architecture.md does not list", p.Path, dep))
			}
		}
	}
	for pkg, rule := range table {
		if !exists[pkg] {
			absent = append(absent, fmt.Sprintf("%s has a row in docs/architecture.md but no package", pkg))
		}
		for _, e := range rule.entries {
			if tree := strings.TrimSuffix(e, "/..."); !exists[tree] {
				absent = append(absent, fmt.Sprintf("row %s lists %s, which is no package", pkg, e))
			}
		}
	}
	slices.Sort(problems)
	slices.Sort(absent)
	return problems, absent
}
