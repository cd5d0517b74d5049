package route

import (
	"fmt"
	"testing"
)

func TestRedact(t *testing.T) {
	r := NewRedactor(
		"sk-redact-test-0123456789",
		"sk-redact-test-0123456789-longer", // contains the first: replaced whole
		"short",                            // too short to redact
	)
	for in, want := range map[string]string{
		"key sk-redact-test-0123456789 echoed":        "key [redacted] echoed",
		"key sk-redact-test-0123456789-longer echoed": "key [redacted] echoed",
		"a short word":                    "a short word",
		"nothing here at all, just words": "nothing here at all, just words",
	} {
		if got := r.Redact(in); got != want {
			t.Errorf("Redact(%q) = %q, want %q", in, got, want)
		}
	}
	clean := "nothing here at all, just words"
	if a := testing.AllocsPerRun(100, func() { r.Redact(clean) }); a != 0 {
		t.Fatalf("Redact of clean text allocates %v times", a)
	}
	if s := fmt.Sprint(Secret("sk-redact-test-0123456789")); s != "[redacted]" {
		t.Fatal(s)
	}
	// Each node has its own: another's secrets are not its.
	if other := NewRedactor("sk-another-node-0123456789"); other.Redact("sk-redact-test-0123456789") != "sk-redact-test-0123456789" {
		t.Fatal("a redactor redacted a secret it was not given")
	}
	var none *Redactor
	if none.Redact("sk-redact-test-0123456789") != "sk-redact-test-0123456789" || NewRedactor("short") != nil {
		t.Fatal("the nil redactor")
	}
}
