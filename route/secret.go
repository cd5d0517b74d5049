package route

import "log/slog"

// Secret is a credential: a provider key read from the environment. It
// never prints: fmt, %v, %#v, JSON and slog all render it as "[redacted]",
// so a logged config or an error wrapping one cannot leak it. Reveal returns
// the value for the one place that must send it.
type Secret string

const redacted = "[redacted]"

// Reveal returns the credential itself.
func (s Secret) Reveal() string { return string(s) }

func (s Secret) String() string               { return redacted }
func (s Secret) GoString() string             { return redacted }
func (s Secret) LogValue() slog.Value         { return slog.StringValue(redacted) }
func (s Secret) MarshalJSON() ([]byte, error) { return []byte(`"` + redacted + `"`), nil }
func (s Secret) MarshalText() ([]byte, error) { return []byte(redacted), nil }
