package consensus

// Tenants' API keys in the ledger: added, named, and revoked for good.

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// KeyID is how a key is named where the key itself must not be: the
// first 12 hex digits of its SHA-256.
func KeyID(sha256Hex string) string { return sha256Hex[:min(12, len(sha256Hex))] }

// AddKey is the body of CmdAddKey.
type AddKey struct {
	Tenant    string `json:"tenant"`
	KeySHA256 string `json:"key_sha256"`
	// Create, when the tenant does not exist, creates it with this
	// residency and strict transit; without it an unknown tenant fails.
	Create *Tenant `json:"create,omitempty"`
}

// RevokeKey is the body of CmdRevokeKey: the keys named by their whole
// SHA-256 (a key the ledger never saw, listed only in a configuration
// file, is revoked too) or by a prefix of at least 8 hex digits of one of
// the tenant's keys, or all of the tenant's keys.
type RevokeKey struct {
	Tenant string   `json:"tenant"`
	Keys   []string `json:"keys,omitempty"`
	All    bool     `json:"all,omitempty"`
}

func validKeyHash(h string) bool { return len(h) == 64 && lowerHex(h) }

func lowerHex(s string) bool {
	for i := range len(s) {
		if c := s[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

func (l *Ledger) addKey(cmd Command) Result {
	var c AddKey
	if err := json.Unmarshal(cmd.Body, &c); err != nil || c.Tenant == "" || !validKeyHash(c.KeySHA256) {
		return fail(fmt.Errorf("%w: add_key needs a tenant and a key's SHA-256 in lower-case hex", ErrInvalid))
	}
	for name, t := range l.s.Tenants {
		if name != c.Tenant && slices.Contains(t.KeySHA256, c.KeySHA256) {
			return fail(fmt.Errorf("%w: key %s belongs to another tenant", ErrInvalid, KeyID(c.KeySHA256)))
		}
	}
	t := l.s.Tenants[c.Tenant]
	if t != nil && c.Create != nil && ((c.Create.Residency != "" && c.Create.Residency != t.Residency) || (c.Create.StrictTransit && !t.StrictTransit)) {
		return fail(fmt.Errorf("%w: tenant %s exists with residency %q and strict transit %v: a key added to it does not change them",
			ErrInvalid, c.Tenant, t.Residency, t.StrictTransit))
	}
	if t == nil {
		if c.Create == nil {
			return fail(fmt.Errorf("%w: %q", ErrNoTenant, c.Tenant))
		}
		t = &Tenant{Name: c.Tenant, Residency: c.Create.Residency, StrictTransit: c.Create.StrictTransit}
		l.s.Tenants[c.Tenant] = t
	}
	if slices.Contains(t.Revoked, c.KeySHA256) {
		return fail(fmt.Errorf("%w: key %s was revoked and cannot be added again", ErrInvalid, KeyID(c.KeySHA256)))
	}
	if !slices.Contains(t.KeySHA256, c.KeySHA256) {
		t.KeySHA256 = append(t.KeySHA256, c.KeySHA256)
	}
	return Result{}
}

func (l *Ledger) revokeKey(cmd Command) Result {
	var c RevokeKey
	if err := json.Unmarshal(cmd.Body, &c); err != nil || c.Tenant == "" || (len(c.Keys) == 0) == !c.All {
		return fail(fmt.Errorf("%w: revoke_key needs a tenant and either keys or all", ErrInvalid))
	}
	t := l.s.Tenants[c.Tenant]
	if t == nil {
		return fail(fmt.Errorf("%w: %q", ErrNoTenant, c.Tenant))
	}
	var hashes []string
	if c.All {
		hashes = slices.Clone(t.KeySHA256)
		t.FileKeysRevoked = true
	}
	for _, k := range c.Keys {
		if validKeyHash(k) {
			hashes = append(hashes, k)
			continue
		}
		if len(k) < 8 || len(k) > 64 || !lowerHex(k) {
			return fail(fmt.Errorf("%w: %q is neither a key's SHA-256 nor a prefix of at least 8 hex digits", ErrInvalid, k))
		}
		var match []string
		for _, h := range t.KeySHA256 {
			if strings.HasPrefix(h, k) {
				match = append(match, h)
			}
		}
		if len(match) != 1 {
			return fail(fmt.Errorf("%w: %q names %d of tenant %s's keys, not one", ErrInvalid, k, len(match), c.Tenant))
		}
		hashes = append(hashes, match[0])
	}
	for _, h := range hashes {
		t.KeySHA256 = slices.DeleteFunc(t.KeySHA256, func(x string) bool { return x == h })
		t.dropKey(h)
		if !slices.Contains(t.Revoked, h) {
			t.Revoked = append(t.Revoked, h)
		}
	}
	return Result{}
}
