package emulator

import (
	"bytes"
	"encoding/json"
	"slices"
	"strconv"
)

// toolCall is the function call the emulator answers with when a request
// offers function tools.
type toolCall struct {
	name string
	args string // compact JSON: every required parameter, filled in
}

// tools is what a body says about tools; route.ParseChatRequest relays
// these fields without reading them.
type tools struct {
	raw  []byte    // the tools array as sent, counted into the prompt; nil when absent
	call *toolCall // nil when no call is to be made
}

type toolSpec struct {
	Type     string `json:"type"`
	Function *struct {
		Name       string          `json:"name"`
		Parameters json.RawMessage `json:"parameters"`
	} `json:"function"`
}

// readTools finds the call to make: to the function tool_choice names, else
// to the first function tool, unless tool_choice is "none".
func readTools(body []byte) (tools, *apiError) {
	if !bytes.Contains(body, []byte(`"tools"`)) {
		return tools{}, nil // the common case costs no second decode
	}
	var fields struct {
		Tools      json.RawMessage `json:"tools"`
		ToolChoice json.RawMessage `json:"tool_choice"`
	}
	if err := json.Unmarshal(body, &fields); err != nil {
		return tools{}, invalidParam("", "the request body could not be decoded: "+err.Error())
	}
	if len(fields.Tools) == 0 || string(fields.Tools) == "null" {
		return tools{}, nil
	}
	var specs []toolSpec
	if err := json.Unmarshal(fields.Tools, &specs); err != nil {
		return tools{}, invalidParam("tools", "must be an array of tools")
	}
	for i, s := range specs {
		if s.Type == "function" && (s.Function == nil || s.Function.Name == "") {
			return tools{}, invalidParam("tools["+strconv.Itoa(i)+"].function.name", "is required")
		}
	}
	t := tools{raw: fields.Tools}
	want, none, err := readToolChoice(fields.ToolChoice)
	if err != nil || none {
		return t, err
	}
	i := slices.IndexFunc(specs, func(s toolSpec) bool {
		return s.Type == "function" && (want == "" || s.Function.Name == want)
	})
	switch {
	case i >= 0:
		t.call = &toolCall{name: specs[i].Function.Name, args: exampleArguments(specs[i].Function.Parameters)}
	case want != "":
		return t, invalidParam("tool_choice", "names function "+strconv.Quote(want)+", which is not in tools")
	}
	return t, nil
}

// readToolChoice returns the function tool_choice names ("" for any) and
// whether it forbids calls.
func readToolChoice(raw json.RawMessage) (name string, none bool, _ *apiError) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", false, nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		switch s {
		case "none":
			return "", true, nil
		case "auto", "required":
			return "", false, nil
		}
		return "", false, invalidParam("tool_choice", `must be "none", "auto", "required" or an object; got `+strconv.Quote(s))
	}
	var c struct {
		Type     string `json:"type"`
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
		AllowedTools struct {
			Tools []toolSpec `json:"tools"`
		} `json:"allowed_tools"`
	}
	if err := json.Unmarshal(raw, &c); err != nil {
		return "", false, invalidParam("tool_choice", "must be a string or an object")
	}
	switch c.Type {
	case "function":
		if c.Function.Name == "" {
			return "", false, invalidParam("tool_choice.function.name", "is required")
		}
		return c.Function.Name, false, nil
	case "allowed_tools":
		for _, t := range c.AllowedTools.Tools {
			if t.Type == "function" && t.Function != nil && t.Function.Name != "" {
				return t.Function.Name, false, nil
			}
		}
	}
	return "", false, nil // other kinds of choice: as "auto"
}

// exampleArguments returns a compact JSON object with every required
// property of the JSON schema params: strings "emulated", numbers and
// integers 1, booleans true, arrays [], objects {}, anything else null.
func exampleArguments(params json.RawMessage) string {
	var schema struct {
		Properties map[string]json.RawMessage `json:"properties"`
		Required   []string                   `json:"required"`
	}
	_ = json.Unmarshal(params, &schema) // a schema that does not decode requires nothing
	b := []byte{'{'}
	for i, name := range schema.Required {
		if slices.Contains(schema.Required[:i], name) {
			continue
		}
		if len(b) > 1 {
			b = append(b, ',')
		}
		b = appendString(b, name)
		b = append(b, ':')
		b = append(b, exampleValue(schema.Properties[name])...)
	}
	return string(append(b, '}'))
}

func exampleValue(prop json.RawMessage) string {
	var p struct {
		Type json.RawMessage `json:"type"`
	}
	if json.Unmarshal(prop, &p) != nil {
		return "null"
	}
	var typ string
	if json.Unmarshal(p.Type, &typ) != nil {
		var types []string // ["string", "null"]
		_ = json.Unmarshal(p.Type, &types)
		for _, t := range types {
			if t != "null" {
				typ = t
				break
			}
		}
	}
	switch typ {
	case "string":
		return `"emulated"`
	case "number", "integer":
		return "1"
	case "boolean":
		return "true"
	case "array":
		return "[]"
	case "object":
		return "{}"
	}
	return "null"
}
