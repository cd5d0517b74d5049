package conformance

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v4"
)

// rewrites counts what as31 rewrote.
type rewrites struct {
	nullable  int // schemas with nullable: true
	recursive int // $recursiveRef: "#" in a $recursiveAnchor component
}

// as31 reads the document's pre-3.1 idioms as OpenAPI 3.1 (JSON Schema
// 2020-12, which the document declares) writes them, and returns it as
// YAML:
//
//   - OpenAPI 3.0's nullable, which 2020-12 has not and ignores: null
//     joins the type (and the enum, which would still refuse it), or a
//     schema with no type of its own (a $ref, an anyOf) becomes anyOf
//     itself or null. Read literally, the document refuses the nulls its
//     own examples show, as a chat stream chunk's "finish_reason": null.
//   - JSON Schema 2019-09's $recursiveAnchor: true and $recursiveRef: "#"
//     (CompoundFilter, whose filters "can be ComparisonFilter or
//     CompoundFilter"): the reference becomes a $ref to the component.
//     2020-12's metaschema refuses a boolean $recursiveAnchor, so kin's
//     2020-12 compiler refuses every schema that reaches one (Response,
//     ResponseStreamEvent, CreateResponse) and kin falls back to its
//     OpenAPI 3.0 validator, which ignores 2020-12's keywords, such as
//     propertyNames.
func as31(doc []byte) ([]byte, rewrites, error) {
	var root yaml.Node
	if err := yaml.Unmarshal(doc, &root); err != nil {
		return nil, rewrites{}, err
	}
	r := rewrites{nullable: rewriteNullable(&root, false)}
	if len(root.Content) == 1 {
		if schemas := value(value(root.Content[0], "components"), "schemas"); schemas != nil {
			r.recursive = rewriteRecursive(schemas)
		}
	}
	for _, k := range []string{"$recursiveRef", "$recursiveAnchor"} {
		if has(&root, k) {
			return nil, r, fmt.Errorf("the document has a %s as31 does not read (one outside a component that is a $recursiveAnchor)", k)
		}
	}
	out, err := yaml.Marshal(&root)
	return out, r, err
}

// has reports whether a mapping within n has key.
func has(n *yaml.Node, key string) bool {
	for i, c := range n.Content {
		if n.Kind == yaml.MappingNode && i%2 == 0 && c.Value == key || has(c, key) {
			return true
		}
	}
	return false
}

// notSchemas are the keys whose values are data or metadata, not schemas.
var notSchemas = []string{"example", "examples", "default", "enum", "const"}

// named are the keys whose values map names to schemas, so that a
// property named "default" or "nullable" is read as a schema.
var named = []string{"properties", "patternProperties", "$defs", "schemas"}

// beyondType are the keywords that would refuse null though the type
// admits it.
var beyondType = []string{"const", "$ref", "allOf", "anyOf", "oneOf", "not"}

// annotations are the keywords that assert nothing, which stay beside the
// anyOf a schema without a type becomes.
var annotations = []string{"description", "title", "deprecated", "readOnly", "writeOnly", "externalDocs", "$comment", "example", "examples", "default"}

// rewriteNullable rewrites the schemas within n, a mapping of names to
// schemas if names, and returns how many it rewrote.
func rewriteNullable(n *yaml.Node, names bool) int {
	count := 0
	switch n.Kind {
	case yaml.DocumentNode, yaml.SequenceNode:
		for _, c := range n.Content {
			count += rewriteNullable(c, false)
		}
		return count
	case yaml.MappingNode:
	default:
		return 0
	}
	nullable := -1
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i].Value, n.Content[i+1]
		switch {
		case names:
			count += rewriteNullable(v, false)
		case k == "nullable" && v.Kind == yaml.ScalarNode && v.Tag == "!!bool":
			nullable = i
		case !slices.Contains(notSchemas, k) && !strings.HasPrefix(k, "x-"):
			count += rewriteNullable(v, slices.Contains(named, k))
		}
	}
	if nullable < 0 {
		return count
	}
	isTrue := n.Content[nullable+1].Value == "true"
	n.Content = slices.Delete(n.Content, nullable, nullable+2)
	if !isTrue {
		return count
	}
	// The type takes null only where nothing beside it would still refuse it.
	if t := value(n, "type"); t != nil && !slices.ContainsFunc(beyondType, func(k string) bool { return key(n, k) >= 0 }) {
		switch t.Kind {
		case yaml.ScalarNode:
			if t.Value != "null" {
				*t = yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq", Content: []*yaml.Node{str(t.Value), str("null")}}
			}
		case yaml.SequenceNode:
			if !slices.ContainsFunc(t.Content, func(c *yaml.Node) bool { return c.Value == "null" }) {
				t.Content = append(t.Content, str("null"))
			}
		}
		if e := value(n, "enum"); e != nil && e.Kind == yaml.SequenceNode &&
			!slices.ContainsFunc(e.Content, func(c *yaml.Node) bool { return c.Tag == "!!null" }) {
			e.Content = append(e.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!null", Value: "null"})
		}
		return count + 1
	}
	var kept, moved []*yaml.Node
	for i := 0; i+1 < len(n.Content); i += 2 {
		if k := n.Content[i].Value; slices.Contains(annotations, k) || strings.HasPrefix(k, "x-") {
			kept = append(kept, n.Content[i], n.Content[i+1])
		} else {
			moved = append(moved, n.Content[i], n.Content[i+1])
		}
	}
	if len(moved) == 0 {
		// A schema that asserts nothing admits null already.
		return count
	}
	null := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map", Content: []*yaml.Node{str("type"), str("null")}}
	of := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq", Content: []*yaml.Node{
		{Kind: yaml.MappingNode, Tag: "!!map", Content: moved}, null}}
	n.Content = append(kept, str("anyOf"), of)
	return count + 1
}

