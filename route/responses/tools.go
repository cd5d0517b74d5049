package responses

import (
	"encoding/json"
	"fmt"
)

// functionTool is a Responses function tool: its function's members at
// the top level, where chat nests them under "function".
type functionTool struct {
	Type        string          `json:"type"`
	Name        string          `json:"name"`
	Description *string         `json:"description"`
	Parameters  json.RawMessage `json:"parameters"`
	Strict      *bool           `json:"strict"`
}

type chatTool struct {
	Type     string       `json:"type"`
	Function chatFunction `json:"function"`
}

type chatFunction struct {
	Name        string          `json:"name"`
	Description *string         `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters,omitempty"`
	Strict      *bool           `json:"strict,omitempty"`
}

// translateTools carries function tools, tool_choice and
// parallel_tool_calls; any other tool is refused. Without tools, chat
// takes neither tool_choice nor parallel_tool_calls, and they change
// nothing.
func translateTools(in *createRequest, out *chatRequest) error {
	for i, raw := range in.Tools {
		at := fmt.Sprintf("tools[%d]", i)
		var t functionTool
		if err := json.Unmarshal(raw, &t); err != nil {
			return bad(at, "Invalid tool: expected an object with a type.")
		}
		switch {
		case t.Type != "function":
			return unsupported(at+".type", fmt.Sprintf("Tool type %q", t.Type))
		case t.Name == "":
			return bad(at+".name", "Missing required parameter: '%s.name'.", at)
		}
		f := chatFunction{Name: t.Name, Description: t.Description, Strict: t.Strict}
		if given(t.Parameters) {
			f.Parameters = t.Parameters
		}
		out.Tools = append(out.Tools, chatTool{Type: "function", Function: f})
	}
	choice, err := toolChoice(in.ToolChoice)
	if err != nil || len(out.Tools) == 0 {
		return err
	}
	out.ToolChoice, out.ParallelToolCalls = choice, in.ParallelToolCalls
	return nil
}

// toolChoice is a Responses tool_choice as chat's: a mode as it is, a
// function by name nested under "function"; nil when none is given.
func toolChoice(raw json.RawMessage) (any, error) {
	if !given(raw) {
		return nil, nil
	}
	var mode string
	if json.Unmarshal(raw, &mode) == nil {
		switch mode {
		case "auto", "none", "required":
			return mode, nil
		}
		return nil, bad("tool_choice", "Invalid value: '%s'. Supported values are: 'auto', 'none' and 'required'.", mode)
	}
	var c struct {
		Type string `json:"type"`
		Name string `json:"name"`
	}
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, bad("tool_choice", "Invalid type for 'tool_choice': expected a string or an object.")
	}
	switch {
	case c.Type != "function":
		return nil, unsupported("tool_choice.type", fmt.Sprintf("Tool choice %q", c.Type))
	case c.Name == "":
		return nil, bad("tool_choice.name", "Missing required parameter: 'tool_choice.name'.")
	}
	return map[string]any{"type": "function", "function": map[string]string{"name": c.Name}}, nil
}

// translateText carries text.format as chat's response_format (plain
// text is chat's default, so it is not sent) and text.verbosity.
func translateText(in *createRequest, out *chatRequest) error {
	if in.Text == nil {
		return nil
	}
	if in.Text.Verbosity != nil {
		out.Verbosity = *in.Text.Verbosity
	}
	if !given(in.Text.Format) {
		return nil
	}
	var f struct {
		Type        string          `json:"type"`
		Name        string          `json:"name"`
		Description *string         `json:"description"`
		Schema      json.RawMessage `json:"schema"`
		Strict      *bool           `json:"strict"`
	}
	if err := json.Unmarshal(in.Text.Format, &f); err != nil {
		return bad("text.format", "Invalid type for 'text.format': expected an object.")
	}
	switch f.Type {
	case "text":
	case "json_object":
		out.ResponseFormat = map[string]string{"type": "json_object"}
	case "json_schema":
		if f.Name == "" {
			return bad("text.format.name", "Missing required parameter: 'text.format.name'.")
		}
		schema := map[string]any{"name": f.Name}
		if f.Description != nil {
			schema["description"] = *f.Description
		}
		if given(f.Schema) {
			schema["schema"] = f.Schema
		}
		if f.Strict != nil {
			schema["strict"] = *f.Strict
		}
		out.ResponseFormat = map[string]any{"type": "json_schema", "json_schema": schema}
	default:
		return bad("text.format.type", "Invalid value: '%s'. Supported values are: 'text', 'json_object' and 'json_schema'.", f.Type)
	}
	return nil
}
