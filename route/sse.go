package route

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
)

// errEventTooLarge is returned by sseReader when an upstream event exceeds
// its size limit: a misbehaving upstream must not make the node buffer
// without bound.
var errEventTooLarge = errors.New("upstream event exceeds the size limit")

// sseEvent is one server-sent event, reduced to what a chat completion
// stream uses. Data is only valid until the next call of next.
type sseEvent struct {
	Data    []byte // the data lines joined by '\n'; nil for a comment
	Comment bool   // a ":" keep-alive line and nothing else
}

// sseReader parses a text/event-stream (WHATWG HTML §9.2) incrementally.
// It keeps at most one event in memory.
type sseReader struct {
	br      *bufio.Reader
	max     int
	data    []byte
	hasData bool
	// rest is what follows a lone CR in the line last read: a line of its
	// own still to return. It aliases br's buffer, which stays valid
	// because nothing is read while it is pending.
	rest []byte
}

// sseBufferSize is the read buffer of a stream: chunks are a few hundred
// bytes, so it holds a burst of them; a longer line is read past it. Every
// open stream holds one, so it is small.
const sseBufferSize = 4 << 10

func newSSEReader(r io.Reader, maxEvent int) *sseReader {
	return &sseReader{br: bufio.NewReaderSize(r, sseBufferSize), max: maxEvent}
}

// reset makes s read r afresh, keeping its buffers; a nil r lets go of the
// last one. An event larger than the read buffer grows data, which is not
// kept beyond the buffer's size.
func (s *sseReader) reset(r io.Reader, maxEvent int) {
	s.br.Reset(r)
	s.max = maxEvent
	if cap(s.data) > 16<<10 { // after an unusually large event
		s.data = nil
	}
	s.data, s.hasData, s.rest = s.data[:0], false, nil
}

// eventBuffered reports whether a whole further event is already in
// memory, so a caller can hold its flush until the burst of events that
// arrived together is written, and never for an event still arriving.
func (s *sseReader) eventBuffered() bool {
	n := s.br.Buffered()
	if n == 0 {
		return false
	}
	b, _ := s.br.Peek(n)
	return bytes.Contains(b, []byte("\n\n")) || bytes.Contains(b, []byte("\n\r\n"))
}

// next returns the next event. At the end of the input it returns an event
// still pending (servers that omit the final blank line exist) and then
// io.EOF; a read error is returned as it is.
func (s *sseReader) next() (sseEvent, error) {
	s.data = s.data[:0]
	s.hasData = false
	comment := false
	for {
		line, err := s.readLine()
		if err != nil {
			if err == io.EOF && s.hasData {
				return sseEvent{Data: s.data}, nil
			}
			return sseEvent{}, err
		}
		if len(line) == 0 { // end of event
			if s.hasData {
				return sseEvent{Data: s.data}, nil
			}
			if comment {
				return sseEvent{Comment: true}, nil
			}
			continue
		}
		field, value := line, []byte(nil)
		if i := bytes.IndexByte(line, ':'); i >= 0 {
			field, value = line[:i], line[i+1:]
			if len(value) > 0 && value[0] == ' ' {
				value = value[1:]
			}
		}
		switch {
		case len(field) == 0:
			comment = true
		case string(field) == "data":
			if s.hasData {
				s.data = append(s.data, '\n')
			}
			if len(s.data)+len(value) > s.max {
				return sseEvent{}, fmt.Errorf("%w (%d bytes)", errEventTooLarge, s.max)
			}
			s.data = append(s.data, value...)
			s.hasData = true
		}
		// event, id and retry fields carry nothing a chat stream uses.
	}
}

// readLine returns one line without its terminator (LF, CRLF or a lone
// CR, as WHATWG's grammar has it), refusing lines longer than the event
// limit. A lone CR must end a line here as it does in every client:
// relayed inside an event's data, it would split the event in two.
func (s *sseReader) readLine() ([]byte, error) {
	if s.rest == nil {
		line, err := s.readLF()
		if err != nil {
			return nil, err
		}
		s.rest = line
	}
	line := s.rest
	i := bytes.IndexByte(line, '\r')
	if i < 0 {
		s.rest = nil
		return line, nil
	}
	if s.rest = line[i+1:]; len(s.rest) == 0 {
		s.rest = nil // CR LF: one terminator
	}
	return line[:i], nil
}

// readLF returns the input up to the next LF (or its end), without the LF.
func (s *sseReader) readLF() ([]byte, error) {
	line, err := s.br.ReadSlice('\n')
	if err == bufio.ErrBufferFull {
		long := append([]byte(nil), line...)
		for err == bufio.ErrBufferFull {
			if len(long) > s.max {
				return nil, fmt.Errorf("%w (%d bytes)", errEventTooLarge, s.max)
			}
			line, err = s.br.ReadSlice('\n')
			long = append(long, line...)
		}
		line = long
	}
	if err != nil && !(err == io.EOF && len(line) > 0) {
		return nil, err
	}
	return bytes.TrimSuffix(line, []byte("\n")), nil
}
