package anthropic

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"strings"
	"time"
)

// finishReason maps a Messages stop_reason to a chat finish_reason.
func finishReason(stop string) string {
	switch stop {
	case "max_tokens":
		return "length"
	case "tool_use":
		return "tool_calls"
	case "refusal":
		return "content_filter"
	}
	return "stop"
}

type anthMessage struct {
	ID      string `json:"id"`
	Model   string `json:"model"`
	Content []struct {
		Type  string          `json:"type"`
		Text  string          `json:"text"`
		ID    string          `json:"id"`
		Name  string          `json:"name"`
		Input json.RawMessage `json:"input"`
	} `json:"content"`
	StopReason string `json:"stop_reason"`
	Usage      usage  `json:"usage"`
}

func chatID(msgID string) string { return "chatcmpl-" + strings.TrimPrefix(msgID, "msg_") }

// toChatUsage is a Message's usage in chat's terms: the prompt is the
// input tokens, those read from the cache and those written to it (all
// three priced at the model's input price but the cache reads, chat's
// cached_tokens, at its cached input price).
func toChatUsage(u usage) map[string]any {
	prompt := u.InputTokens + u.CacheReadInputTokens + u.CacheCreationInputTokens
	return map[string]any{"prompt_tokens": prompt, "completion_tokens": u.OutputTokens, "total_tokens": prompt + u.OutputTokens,
		"prompt_tokens_details": map[string]int{"cached_tokens": u.CacheReadInputTokens}}
}

// ToChatAnswer translates a whole Message into a chat completion.
func ToChatAnswer(body []byte) ([]byte, error) {
	var m anthMessage
	if err := json.Unmarshal(body, &m); err != nil || m.ID == "" {
		return nil, bad("the provider's answer is not a Message")
	}
	var text strings.Builder
	var calls []map[string]any
	for _, b := range m.Content {
		switch b.Type {
		case "text":
			text.WriteString(b.Text)
		case "tool_use":
			calls = append(calls, map[string]any{"id": b.ID, "type": "function",
				"function": map[string]string{"name": b.Name, "arguments": string(b.Input)}})
		}
	}
	msg := map[string]any{"role": "assistant", "content": text.String()}
	if len(calls) > 0 {
		msg["tool_calls"] = calls
	}
	return json.Marshal(map[string]any{"id": chatID(m.ID), "object": "chat.completion", "created": time.Now().Unix(), "model": m.Model,
		"choices": []any{map[string]any{"index": 0, "message": msg, "finish_reason": finishReason(m.StopReason)}},
		"usage":   toChatUsage(m.Usage)})
}

