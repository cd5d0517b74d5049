package anthropic

import (
	"encoding/json"
	"fmt"
)

// Stream translates a chat completion stream, chunk by chunk, into
// Anthropic's stream events: message_start, then for each content block
// content_block_start, its deltas and content_block_stop, then
// message_delta (the stop reason and usage) and message_stop.
type Stream struct {
	model   string
	started bool
	open    int // the open content block's index, -1 for none
	kind    string
	next    int
	tools   map[int]int // a chat tool call's index → its block's
	stop    string
	usage   usage
	ended   bool
}

// NewStream returns the translation of a stream answering model.
func NewStream(model string) *Stream { return &Stream{model: model, open: -1, tools: map[int]int{}} }

type chatChunk struct {
	ID      string `json:"id"`
	Choices []struct {
		Index        int     `json:"index"`
		FinishReason *string `json:"finish_reason"`
		Delta        struct {
			Content   *string `json:"content"`
			ToolCalls []struct {
				Index    int    `json:"index"`
				ID       string `json:"id"`
				Function struct {
					Name      string `json:"name"`
					Arguments string `json:"arguments"`
				} `json:"function"`
			} `json:"tool_calls"`
		} `json:"delta"`
	} `json:"choices"`
	Usage *chatUsage      `json:"usage"`
	Error json.RawMessage `json:"error"`
}

func event(dst []byte, name string, v any) []byte {
	b, _ := json.Marshal(v)
	dst = append(dst, "event: "...)
	dst = append(dst, name...)
	dst = append(dst, "\ndata: "...)
	dst = append(dst, b...)
	return append(dst, "\n\n"...)
}

// Chunk translates one chat chunk (an SSE data payload; "[DONE]" ends
// the stream) into the events it makes, appended to dst.
func (s *Stream) Chunk(dst, data []byte) []byte {
	if string(data) == "[DONE]" {
		return s.finish(dst)
	}
	var c chatChunk
	if json.Unmarshal(data, &c) != nil {
		return dst
	}
	if len(c.Error) > 0 {
		var e struct {
			Message string `json:"message"`
		}
		_ = json.Unmarshal(c.Error, &e)
		s.ended = true
		return event(dst, "error", map[string]any{"type": "error", "error": map[string]string{"type": "api_error", "message": e.Message}})
	}
	if !s.started {
		s.started = true
		dst = event(dst, "message_start", map[string]any{"type": "message_start", "message": message{
			ID: messageID(c.ID), Type: "message", Role: "assistant", Model: s.model, Content: []outBlock{}}})
	}
	for _, ch := range c.Choices {
		if ch.Index != 0 {
			continue // Messages has one answer
		}
		if t := ch.Delta.Content; t != nil && *t != "" {
			if s.kind != "text" {
				dst = s.openBlock(dst, "text", outBlock{Type: "text", Text: new(string)})
			}
			dst = event(dst, "content_block_delta", map[string]any{"type": "content_block_delta", "index": s.open,
				"delta": map[string]string{"type": "text_delta", "text": *t}})
		}
		for _, tc := range ch.Delta.ToolCalls {
			if _, ok := s.tools[tc.Index]; !ok {
				dst = s.openBlock(dst, "tool_use", outBlock{Type: "tool_use", ID: tc.ID, Name: tc.Function.Name, Input: json.RawMessage("{}")})
				s.tools[tc.Index] = s.open
			}
			if tc.Function.Arguments != "" {
				dst = event(dst, "content_block_delta", map[string]any{"type": "content_block_delta", "index": s.tools[tc.Index],
					"delta": map[string]string{"type": "input_json_delta", "partial_json": tc.Function.Arguments}})
			}
		}
		if ch.FinishReason != nil && *ch.FinishReason != "" {
			s.stop = stopReason(*ch.FinishReason)
		}
	}
	if c.Usage != nil {
		s.usage = c.Usage.messages()
	}
	return dst
}

func (s *Stream) openBlock(dst []byte, kind string, b outBlock) []byte {
	dst = s.closeBlock(dst)
	s.open, s.kind = s.next, kind
	s.next++
	return event(dst, "content_block_start", map[string]any{"type": "content_block_start", "index": s.open, "content_block": b})
}

func (s *Stream) closeBlock(dst []byte) []byte {
	if s.open < 0 {
		return dst
	}
	dst = event(dst, "content_block_stop", map[string]any{"type": "content_block_stop", "index": s.open})
	s.open, s.kind = -1, ""
	return dst
}

// finish closes the stream: the open block, the stop reason and usage,
// message_stop. Only the first call writes.
func (s *Stream) finish(dst []byte) []byte {
	if s.ended {
		return dst
	}
	s.ended = true
	if !s.started {
		dst = event(dst, "message_start", map[string]any{"type": "message_start", "message": message{
			ID: "msg_" + fmt.Sprint(s.next), Type: "message", Role: "assistant", Model: s.model, Content: []outBlock{}}})
	}
	dst = s.closeBlock(dst)
	if s.stop == "" {
		s.stop = "end_turn"
	}
	dst = event(dst, "message_delta", map[string]any{"type": "message_delta",
		"delta": map[string]any{"stop_reason": s.stop, "stop_sequence": nil}, "usage": s.usage})
	return event(dst, "message_stop", map[string]any{"type": "message_stop"})
}

// Ended reports whether the stream's last event was written.
func (s *Stream) Ended() bool { return s.ended }
