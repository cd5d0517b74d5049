package gossip

import (
	"encoding/binary"
	"errors"
	"math"
)

// errShort is a decoding error: the message ended early or a length was
// out of bounds.
var errShort = errors.New("gossip: truncated or malformed message")

// encoder appends compact binary fields: unsigned varints, zig-zag
// varints, length-prefixed strings and little-endian floats. Messages are
// versioned by their first bytes and decoders ignore trailing fields they
// do not know, so a newer node can add fields an older one skips.
type encoder struct{ b []byte }

func (e *encoder) byte1(v byte)     { e.b = append(e.b, v) }
func (e *encoder) uvarint(v uint64) { e.b = binary.AppendUvarint(e.b, v) }
func (e *encoder) varint(v int64)   { e.b = binary.AppendVarint(e.b, v) }
func (e *encoder) str(s string)     { e.uvarint(uint64(len(s))); e.b = append(e.b, s...) }
func (e *encoder) f64(v float64)    { e.b = binary.LittleEndian.AppendUint64(e.b, math.Float64bits(v)) }
func (e *encoder) bytes(p []byte)   { e.uvarint(uint64(len(p))); e.b = append(e.b, p...) }
func (e *encoder) u32(v uint32)     { e.b = binary.LittleEndian.AppendUint32(e.b, v) }
func (e *encoder) boolean(v bool) {
	if v {
		e.byte1(1)
	} else {
		e.byte1(0)
	}
}

// decoder reads what encoder wrote. The first error sticks: later reads
// return zero values, so a message is decoded straight through and its
// error checked once.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail() { d.err, d.b = errShort, nil }

func (d *decoder) byte1() byte {
	if d.err != nil || len(d.b) < 1 {
		d.fail()
		return 0
	}
	v := d.b[0]
	d.b = d.b[1:]
	return v
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail()
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) varint() int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail()
		return 0
	}
	d.b = d.b[n:]
	return v
}

// maxField bounds one string or byte field: nothing gossiped is larger.
const maxField = 1 << 16

func (d *decoder) bytes() []byte {
	n := d.uvarint()
	if d.err != nil || n > maxField || n > uint64(len(d.b)) {
		d.fail()
		return nil
	}
	v := d.b[:n:n]
	d.b = d.b[n:]
	return v
}

func (d *decoder) str() string { return string(d.bytes()) }

func (d *decoder) f64() float64 {
	if d.err != nil || len(d.b) < 8 {
		d.fail()
		return 0
	}
	v := math.Float64frombits(binary.LittleEndian.Uint64(d.b))
	d.b = d.b[8:]
	return v
}

func (d *decoder) boolean() bool { return d.byte1() != 0 }

func (d *decoder) u32() uint32 {
	if d.err != nil || len(d.b) < 4 {
		d.fail()
		return 0
	}
	v := binary.LittleEndian.Uint32(d.b)
	d.b = d.b[4:]
	return v
}
