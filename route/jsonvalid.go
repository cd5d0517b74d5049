package route

// validJSON reports what json.Valid does — whether b is one JSON value
// (RFC 8259) with only whitespace around it — in one pass several times
// faster: every request body and whole answer is checked before it is
// scanned, and most of their bytes are strings, which are passed over a
// byte at a time with no state machine. Like json.Valid it does not check
// UTF-8 (topMembers does) and refuses nesting deeper than 10,000.
// FuzzValidJSON holds the two equal.
func validJSON(b []byte) bool {
	i := validValue(b, skipSpace(b, 0), maxJSONDepth)
	return i >= 0 && skipSpace(b, i) == len(b)
}

// maxJSONDepth is encoding/json's limit on nesting.
const maxJSONDepth = 10000

// validValue returns the index just past the valid JSON value that
// starts at b[i], nested no deeper than maxDepth, or -1 when there is
// none: validJSON's one pass, which scanAnswer also makes member by
// member.
func validValue(b []byte, i, maxDepth int) int {
	var small [64]byte
	stack := small[:0] // the open containers, '{' or '['
	for {
		// A value starts at b[i].
		if i >= len(b) {
			return -1
		}
		switch c := b[i]; {
		case c == '{' || c == '[':
			if len(stack) == maxDepth {
				return -1
			}
			stack = append(stack, c)
			i = skipSpace(b, i+1)
			if i < len(b) && b[i] == c+2 { // '}' or ']': empty
				stack = stack[:len(stack)-1]
				i++
				break
			}
			if c == '{' {
				if i = validMember(b, i); i < 0 {
					return -1
				}
			}
			continue
		case c == '"':
			if i = skipValidString(b, i); i < 0 {
				return -1
			}
		case c == '-' || c >= '0' && c <= '9':
			if i = skipNumber(b, i); i < 0 {
				return -1
			}
		case c == 't':
			if i = literal(b, i, "true"); i < 0 {
				return -1
			}
		case c == 'f':
			if i = literal(b, i, "false"); i < 0 {
				return -1
			}
		case c == 'n':
			if i = literal(b, i, "null"); i < 0 {
				return -1
			}
		default:
			return -1
		}
		// A value ended before b[i]: close containers, or go on to the
		// next element.
		for {
			if len(stack) == 0 {
				return i
			}
			i = skipSpace(b, i)
			if i >= len(b) {
				return -1
			}
			top := stack[len(stack)-1]
			if b[i] == top+2 {
				stack = stack[:len(stack)-1]
				i++
				continue
			}
			if b[i] != ',' {
				return -1
			}
			i = skipSpace(b, i+1)
			if top == '{' {
				if i = validMember(b, i); i < 0 {
					return -1
				}
			}
			break
		}
	}
}

// validMember checks an object member's name and colon at b[i], and returns
// where its value starts; -1 when they are not there.
func validMember(b []byte, i int) int {
	if i >= len(b) || b[i] != '"' {
		return -1
	}
	if i = skipValidString(b, i); i < 0 {
		return -1
	}
	if i = skipSpace(b, i); i >= len(b) || b[i] != ':' {
		return -1
	}
	return skipSpace(b, i+1)
}

// skipValidString returns the index past the string starting at b[i],
// -1 when it is not a valid one: unterminated, a control character, or
// an escape JSON does not have.
func skipValidString(b []byte, i int) int {
	for i++; i < len(b); i++ {
		switch c := b[i]; {
		case c == '"':
			return i + 1
		case c < 0x20:
			return -1
		case c == '\\':
			i++
			if i >= len(b) {
				return -1
			}
			switch b[i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if i+4 >= len(b) {
					return -1
				}
				for _, h := range b[i+1 : i+5] {
					if !(h >= '0' && h <= '9' || h >= 'a' && h <= 'f' || h >= 'A' && h <= 'F') {
						return -1
					}
				}
				i += 4
			default:
				return -1
			}
		}
	}
	return -1
}

// skipNumber returns the index past the number starting at b[i], -1 when
// it is not one: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func skipNumber(b []byte, i int) int {
	digits := func(i int) int { // past one digit or more; -1 for none
		j := i
		for j < len(b) && b[j] >= '0' && b[j] <= '9' {
			j++
		}
		if j == i {
			return -1
		}
		return j
	}
	if b[i] == '-' {
		i++
	}
	switch {
	case i >= len(b):
		return -1
	case b[i] == '0':
		i++
	default:
		if i = digits(i); i < 0 {
			return -1
		}
	}
	if i < len(b) && b[i] == '.' {
		if i = digits(i + 1); i < 0 {
			return -1
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if i = digits(i); i < 0 {
			return -1
		}
	}
	return i
}

// literal returns the index past lit at b[i], -1 when it is not there.
func literal(b []byte, i int, lit string) int {
	if len(b)-i < len(lit) || string(b[i:i+len(lit)]) != lit {
		return -1
	}
	return i + len(lit)
}
