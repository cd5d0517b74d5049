package deploy_test

import (
	"bufio"
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"path"
	"regexp"
	"slices"
	"strings"
	"testing"
	"testing/fstest"
	"unicode"
)

// TestDocLinks keeps the documentation inside the repository: every
// relative link in README.md, CHANGELOG.md, SECURITY.md and docs/*.md
// names a file of the repository (a heading of it, for an anchor), and
// none goes up with ..: a link to a file outside the linking file's
// folder starts at the repository's root (/deploy/...), as GitHub
// resolves it. A clone must read whole.
func TestDocLinks(t *testing.T) {
	root := os.DirFS("..")
	files := []string{"README.md", "CHANGELOG.md", "SECURITY.md"}
	docs, err := fs.Glob(root, "docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	if len(docs) == 0 {
		t.Fatal("no docs/*.md found: is the test run from deploy/?")
	}
	files = append(files, docs...)
	for _, f := range files {
		if _, err := fs.Stat(root, f); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
	for _, p := range brokenLinks(root, files) {
		t.Error(p)
	}
}

// TestBrokenLinksFindsEach proves the checker fails on each kind of bad
// link, and passes the good ones, on a repository held in memory.
func TestBrokenLinksFindsEach(t *testing.T) {
	repo := fstest.MapFS{
		"README.md": {Data: []byte("# llmesh\n\n## Try it\n\n" +
			"[arch](docs/architecture.md) [pkgs](docs/architecture.md#packages)\n" +
			"[self](#try-it) [ext](https://example.com/x) [mail](mailto:a@b.c)\n" +
			"[dir](deploy/) ![chart](sim/chart.svg)\n" +
			"`[in code](nowhere.md)`\n" +
			"```\n[in a fence](nowhere.md)\n```\n" +
			"[ref]: docs/architecture.md#why-raft\n")},
		"docs/architecture.md": {Data: []byte("# Architecture\n\n## Packages\n\n### Why Raft?\n\n" +
			"[up](/README.md#try-it) [config](configuration.md#the-node-section)\n")},
		"docs/configuration.md": {Data: []byte("# Configuration\n\n## The `node` section\n")},
		"deploy/doc.go":         {Data: []byte("package deploy\n")},
		"sim/chart.svg":         {Data: []byte("<svg/>")},
		"bad.md": {Data: []byte("# Bad\n\n" +
			"[gone](docs/missing.md)\n" +
			"[outside](../shared/DESIGN.md)\n" +
			"[far outside](docs/../../x.md)\n" +
			"[no heading](docs/architecture.md#nowhere)\n" +
			"[no self heading](#bad-heading)\n" +
			"[absolute](/etc/passwd)\n" +
			"[ref]: docs/gone.md\n")},
	}
	if got := brokenLinks(repo, []string{"README.md", "docs/architecture.md", "docs/configuration.md"}); len(got) > 0 {
		t.Errorf("good links reported broken:\n%s", strings.Join(got, "\n"))
	}
	got := brokenLinks(repo, []string{"bad.md"})
	for _, want := range []string{
		"bad.md:3: docs/missing.md",
		"bad.md:4: ../shared/DESIGN.md",
		"bad.md:5: docs/../../x.md",
		"bad.md:6: docs/architecture.md#nowhere",
		"bad.md:7: #bad-heading",
		"bad.md:8: /etc/passwd",
		"bad.md:9: docs/gone.md",
	} {
		if !slices.ContainsFunc(got, func(p string) bool { return strings.HasPrefix(p, want) }) {
			t.Errorf("not reported: %s", want)
		}
	}
	if len(got) != 7 {
		t.Errorf("want 7 problems, got %d:\n%s", len(got), strings.Join(got, "\n"))
	}
}

var (
	// inlineLink matches [text](target) and ![alt](target), with an
	// optional "title"; the target is the first group.
	inlineLink = regexp.MustCompile(`\]\(\s*<?([^()\s<>]+)>?(?:\s+"[^"]*")?\s*\)`)
	// refLink matches a reference definition: [name]: target.
	refLink = regexp.MustCompile(`^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$`)
	// codeSpan matches inline code, whose brackets are not links.
	codeSpan = regexp.MustCompile("`+[^`]*`+")
	// scheme matches a link that leaves the repository on purpose.
	scheme = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`)
)

// brokenLinks checks every relative link of the markdown files named
// (paths in fsys, the repository's root) and returns one line per broken
// link: "file:line: target: why".
func brokenLinks(fsys fs.FS, files []string) []string {
	var problems []string
	for _, f := range files {
		b, err := fs.ReadFile(fsys, f)
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s: %v", f, err))
			continue
		}
		for _, l := range markdownLinks(b) {
			if why := checkLink(fsys, f, l.target); why != "" {
				problems = append(problems, fmt.Sprintf("%s:%d: %s: %s", f, l.line, l.target, why))
			}
		}
	}
	return problems
}

type link struct {
	line   int
	target string
}

// markdownLinks lists the links of a markdown document outside fenced
// code blocks and code spans.
func markdownLinks(b []byte) []link {
	var out []link
	fence := ""
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		if fence != "" {
			if strings.HasPrefix(trimmed, fence) {
				fence = ""
			}
			continue
		}
		if strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~") {
			fence = trimmed[:3]
			continue
		}
		line = codeSpan.ReplaceAllString(line, "")
		for _, m := range inlineLink.FindAllStringSubmatch(line, -1) {
			out = append(out, link{n, m[1]})
		}
		if m := refLink.FindStringSubmatch(line); m != nil {
			out = append(out, link{n, m[1]})
		}
	}
	return out
}

// checkLink says why target, linked from the file from, does not resolve
// inside fsys; "" when it does or when it is not a relative link.
func checkLink(fsys fs.FS, from, target string) string {
	if scheme.MatchString(target) {
		return ""
	}
	file, anchor, _ := strings.Cut(target, "#")
	if slices.Contains(strings.Split(file, "/"), "..") {
		// A clone is read from anywhere, so no link goes up: one to a file
		// outside the linking file's folder starts at the repository's
		// root, as GitHub resolves it.
		return "goes up with ..; link from the repository's root (/path)"
	}
	dest := from
	if file != "" {
		dest = path.Join(path.Dir(from), file)
		if strings.HasPrefix(file, "/") {
			dest = strings.TrimPrefix(path.Clean(file), "/")
		}
		if _, err := fs.Stat(fsys, dest); err != nil {
			return "no such file in the repository"
		}
	}
	if anchor == "" {
		return ""
	}
	if !strings.HasSuffix(dest, ".md") {
		return "an anchor into a file that is not markdown"
	}
	b, err := fs.ReadFile(fsys, dest)
	if err != nil {
		return err.Error()
	}
	if !slices.Contains(headingAnchors(b), anchor) {
		return "no heading " + dest + " has that anchor"
	}
	return ""
}

// headingAnchors lists the anchors GitHub gives a document's headings:
// lower case, punctuation dropped, spaces as hyphens, and -1, -2, ... on
// repeats.
func headingAnchors(b []byte) []string {
	var out []string
	seen := map[string]int{}
	for _, l := range markdownHeadings(b) {
		a := slug(l)
		if n := seen[a]; n > 0 {
			out = append(out, fmt.Sprintf("%s-%d", a, n))
		} else {
			out = append(out, a)
		}
		seen[a]++
	}
	return out
}

// markdownHeadings returns the text of each ATX heading outside fenced
// code.
func markdownHeadings(b []byte) []string {
	var out []string
	fence := ""
	for line := range strings.SplitSeq(string(b), "\n") {
		trimmed := strings.TrimSpace(line)
		switch {
		case fence != "":
			if strings.HasPrefix(trimmed, fence) {
				fence = ""
			}
		case strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~"):
			fence = trimmed[:3]
		case strings.HasPrefix(line, "#"):
			text := strings.TrimLeft(line, "#")
			if text == "" || text[0] == ' ' {
				out = append(out, strings.TrimSpace(strings.TrimRight(strings.TrimSpace(text), "#")))
			}
		}
	}
	return out
}

func slug(heading string) string {
	var sb strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			sb.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			sb.WriteRune(r)
		}
	}
	return sb.String()
}

// TestDocCommands keeps the docs' commands real as code moves: every test,
// benchmark or fuzz target a `go test -run|-bench|-fuzz NAME ./pkg/` line
// names exists in that package, and every `llmesh VERB` a code block of
// README.md runs is a verb the binary has.
func TestDocCommands(t *testing.T) {
	root := os.DirFS("..")
	files := []string{"README.md", "CHANGELOG.md", "SECURITY.md"}
	docs, _ := fs.Glob(root, "docs/*.md")
	files = append(files, docs...)
	for _, f := range files {
		b, err := fs.ReadFile(root, f)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range missingTests(root, string(b)) {
			t.Errorf("%s: %s", f, p)
		}
	}
	readme, err := fs.ReadFile(root, "README.md")
	if err != nil {
		t.Fatal(err)
	}
	main, err := fs.ReadFile(root, "cmd/llmesh/main.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range unknownVerbs(string(readme), string(main)) {
		t.Errorf("README.md: %s", p)
	}
}

// TestDocCommandCheckersFindEach proves both checkers fail on a name that
// is not there, on a repository held in memory.
func TestDocCommandCheckersFindEach(t *testing.T) {
	repo := fstest.MapFS{
		"node/a_test.go":  {Data: []byte("package node\n\nfunc TestBurst(t *testing.T) {}\nfunc BenchmarkPlan(b *testing.B) {}\n")},
		"route/b_test.go": {Data: []byte("package route\n\nfunc FuzzSovereignty(f *testing.F) {}\n")},
	}
	doc := "`go test -run TestBurst -v ./node/` `go test -run XXX -bench 'Plan|Gone' ./node/`\n" +
		"`go test -fuzz FuzzSovereignty ./route/` `go test ./route -run TestBurst`\n" +
		"`LLMESH_X=1 go test ./sim/des -run TestScale -v` `go test -race ./...`\n"
	got := missingTests(repo, doc)
	want := []string{
		`go test -run XXX -bench 'Plan|Gone' ./node/: no Gone in ./node/`,
		"go test ./route -run TestBurst: no TestBurst in ./route",
		"go test ./sim/des -run TestScale -v: no TestScale in ./sim/des",
	}
	if !slices.Equal(got, want) {
		t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	main := "const usage = `\n  llmesh agent -dev   one node\n  llmesh tls init NODE...\n`\n"
	readme := "```sh\nllmesh agent -dev\nllmesh tls init -dir x a\nllmesh bogus -json   # no such verb\n```\n"
	if got := unknownVerbs(readme, main); len(got) != 1 || !strings.Contains(got[0], "bogus") {
		t.Errorf("unknown verbs: got %q, want one naming bogus", got)
	}
}

var (
	goTestLine = regexp.MustCompile("go test [^`\n]*")
	testFlag   = regexp.MustCompile(`-(run|bench|fuzz) +('[^']*'|"[^"]*"|\S+)`)
	pkgArg     = regexp.MustCompile(`(?:^| )(\./\S*)`)
	testFunc   = regexp.MustCompile(`(?m)^func ((?:Test|Benchmark|Fuzz)\w*)\(`)
	usageVerb  = regexp.MustCompile(`(?m)^  llmesh ([a-z]+)`)
	shellVerb  = regexp.MustCompile(`^\s*llmesh ([a-z]+)`)
)

// missingTests returns, for each `go test` command in doc whose -run,
// -bench or -fuzz pattern names a test, benchmark or fuzz target, the
// names that no test file of the command's package declares. A pattern
// may be alternatives (A|B); each is looked for as part of a name, as the
// go command matches it. Commands over ./... are not checked.
func missingTests(fsys fs.FS, doc string) []string {
	var out []string
	for _, cmd := range goTestLine.FindAllString(doc, -1) {
		cmd = strings.TrimSpace(cmd)
		pkgs := pkgArg.FindAllStringSubmatch(cmd, -1)
		if len(pkgs) == 0 || strings.Contains(cmd, "/...") {
			continue
		}
		var funcs []string
		for _, p := range pkgs {
			funcs = append(funcs, testFuncs(fsys, path.Clean(p[1]))...)
		}
		for _, m := range testFlag.FindAllStringSubmatch(cmd, -1) {
			for name := range strings.SplitSeq(strings.Trim(m[2], `'"^$`), "|") {
				if name == "" || name == "." || name == "XXX" {
					continue
				}
				if !slices.ContainsFunc(funcs, func(f string) bool { return strings.Contains(f, name) }) {
					out = append(out, fmt.Sprintf("%s: no %s in %s", cmd, name, pkgs[0][1]))
				}
			}
		}
	}
	return out
}

// testFuncs lists the Test, Benchmark and Fuzz functions of the test
// files in dir.
func testFuncs(fsys fs.FS, dir string) []string {
	files, _ := fs.Glob(fsys, path.Join(dir, "*_test.go"))
	var out []string
	for _, f := range files {
		b, err := fs.ReadFile(fsys, f)
		if err != nil {
			continue
		}
		for _, m := range testFunc.FindAllStringSubmatch(string(b), -1) {
			out = append(out, m[1])
		}
	}
	return out
}

// unknownVerbs returns the `llmesh VERB` lines of readme's code blocks
// whose verb the usage text in mainGo does not list.
func unknownVerbs(readme, mainGo string) []string {
	verbs := map[string]bool{}
	for _, m := range usageVerb.FindAllStringSubmatch(mainGo, -1) {
		verbs[m[1]] = true
	}
	var out []string
	inBlock := false
	for line := range strings.SplitSeq(readme, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			inBlock = !inBlock
			continue
		}
		if m := shellVerb.FindStringSubmatch(line); inBlock && m != nil && !verbs[m[1]] {
			out = append(out, fmt.Sprintf("%q: llmesh has no verb %s", strings.TrimSpace(line), m[1]))
		}
	}
	return out
}
