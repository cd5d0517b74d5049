package route

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
)

// The redactor's log handler redacts its secrets wherever they are in
// a record: message, strings, errors, groups and With attributes.
func TestRedactHandler(t *testing.T) {
	const key = "sk-handler-test-0123456789"
	var buf bytes.Buffer
	log := slog.New(NewRedactor(key).Handler(slog.NewJSONHandler(&buf, nil))).With("with", "k="+key)
	log.Info("message "+key, "s", key, "err", fmt.Errorf("wrapped: %w", errors.New(key)),
		slog.Group("g", "inner", key), "list", []string{key}, "n", 3)
	log.Info("clean", "s", "nothing", "n", 4)
	out := buf.String()
	if strings.Contains(out, key) || strings.Count(out, "[redacted]") != 7 {
		t.Fatalf("%s", out)
	}
	if !strings.Contains(out, `"msg":"clean","with":"k=[redacted]","s":"nothing","n":4`) {
		t.Fatalf("a clean record changed: %s", out)
	}
}
