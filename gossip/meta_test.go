package gossip

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

// The ledger version a node's build supports travels in its metadata
// after every earlier field: an older reader, which skips what follows
// the fields it knows, reads the rest as before, and a meta written
// before the field existed decodes with version 0.
func TestMetaLedgerVersion(t *testing.T) {
	m := Meta{Region: "eu-west", Jurisdiction: "eu", Voter: true, RPC: "10.0.0.5:7070", HTTP: "10.0.0.5:8080",
		Build: "v1.2.3", Raft: "10.0.0.5:7947", APIs: 0b1011, LedgerVersion: 2}
	b, err := m.Encode()
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeMeta(b)
	if err != nil || got != m {
		t.Fatalf("round trip: %+v %v", got, err)
	}

	// The layout of the build before: the same fields, without the
	// version. It is what the new encoding starts with, so that an
	// older reader decodes the same meta from it.
	var old encoder
	old.byte1(metaVersion)
	old.str(m.Region)
	old.str(m.Jurisdiction)
	old.boolean(m.Voter)
	old.byte1(byte(m.State))
	old.str(m.RPC)
	old.str(m.HTTP)
	old.str(m.Build)
	old.str(m.Raft)
	old.uvarint(m.APIs)
	if !bytes.HasPrefix(b, old.b) || len(b) == len(old.b) {
		t.Fatalf("the new meta %x does not extend the old layout %x", b, old.b)
	}
	got, err = DecodeMeta(old.b)
	want := m
	want.LedgerVersion = 0
	if err != nil || got != want {
		t.Fatalf("an older node's meta: %+v %v", got, err)
	}

	// A field a later build adds after the version is skipped.
	later := append(bytes.Clone(b), 0x05, 'x')
	if got, err := DecodeMeta(later); err != nil || got != m {
		t.Fatalf("a later node's meta: %+v %v", got, err)
	}

	// The 512-byte check holds with the new field: a byte over the
	// limit is refused, at the limit accepted.
	edge := Meta{Region: "eu-west", Build: strings.Repeat("b", 1)}
	enc, _ := edge.Encode()
	edge.Build = strings.Repeat("b", 1+MetaLimit-len(enc)) // one more byte of length prefix: MetaLimit + 1 in all
	if _, err := edge.Encode(); !errors.Is(err, ErrMetaTooLarge) {
		t.Fatalf("a meta one byte over the limit: %v", err)
	}
	edge.Build = edge.Build[1:]
	if enc, err := edge.Encode(); err != nil || len(enc) != MetaLimit {
		t.Fatalf("a meta at the limit: %d bytes, %v", len(enc), err)
	}
}
