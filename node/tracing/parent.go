package tracing

import "encoding/hex"

// traceParent is a parsed W3C traceparent header.
type traceParent struct {
	trace   [16]byte
	span    [8]byte
	sampled bool
}

// parseTraceParent parses version 00 of the header (and, as the spec asks,
// the first four fields of a later version). It allocates nothing, so a
// node that does not trace checks what it passes on for free.
func parseTraceParent(s string) (traceParent, bool) {
	var tp traceParent
	if len(s) < 55 || (len(s) > 55 && (s[:2] == "00" || s[55] != '-')) || s[2] != '-' || s[35] != '-' || s[52] != '-' || s[:2] == "ff" {
		return tp, false
	}
	var ver [1]byte
	if _, err := hex.Decode(ver[:], []byte(s[:2])); err != nil {
		return tp, false
	}
	var flags [1]byte
	if _, err := hex.Decode(tp.trace[:], []byte(s[3:35])); err != nil {
		return tp, false
	}
	if _, err := hex.Decode(tp.span[:], []byte(s[36:52])); err != nil {
		return tp, false
	}
	if _, err := hex.Decode(flags[:], []byte(s[53:55])); err != nil {
		return tp, false
	}
	if tp.trace == ([16]byte{}) || tp.span == ([8]byte{}) || !lowerHex(s[:55]) {
		return tp, false
	}
	tp.sampled = flags[0]&1 == 1
	return tp, true
}

func lowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c >= 'A' && c <= 'F' {
			return false
		}
	}
	return true
}

func (tp traceParent) String() string {
	flags := "00"
	if tp.sampled {
		flags = "01"
	}
	return "00-" + hex.EncodeToString(tp.trace[:]) + "-" + hex.EncodeToString(tp.span[:]) + "-" + flags
}

// maxTraceState is the longest tracestate passed on (the spec's 32
// members fit in 512 bytes); a longer one is dropped.
const maxTraceState = 512

// State returns the tracestate to pass on with traceparent (what Begin
// returned): the caller's header, when there is a traceparent and the
// header is of a sane size and printable ASCII.
func State(traceparent, header string) string {
	if traceparent == "" || len(header) > maxTraceState {
		return ""
	}
	for i := 0; i < len(header); i++ {
		if c := header[i]; c < ' ' || c > '~' {
			return ""
		}
	}
	return header
}