// rewriteRecursive rewrites, in each component of schemas (a mapping of
// names to schemas) that is a $recursiveAnchor, the $recursiveRef: "#"
// within it as a $ref to the component, and returns how many it rewrote.
func rewriteRecursive(schemas *yaml.Node) int {
	count := 0
	for i := 0; i+1 < len(schemas.Content); i += 2 {
		name, s := schemas.Content[i].Value, schemas.Content[i+1]
		j := key(s, "$recursiveAnchor")
		if j < 0 {
			continue
		}
		s.Content = slices.Delete(s.Content, j, j+2)
		count += refSelf(s, "#/components/schemas/"+name)
	}
	return count
}

// refSelf rewrites each $recursiveRef: "#" within n as $ref: ref.
func refSelf(n *yaml.Node, ref string) int {
	count := 0
	for i, c := range n.Content {
		if n.Kind == yaml.MappingNode && i%2 == 0 && c.Value == "$recursiveRef" && n.Content[i+1].Value == "#" {
			c.Value, n.Content[i+1] = "$ref", str(ref)
			count++
			continue
		}
		count += refSelf(c, ref)
	}
	return count
}

// key is the index of k in mapping n, or -1 (n may be nil).
func key(n *yaml.Node, k string) int {
	if n == nil || n.Kind != yaml.MappingNode {
		return -1
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == k {
			return i
		}
	}
	return -1
}

// value is the value of k in mapping n, or nil (n may be nil).
func value(n *yaml.Node, k string) *yaml.Node {
	if i := key(n, k); i >= 0 {
		return n.Content[i+1]
	}
	return nil
}

func str(s string) *yaml.Node { return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s} }

// TestAs31 rewrites each form of nullable the document uses, leaving a
// property named nullable and examples alone, and a recursive reference.
func TestAs31(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"type: string\nnullable: true\n", "type:\n    - string\n    - \"null\"\n"},
		{"type: string\nenum: [a]\nnullable: true\n", "type:\n    - string\n    - \"null\"\nenum: [a, null]\n"},
		{"type: [integer, \"null\"]\nnullable: true\n", "type: [integer, \"null\"]\n"},
		{"type: string\nnullable: false\n", "type: string\n"},
		{"$ref: '#/x'\nnullable: true\ndescription: d\n",
			"description: d\nanyOf:\n    - $ref: '#/x'\n    - type: \"null\"\n"},
		{"description: d\nnullable: true\n", "description: d\n"},
		{"type: object\nallOf: [{$ref: '#/x'}]\nnullable: true\n", "anyOf:\n    - type: object\n      allOf: [{$ref: '#/x'}]\n    - type: \"null\"\n"},
		{"properties:\n  nullable: {type: boolean}\n  default: {type: string, nullable: true}\nexample: {nullable: true}\n",
			"properties:\n    nullable: {type: boolean}\n    default: {type: [string, \"null\"]}\nexample: {nullable: true}\n"},
		{"components:\n  schemas:\n    F:\n      $recursiveAnchor: true\n      items: {oneOf: [{type: string}, {$recursiveRef: \"#\"}]}\n",
			"components:\n    schemas:\n        F:\n            items: {oneOf: [{type: string}, {$ref: '#/components/schemas/F'}]}\n"},
	} {
		got, _, err := as31([]byte(tc.in))
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != tc.want {
			t.Errorf("%s\nbecame\n%s\nwant\n%s", tc.in, got, tc.want)
		}
	}
	if _, _, err := as31([]byte("items: {$recursiveRef: \"#\"}\n")); err == nil {
		t.Error("a $recursiveRef outside a $recursiveAnchor component was let through")
	}
	s := getSpec(t)
	t.Logf("read as OpenAPI 3.1: %d schemas with nullable, %d $recursiveRef", s.rewrites.nullable, s.rewrites.recursive)
}