// ToOpenAIError translates an Anthropic error document into OpenAI's
// shape, keeping its message and naming its type as the code.
func ToOpenAIError(body []byte) []byte {
	var e struct {
		Error struct {
			Type    string `json:"type"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal(body, &e) != nil || e.Error.Message == "" {
		return body
	}
	typ := "invalid_request_error"
	if e.Error.Type == "api_error" || e.Error.Type == "overloaded_error" {
		typ = "server_error"
	}
	b, _ := json.Marshal(map[string]any{"error": map[string]any{"message": e.Error.Message, "type": typ, "param": nil, "code": e.Error.Type}})
	return b
}

// chatStream reads a Messages stream as chat completion chunks.
type chatStream struct {
	in      *bufio.Reader
	closer  io.Closer
	out     bytes.Buffer
	id      string
	model   string
	created int64
	tools   map[int]int // a content block's index → its tool call's
	usage   usage
	done    bool
}

// StreamReader reads body, a Messages stream, as a chat completion
// stream: the same content in chat.completion.chunk events, a final usage
// chunk and [DONE]; an error event becomes chat's error event.
func StreamReader(body io.ReadCloser) io.ReadCloser {
	return &chatStream{in: bufio.NewReaderSize(body, 32<<10), closer: body, tools: map[int]int{}, created: time.Now().Unix()}
}

func (s *chatStream) Close() error { return s.closer.Close() }

func (s *chatStream) Read(p []byte) (int, error) {
	for s.out.Len() == 0 {
		if s.done {
			return 0, io.EOF
		}
		line, err := s.in.ReadBytes('\n')
		if len(line) > 0 {
			s.line(bytes.TrimRight(line, "\r\n"))
		}
		if err != nil {
			if s.out.Len() == 0 {
				return 0, err
			}
			break
		}
	}
	return s.out.Read(p)
}

func (s *chatStream) line(line []byte) {
	// The event's name is in its data's type too: only data is read.
	data, ok := bytes.CutPrefix(line, []byte("data:"))
	if !ok {
		return
	}
	s.data(bytes.TrimSpace(data))
}

func (s *chatStream) chunk(delta map[string]any, finish any) {
	b, _ := json.Marshal(map[string]any{"id": s.id, "object": "chat.completion.chunk", "created": s.created, "model": s.model,
		"choices": []any{map[string]any{"index": 0, "delta": delta, "finish_reason": finish}}})
	s.emit(b)
}

func (s *chatStream) emit(b []byte) {
	s.out.WriteString("data: ")
	s.out.Write(b)
	s.out.WriteString("\n\n")
}

func (s *chatStream) data(data []byte) {
	var ev struct {
		Type    string `json:"type"`
		Index   int    `json:"index"`
		Message struct {
			ID    string `json:"id"`
			Model string `json:"model"`
			Usage usage  `json:"usage"`
		} `json:"message"`
		ContentBlock struct {
			Type string `json:"type"`
			ID   string `json:"id"`
			Name string `json:"name"`
		} `json:"content_block"`
		Delta struct {
			Type        string `json:"type"`
			Text        string `json:"text"`
			PartialJSON string `json:"partial_json"`
			StopReason  string `json:"stop_reason"`
		} `json:"delta"`
		Usage *usage `json:"usage"`
		Error *struct {
			Type    string `json:"type"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal(data, &ev) != nil {
		return
	}
	switch ev.Type {
	case "message_start":
		s.id, s.model, s.usage = chatID(ev.Message.ID), ev.Message.Model, ev.Message.Usage
		s.chunk(map[string]any{"role": "assistant", "content": ""}, nil)
	case "content_block_start":
		if ev.ContentBlock.Type == "tool_use" {
			k := len(s.tools)
			s.tools[ev.Index] = k
			s.chunk(map[string]any{"tool_calls": []any{map[string]any{"index": k, "id": ev.ContentBlock.ID, "type": "function",
				"function": map[string]string{"name": ev.ContentBlock.Name, "arguments": ""}}}}, nil)
		}
	case "content_block_delta":
		switch ev.Delta.Type {
		case "text_delta":
			s.chunk(map[string]any{"content": ev.Delta.Text}, nil)
		case "input_json_delta":
			s.chunk(map[string]any{"tool_calls": []any{map[string]any{"index": s.tools[ev.Index],
				"function": map[string]string{"arguments": ev.Delta.PartialJSON}}}}, nil)
		}
	case "message_delta":
		if u := ev.Usage; u != nil {
			// message_delta's counts are cumulative; the input's may be
			// left out (message_start gave them).
			s.usage.OutputTokens = u.OutputTokens
			if u.InputTokens > 0 {
				s.usage.InputTokens = u.InputTokens
			}
			if u.CacheReadInputTokens > 0 {
				s.usage.CacheReadInputTokens = u.CacheReadInputTokens
			}
			if u.CacheCreationInputTokens > 0 {
				s.usage.CacheCreationInputTokens = u.CacheCreationInputTokens
			}
		}
		if ev.Delta.StopReason != "" {
			s.chunk(map[string]any{}, finishReason(ev.Delta.StopReason))
		}
	case "message_stop":
		b, _ := json.Marshal(map[string]any{"id": s.id, "object": "chat.completion.chunk", "created": s.created, "model": s.model,
			"choices": []any{}, "usage": toChatUsage(s.usage)})
		s.emit(b)
		s.out.WriteString("data: [DONE]\n\n")
		s.done = true
	case "error":
		msg := "the provider's stream failed"
		if ev.Error != nil {
			msg = ev.Error.Type + ": " + ev.Error.Message
		}
		b, _ := json.Marshal(map[string]any{"error": map[string]any{"message": msg, "type": "server_error"}})
		s.emit(b)
		s.done = true
	}
}
