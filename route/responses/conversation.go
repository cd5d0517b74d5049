package responses

import (
	"encoding/json"
	"fmt"
)

// Conversation is what a later request's previous_response_id continues,
// a JSON array of chat messages: the messages of chatReq (what
// ToChatRequest made of req) but the system message it made of req's
// instructions, which OpenAI does not carry over to a follow-up, then
// assistant (what FromChatAnswer or Stream.Assistant gave). Arguments
// that are not what this package made are an error.
func Conversation(req, chatReq, assistant []byte) ([]byte, error) {
	var in struct {
		Instructions *string `json:"instructions"`
	}
	var chat struct {
		Messages []json.RawMessage `json:"messages"`
	}
	var answer []json.RawMessage
	if err := json.Unmarshal(req, &in); err != nil {
		return nil, fmt.Errorf("responses: conversation: the request: %w", err)
	}
	if err := json.Unmarshal(chatReq, &chat); err != nil {
		return nil, fmt.Errorf("responses: conversation: the chat request: %w", err)
	}
	if err := json.Unmarshal(assistant, &answer); err != nil {
		return nil, fmt.Errorf("responses: conversation: the answer: %w", err)
	}
	msgs := chat.Messages
	if in.Instructions != nil && *in.Instructions != "" && len(msgs) > 0 {
		msgs = msgs[1:] // ToChatRequest put them first
	}
	out := make([]json.RawMessage, 0, len(msgs)+len(answer))
	return json.Marshal(append(append(out, msgs...), answer...))
}
