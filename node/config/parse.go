package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Load reads and strictly decodes the configuration file at path.
func Load(path string) (*File, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	c, err := Parse(b)
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	return c, nil
}

// Parse strictly decodes a YAML configuration document.
func Parse(b []byte) (*File, error) {
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	var c File
	if err := dec.Decode(&c); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errors.New("the file is empty")
		}
		return nil, friendlyYAML(b, err)
	}
	var extra any
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, errors.New("the file holds more than one YAML document")
	}
	return &c, nil
}

var (
	yamlErrLine     = regexp.MustCompile(`^line (\d+): (.*)$`)
	yamlUnknownKey  = regexp.MustCompile(`^field (\S+) not found in type`)
	yamlBadValue    = regexp.MustCompile("^cannot unmarshal !!\\w+ `([^`]*)` into (\\S+)")
	yamlBadKind     = regexp.MustCompile(`^cannot unmarshal !!(\w+) into (\S+)`)
	yamlPathOfGoTyp = strings.NewReplacer("time.", "", "config.", "", "[]", "list of ")
)

// friendlyYAML rewrites the decoder's errors, which name a line and a Go
// type, as config paths: "node.votre: unknown field (line 12)".
func friendlyYAML(b []byte, err error) error {
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		return errors.New(strings.TrimPrefix(err.Error(), "yaml: "))
	}
	var root yaml.Node
	_ = yaml.Unmarshal(b, &root)
	var out []string
	for _, e := range te.Errors {
		m := yamlErrLine.FindStringSubmatch(e)
		if m == nil {
			out = append(out, e)
			continue
		}
		line, _ := strconv.Atoi(m[1])
		k, v, w := yamlUnknownKey.FindStringSubmatch(m[2]), yamlBadValue.FindStringSubmatch(m[2]), yamlBadKind.FindStringSubmatch(m[2])
		switch {
		case k != nil:
			out = append(out, fmt.Sprintf("%s: unknown field (line %d)", yamlPath(&root, line, k[1], true), line))
		case v != nil:
			out = append(out, fmt.Sprintf("%s: %q is not a valid %s (line %d)", yamlPath(&root, line, v[1], false), v[1], yamlPathOfGoTyp.Replace(v[2]), line))
		case w != nil:
			out = append(out, fmt.Sprintf("%s: a %s is not a valid %s (line %d)", yamlPath(&root, line, "", false), w[1], yamlPathOfGoTyp.Replace(w[2]), line))
		default:
			out = append(out, e)
		}
	}
	return errors.New(strings.Join(out, "\n"))
}

// yamlPath finds the path of the key (isKey) or the value named token on
// line, e.g. "providers[0].models[1].price"; an empty token matches a
// map or list there, the deepest first. It returns "?" when none matches.
func yamlPath(n *yaml.Node, line int, token string, isKey bool) string {
	matches := func(v *yaml.Node) bool {
		if token == "" {
			return v.Kind == yaml.MappingNode || v.Kind == yaml.SequenceNode
		}
		return v.Kind == yaml.ScalarNode && v.Value == token
	}
	var walk func(n *yaml.Node, path string) string
	walk = func(n *yaml.Node, path string) string {
		switch n.Kind {
		case yaml.DocumentNode:
			for _, c := range n.Content {
				if p := walk(c, path); p != "" {
					return p
				}
			}
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				k, v := n.Content[i], n.Content[i+1]
				kp := k.Value
				if path != "" {
					kp = path + "." + k.Value
				}
				if k.Line == line && isKey && k.Value == token {
					return kp
				}
				if p := walk(v, kp); p != "" {
					return p
				}
				if v.Line == line && !isKey && matches(v) {
					return kp
				}
			}
		case yaml.SequenceNode:
			for i, c := range n.Content {
				ip := fmt.Sprintf("%s[%d]", path, i)
				if p := walk(c, ip); p != "" {
					return p
				}
				if c.Line == line && !isKey && matches(c) {
					return ip
				}
			}
		}
		return ""
	}
	if p := walk(n, ""); p != "" {
		return p
	}
	return "?"
}
