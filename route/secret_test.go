package route

import (
	"fmt"
	"testing"
)

func TestRedact(t *testing.T) {
	RegisterSecret("sk-redact-test-0123456789")
	RegisterSecret("sk-redact-test-0123456789-longer") // contains the first: replaced whole
	RegisterSecret("short")                            // too short to redact
	for in, want := range map[string]string{
		"key sk-redact-test-0123456789 echoed":        "key [redacted] echoed",
		"key sk-redact-test-0123456789-longer echoed": "key [redacted] echoed",
		"a short word":                    "a short word",
		"nothing here at all, just words": "nothing here at all, just words",
	} {
		if got := Redact(in); got != want {
			t.Errorf("Redact(%q) = %q, want %q", in, got, want)
		}
	}
	clean := "nothing here at all, just words"
	if a := testing.AllocsPerRun(100, func() { Redact(clean) }); a != 0 {
		t.Fatalf("Redact of clean text allocates %v times", a)
	}
	if s := fmt.Sprint(Secret("sk-redact-test-0123456789")); s != "[redacted]" {
		t.Fatal(s)
	}
}
