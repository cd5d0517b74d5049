package route

import (
	"log/slog"
	"slices"
	"strings"
)

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

// Redactor replaces a node's secrets in text with [redacted]. A node
// builds one from every credential it is configured with (provider keys,
// its admin token, the gossip key, a collector's headers) and passes its
// log handler, its error writer and its executor through it, so that
// text quoting one — a provider echoing the key it was sent in an error
// body, an error wrapping a URL — prints [redacted] instead. A Redactor
// does not change once built; the nil Redactor redacts nothing.
type Redactor struct {
	list []string // longest first, so that a secret containing another is replaced whole
	r    *strings.Replacer
}

// minSecret is the shortest value Redact replaces: shorter ones would
// match ordinary text.
const minSecret = 8

// NewRedactor returns a Redactor of secrets; values shorter than 8 bytes
// are left out, and so nil is returned when none is left.
func NewRedactor(secrets ...string) *Redactor {
	var list []string
	for _, s := range secrets {
		if len(s) >= minSecret && !slices.Contains(list, s) {
			list = append(list, s)
		}
	}
	if len(list) == 0 {
		return nil
	}
	slices.SortFunc(list, func(a, b string) int { return len(b) - len(a) })
	pairs := make([]string, 0, 2*len(list))
	for _, v := range list {
		pairs = append(pairs, v, redacted)
	}
	return &Redactor{list: list, r: strings.NewReplacer(pairs...)}
}

// Redact returns s with every secret replaced by [redacted]. Text holding
// no secret is returned as it is, without allocating.
func (r *Redactor) Redact(s string) string {
	if r == nil || len(s) < minSecret {
		return s
	}
	for _, v := range r.list {
		if strings.Contains(s, v) {
			return r.r.Replace(s)
		}
	}
	return s
}
