package emulator

import "fmt"

// Mode is how the emulator fails, if at all.
type Mode int

const (
	// ModeUp serves normally.
	ModeUp Mode = iota
	// ModeRefuse closes the listener and every open connection: clients
	// get connection refused. Without a listener of its own (Handler used
	// in another server) the emulator aborts every connection instead.
	ModeRefuse
	// ModeError answers every API request 503.
	ModeError
	// ModeHang accepts requests and never answers; a request ends when its
	// client gives up (or at Shutdown, which aborts it).
	ModeHang
	// ModeCut aborts the connection of every generating answer: a stream
	// after about half of its chunks (no finish chunk, no [DONE]), any
	// other answer after its headers, before its body.
	ModeCut
	// ModeContentFilter refuses every generating request 400 as a
	// provider's content filter refuses a prompt, in the real shape of
	// the path's API: Azure OpenAI's content_filter (with its
	// ResponsibleAIPolicyViolation inner error) on Azure paths, OpenAI's
	// invalid_prompt on OpenAI's, Anthropic's "Output blocked by content
	// filtering policy" on Messages.
	ModeContentFilter
	// ModeContextLength refuses every generating request 400 as too long
	// for the model's context window: OpenAI's (and Azure's)
	// context_length_exceeded, Anthropic's "prompt is too long".
	ModeContextLength
)

var modeNames = [...]string{ModeUp: "up", ModeRefuse: "refuse", ModeError: "error", ModeHang: "hang", ModeCut: "cut",
	ModeContentFilter: "content_filter", ModeContextLength: "context_length"}

// String returns the name ParseMode accepts.
func (m Mode) String() string {
	if m.valid() {
		return modeNames[m]
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

func (m Mode) valid() bool { return m >= 0 && int(m) < len(modeNames) }

// ParseMode returns the mode named s: up, refuse, error, hang, cut,
// content_filter or context_length.
func ParseMode(s string) (Mode, error) {
	for m, name := range modeNames {
		if name == s {
			return Mode(m), nil
		}
	}
	return 0, fmt.Errorf("emulator: unknown mode %q (want up, refuse, error, hang, cut, content_filter or context_length)", s)
}
