package responses

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
)

// ErrEventTooLarge is a chat stream event larger than the bound the
// Stream was given: a misbehaving provider must not make the node buffer
// without bound.
var ErrEventTooLarge = errors.New("responses: the provider's stream event exceeds the size limit")

// DefaultMaxEvent is the bound on one chat stream event StreamReader
// takes when given none.
const DefaultMaxEvent = 1 << 20

// eventReader reads the data of a text/event-stream's events, one event
// at a time, holding at most one event of at most max bytes. Lines end at
// LF or CRLF; comments, event names, ids and retry fields are skipped.
type eventReader struct {
	br   *bufio.Reader
	max  int
	data []byte
}

func newEventReader(r io.Reader, max int) *eventReader {
	if max <= 0 {
		max = DefaultMaxEvent
	}
	return &eventReader{br: bufio.NewReaderSize(r, 4<<10), max: max}
}

// next returns the next event's data, valid until the following call. At
// the end of the input an event still pending (its blank line missing)
// is returned, then io.EOF; a read error is returned as it is.
func (r *eventReader) next() ([]byte, error) {
	r.data = r.data[:0]
	has := false
	for {
		line, err := r.line()
		if err != nil {
			if err == io.EOF && has {
				return r.data, nil
			}
			return nil, err
		}
		if len(line) == 0 {
			if has {
				return r.data, nil
			}
			continue
		}
		value, ok := bytes.CutPrefix(line, []byte("data:"))
		if !ok {
			continue
		}
		value, _ = bytes.CutPrefix(value, []byte(" "))
		if has {
			r.data = append(r.data, '\n')
		}
		if len(r.data)+len(value) > r.max {
			return nil, fmt.Errorf("%w (%d bytes)", ErrEventTooLarge, r.max)
		}
		r.data, has = append(r.data, value...), true
	}
}

// line returns the next line without its terminator; a line longer than
// the event bound is refused before it is all read.
func (r *eventReader) line() ([]byte, error) {
	line, err := r.br.ReadSlice('\n')
	if err == bufio.ErrBufferFull {
		long := append([]byte(nil), line...)
		for err == bufio.ErrBufferFull {
			if len(long) > r.max+2 {
				return nil, fmt.Errorf("%w (%d bytes)", ErrEventTooLarge, r.max)
			}
			line, err = r.br.ReadSlice('\n')
			long = append(long, line...)
		}
		line = long
	}
	if err != nil && !(err == io.EOF && len(line) > 0) {
		return nil, err
	}
	line = bytes.TrimSuffix(line, []byte("\n"))
	return bytes.TrimSuffix(line, []byte("\r")), nil
}
