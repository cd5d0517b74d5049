package route

import (
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
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

// The process's secrets, for Redact. A node registers every credential
// it is configured with (provider keys, its admin token, the gossip key,
// a collector's headers) as it reads them, so that text quoting one — a
// provider echoing the key it was sent in an error body, an error
// wrapping a URL — prints [redacted] instead.
var secrets struct {
	mu  sync.Mutex
	set atomic.Pointer[secretSet]
}

type secretSet struct {
	list []string // longest first, so that a secret containing another is replaced whole
	r    *strings.Replacer
}

// minSecret is the shortest value Redact replaces: shorter ones would
// match ordinary text.
const minSecret = 8

// RegisterSecret makes Redact replace s from now on.
func RegisterSecret(s string) {
	if len(s) < minSecret {
		return
	}
	secrets.mu.Lock()
	defer secrets.mu.Unlock()
	var list []string
	if cur := secrets.set.Load(); cur != nil {
		if slices.Contains(cur.list, s) {
			return
		}
		list = slices.Clone(cur.list)
	}
	list = append(list, s)
	slices.SortFunc(list, func(a, b string) int { return len(b) - len(a) })
	pairs := make([]string, 0, 2*len(list))
	for _, v := range list {
		pairs = append(pairs, v, redacted)
	}
	secrets.set.Store(&secretSet{list: list, r: strings.NewReplacer(pairs...)})
}

// Redact returns s with every registered secret replaced by [redacted].
// It is the one redaction point: the node's log handler and every error
// message it answers or records pass through it. Text holding no secret
// is returned as it is, without allocating.
func Redact(s string) string {
	set := secrets.set.Load()
	if set == nil || len(s) < minSecret {
		return s
	}
	for _, v := range set.list {
		if strings.Contains(s, v) {
			return set.r.Replace(s)
		}
	}
	return s
}
