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
)

var modeNames = [...]string{ModeUp: "up", ModeRefuse: "refuse", ModeError: "error", ModeHang: "hang", ModeCut: "cut"}

// String returns the name ParseMode accepts.
func (m Mode) String() string {
	if m.valid() {
		return modeNames[m]
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

func (m Mode) valid() bool { return m >= 0 && int(m) < len(modeNames) }

// ParseMode returns the mode named s: up, refuse, error, hang or cut.
func ParseMode(s string) (Mode, error) {
	for m, name := range modeNames {
		if name == s {
			return Mode(m), nil
		}
	}
	return 0, fmt.Errorf("emulator: unknown mode %q (want up, refuse, error, hang or cut)", s)
}
