package consensus

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"testing"
)

func keyHash(k string) string {
	s := sha256.Sum256([]byte(k))
	return hex.EncodeToString(s[:])
}

// Keys are added, creating the tenant when asked; revoked by hash, by
// an unambiguous id or all at once; and a revoked key never comes back,
// not even when the tenant is replaced.
func TestKeyLifecycle(t *testing.T) {
	l := NewLedger()
	a, b, c := keyHash("sk-a"), keyHash("sk-b"), keyHash("sk-c")
	apply := func(id, typ string, body any) string {
		t.Helper()
		r := l.Apply(cmd(t, id, typ, t0, body))
		if err := l.Check(); err != nil {
			t.Fatal(err)
		}
		return r.Err
	}
	if e := apply("1", CmdAddKey, AddKey{Tenant: "acme", KeySHA256: a}); !strings.Contains(e, ErrNoTenant.Error()) {
		t.Fatalf("an unknown tenant without create: %q", e)
	}
	if e := apply("2", CmdAddKey, AddKey{Tenant: "acme", KeySHA256: a, Create: &Tenant{Residency: "eu"}}); e != "" {
		t.Fatal(e)
	}
	if e := apply("3", CmdAddKey, AddKey{Tenant: "acme", KeySHA256: b}); e != "" {
		t.Fatal(e)
	}
	if e := apply("4", CmdAddKey, AddKey{Tenant: "globex", KeySHA256: b, Create: &Tenant{}}); !strings.Contains(e, "belongs to another tenant") {
		t.Fatalf("one key, two tenants: %q", e)
	}
	for _, bad := range []string{"", strings.ToUpper(a), a[:63], "sk-a"} {
		if e := apply("5/"+bad, CmdAddKey, AddKey{Tenant: "acme", KeySHA256: bad}); !strings.Contains(e, ErrInvalid.Error()) {
			t.Fatalf("hash %q: %q", bad, e)
		}
	}
	if tn, _ := l.Tenant("acme"); tn.Residency != "eu" || !slices.Equal(tn.KeySHA256, []string{a, b}) {
		t.Fatalf("tenant %+v", tn)
	}
	// By id (a prefix), and a hash the ledger never saw (a file's key).
	if e := apply("6", CmdRevokeKey, RevokeKey{Tenant: "acme", Keys: []string{KeyID(a), c}}); e != "" {
		t.Fatal(e)
	}
	if tn, _ := l.Tenant("acme"); !slices.Equal(tn.KeySHA256, []string{b}) || !slices.Equal(tn.Revoked, []string{a, c}) {
		t.Fatalf("after revoking: %+v", tn)
	}
	if e := apply("7", CmdAddKey, AddKey{Tenant: "acme", KeySHA256: a}); !strings.Contains(e, "was revoked") {
		t.Fatalf("a revoked key came back: %q", e)
	}
	for i, bad := range []RevokeKey{{Tenant: "acme"}, {Tenant: "acme", Keys: []string{"abc"}}, {Tenant: "acme", Keys: []string{"00000000"}}, {Tenant: "nope", All: true}} {
		if e := apply(fmt.Sprint("8/", i), CmdRevokeKey, bad); e == "" {
			t.Fatalf("%+v was applied", bad)
		}
	}
	// Replacing the tenant keeps its revocations.
	if e := apply("9", CmdPutTenant, Tenant{Name: "acme", KeySHA256: []string{a, b}}); e != "" {
		t.Fatal(e)
	}
	if tn, _ := l.Tenant("acme"); !slices.Equal(tn.KeySHA256, []string{b}) || !slices.Equal(tn.Revoked, []string{a, c}) {
		t.Fatalf("after a replace: %+v", tn)
	}
	if e := apply("10", CmdRevokeKey, RevokeKey{Tenant: "acme", All: true}); e != "" {
		t.Fatal(e)
	}
	if tn, _ := l.Tenant("acme"); len(tn.KeySHA256) != 0 || len(tn.Revoked) != 3 || !tn.FileKeysRevoked {
		t.Fatalf("after revoking all (the files' keys too): %+v", tn)
	}
	// Adding a key never changes where a tenant's data may go.
	if e := apply("11", CmdAddKey, AddKey{Tenant: "acme", KeySHA256: keyHash("sk-d"), Create: &Tenant{Residency: "us"}}); !strings.Contains(e, "exists with residency") {
		t.Fatalf("add with another residency: %q", e)
	}
	if e := apply("12", CmdAddKey, AddKey{Tenant: "acme", KeySHA256: keyHash("sk-d"), Create: &Tenant{}}); e != "" {
		t.Fatal(e)
	}
}
