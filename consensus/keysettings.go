package consensus

// Keys as ledger objects: an API key's own name, model allow-list,
// mesh-wide limits and budget, and a tenant's mesh-wide limits. A key is
// named here by its SHA-256 (the key itself never reaches the ledger);
// requests carry its KeyID.

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// Commands of key settings and tenant limits.
const (
	// CmdSetKey changes an API key's settings (SetKey): a live change,
	// which a configuration file's seed no longer replaces.
	CmdSetKey = "set_key"
	// CmdSetTenantLimits changes a tenant's mesh-wide limits
	// (SetTenantLimits), live.
	CmdSetTenantLimits = "set_tenant_limits"
	// CmdSeedKeys is a configuration file's key settings and tenant
	// limits (SeedKeys), applied where no live change was made.
	CmdSeedKeys = "seed_keys"
)

// Limits are mesh-wide requests and tokens a minute; 0 is no limit.
type Limits struct {
	RPM int64 `json:"rpm,omitempty"`
	TPM int64 `json:"tpm,omitempty"`
}

// none reports whether l limits nothing.
func (l *Limits) none() bool { return l == nil || (l.RPM == 0 && l.TPM == 0) }

// KeySettings are one API key's own settings. A key without settings
// may use every model its tenant may, within its tenant's limits and
// budget only.
type KeySettings struct {
	KeySHA256 string `json:"key_sha256"`
	// Name is unique among the tenant's keys; what operators, metrics
	// and refusals call the key.
	Name string `json:"name,omitempty"`
	// Models are the models (or groups) the key may ask for, as the
	// client names them; empty: every model.
	Models []string `json:"models,omitempty"`
	Limits *Limits  `json:"limits,omitempty"`
	Budget *Budget  `json:"budget,omitempty"`
	// Live means an operator set them (CmdSetKey): a file's seed no
	// longer replaces them.
	Live bool `json:"live,omitempty"`
}

// ID is the key's id, KeyID of its SHA-256.
func (k *KeySettings) ID() string { return KeyID(k.KeySHA256) }

// Allows reports whether the key may ask for model.
func (k *KeySettings) Allows(model string) bool {
	return k == nil || len(k.Models) == 0 || slices.Contains(k.Models, model)
}

func (k KeySettings) clone() KeySettings {
	k.Models = slices.Clone(k.Models)
	if k.Limits != nil {
		l := *k.Limits
		k.Limits = &l
	}
	if k.Budget != nil {
		b := *k.Budget
		k.Budget = &b
	}
	return k
}

// Key returns the settings of the tenant's key sha256Hex, or nil.
func (t *Tenant) Key(sha256Hex string) *KeySettings {
	for i := range t.Keys {
		if t.Keys[i].KeySHA256 == sha256Hex {
			return &t.Keys[i]
		}
	}
	return nil
}

// KeyByID returns the settings of the tenant's key whose KeyID is id, or
// nil.
func (t *Tenant) KeyByID(id string) *KeySettings {
	for i := range t.Keys {
		if t.Keys[i].ID() == id {
			return &t.Keys[i]
		}
	}
	return nil
}

// KeyAccount names the budget account of a tenant's key (of id KeyID):
// its books and escrow are kept as a tenant's are, under this name. A
// tenant's name holds no '/', so it never names a tenant.
func KeyAccount(tenant, id string) string { return tenant + "/" + id }

// DescribeAccount names an account in a message: "tenant acme", or
// "key 0123456789ab of tenant acme".
func DescribeAccount(account string) string {
	if tenant, key := SplitAccount(account); key != "" {
		return "key " + key + " of tenant " + tenant
	}
	return "tenant " + account
}

// SplitAccount returns the tenant and, for a key's account, the key's id.
func SplitAccount(account string) (tenant, key string) {
	tenant, key, _ = strings.Cut(account, "/")
	return tenant, key
}

// Rate subjects: a key's and a tenant's mesh-wide limits are divided
// among the nodes as a provider's are, under these names (which no
// provider's name can be).

// KeyRate names the rate capacity of a tenant's key (of id KeyID).
func KeyRate(tenant, id string) string { return "key:" + tenant + "/" + id }

// TenantRate names the rate capacity of a tenant.
func TenantRate(tenant string) string { return "tenant:" + tenant }

// capacity is the mesh-wide rate capacity named name: a provider's, a
// key's (KeyRate) or a tenant's (TenantRate); nil when it has none.
func (l *Ledger) capacity(name string) *RateCapacity {
	var lim *Limits
	switch {
	case strings.HasPrefix(name, "tenant:"):
		if t := l.s.Tenants[strings.TrimPrefix(name, "tenant:")]; t != nil {
			lim = t.Limits
		}
	case strings.HasPrefix(name, "key:"):
		tenant, id := SplitAccount(strings.TrimPrefix(name, "key:"))
		if t := l.s.Tenants[tenant]; t != nil {
			if k := t.KeyByID(id); k != nil {
				lim = k.Limits
			}
		}
	default:
		return l.s.Rates[name]
	}
	if lim.none() {
		return nil
	}
	return &RateCapacity{Provider: name, RPM: lim.RPM, TPM: lim.TPM}
}

// budgetOf returns the budget of an account: a tenant's, or a key's
// (KeyAccount); nil when it has none.
func (l *Ledger) budgetOf(account string) *Budget {
	tenant, key := SplitAccount(account)
	t := l.s.Tenants[tenant]
	switch {
	case t == nil:
		return nil
	case key == "":
		return t.Budget
	}
	if k := t.KeyByID(key); k != nil {
		return k.Budget
	}
	return nil
}

// SetKey is the body of CmdSetKey: what is given changes, the rest
// stays.
type SetKey struct {
	Tenant string `json:"tenant"`
	// Key names the key: its whole SHA-256, its name, or a prefix of at
	// least 8 hex digits of one of the tenant's keys (its id).
	Key string `json:"key"`
	// Name renames the key; "" takes its name away.
	Name *string `json:"name,omitempty"`
	// Models replaces the allow-list; empty lets the key use every model.
	Models *[]string `json:"models,omitempty"`
	// RPM and TPM set each limit; 0 removes it.
	RPM *int64 `json:"rpm,omitempty"`
	TPM *int64 `json:"tpm,omitempty"`
	// Budget sets the key's budget; ClearBudget removes it.
	Budget      *Budget `json:"budget,omitempty"`
	ClearBudget bool    `json:"clear_budget,omitempty"`
}

// SetTenantLimits is the body of CmdSetTenantLimits: each limit given
// is set, 0 removing it.
type SetTenantLimits struct {
	Tenant string `json:"tenant"`
	RPM    *int64 `json:"rpm,omitempty"`
	TPM    *int64 `json:"tpm,omitempty"`
}

// SeedKeys is the body of CmdSeedKeys: a configuration file's settings
// of a tenant's keys and its limits. They replace what the ledger holds
// where no operator changed it live: settings of keys the file no longer
// lists go, unless set live.
type SeedKeys struct {
	Tenant string        `json:"tenant"`
	Limits *Limits       `json:"limits,omitempty"`
	Keys   []KeySettings `json:"keys,omitempty"`
}

// Bounds on what a key's settings may hold.
const (
	maxKeyName    = 64
	maxModels     = 256
	maxModelName  = 256
	maxLimitValue = int64(1e15)
)

func checkLimit(what string, v int64) error {
	if v < 0 || v > maxLimitValue {
		return fmt.Errorf("%w: %s %d must be between 0 and %d", ErrInvalid, what, v, maxLimitValue)
	}
	return nil
}

// check reports what is wrong with k, if anything.
func (k *KeySettings) check() error {
	switch {
	case !validKeyHash(k.KeySHA256):
		return fmt.Errorf("%w: a key's settings need its SHA-256 in lower-case hex", ErrInvalid)
	case len(k.Name) > maxKeyName || strings.ContainsAny(k.Name, "/ \t\n"):
		return fmt.Errorf("%w: key name %q", ErrInvalid, k.Name)
	case len(k.Models) > maxModels:
		return fmt.Errorf("%w: %d models; at most %d", ErrInvalid, len(k.Models), maxModels)
	case k.Budget != nil && (!validPeriod(k.Budget.Period) || k.Budget.Limit < 0):
		return fmt.Errorf("%w: budget", ErrInvalid)
	}
	for _, m := range k.Models {
		if m == "" || len(m) > maxModelName {
			return fmt.Errorf("%w: model name %q", ErrInvalid, m)
		}
	}
	if k.Limits != nil {
		if err := checkLimit("rpm", k.Limits.RPM); err != nil {
			return err
		}
		return checkLimit("tpm", k.Limits.TPM)
	}
	return nil
}

// owner returns the tenant other than tenant that holds key h, if any.
func (l *Ledger) owner(h, tenant string) string {
	for _, name := range sortedKeys(l.s.Tenants) {
		if t := l.s.Tenants[name]; name != tenant && (slices.Contains(t.KeySHA256, h) || t.Key(h) != nil) {
			return name
		}
	}
	return ""
}

// resolveKey finds the key of t that ref names (see SetKey.Key).
func (l *Ledger) resolveKey(t *Tenant, ref string) (string, error) {
	if validKeyHash(ref) {
		if o := l.owner(ref, t.Name); o != "" {
			return "", fmt.Errorf("%w: key %s belongs to another tenant", ErrInvalid, KeyID(ref))
		}
		return ref, nil
	}
	var match []string
	add := func(h string) {
		if !slices.Contains(match, h) {
			match = append(match, h)
		}
	}
	for _, k := range t.Keys {
		if ref != "" && k.Name == ref {
			add(k.KeySHA256)
		}
	}
	if len(match) == 0 && len(ref) >= 8 && len(ref) < 64 && lowerHex(ref) {
		for _, h := range t.KeySHA256 {
			if strings.HasPrefix(h, ref) {
				add(h)
			}
		}
		for _, k := range t.Keys {
			if strings.HasPrefix(k.KeySHA256, ref) {
				add(k.KeySHA256)
			}
		}
	}
	if len(match) != 1 {
		return "", fmt.Errorf("%w: %q names %d of tenant %s's keys, not one (name a key by its name, its id or its whole SHA-256)",
			ErrInvalid, ref, len(match), t.Name)
	}
	return match[0], nil
}

func (l *Ledger) setKey(cmd Command) Result {
	var c SetKey
	if err := json.Unmarshal(cmd.Body, &c); err != nil || c.Tenant == "" || c.Key == "" {
		return fail(fmt.Errorf("%w: set_key needs a tenant and a key", ErrInvalid))
	}
	t := l.s.Tenants[c.Tenant]
	if t == nil {
		return fail(fmt.Errorf("%w: %q", ErrNoTenant, c.Tenant))
	}
	h, err := l.resolveKey(t, c.Key)
	if err != nil {
		return fail(err)
	}
	if slices.Contains(t.Revoked, h) {
		return fail(fmt.Errorf("%w: key %s was revoked", ErrInvalid, KeyID(h)))
	}
	k := KeySettings{KeySHA256: h}
	if old := t.Key(h); old != nil {
		k = old.clone()
	}
	k.Live = true
	if c.Name != nil {
		k.Name = *c.Name
	}
	if c.Models != nil {
		k.Models = slices.Clone(*c.Models)
	}
	if c.RPM != nil || c.TPM != nil {
		lim := Limits{}
		if k.Limits != nil {
			lim = *k.Limits
		}
		if c.RPM != nil {
			lim.RPM = *c.RPM
		}
		if c.TPM != nil {
			lim.TPM = *c.TPM
		}
		k.Limits = &lim
		if lim.none() {
			k.Limits = nil
		}
	}
	if c.Budget != nil {
		k.Budget = c.Budget
	}
	if c.ClearBudget {
		k.Budget = nil
	}
	if err := k.check(); err != nil {
		return fail(err)
	}
	if err := t.putKey(k); err != nil {
		return fail(err)
	}
	l.updateLimits(KeyAccount(t.Name, k.ID()), cmd.Time)
	return Result{}
}

// putKey replaces (or adds) the settings of k's key, keeping t.Keys
// sorted by hash and names unique.
func (t *Tenant) putKey(k KeySettings) error {
	for _, o := range t.Keys {
		if k.Name != "" && o.Name == k.Name && o.KeySHA256 != k.KeySHA256 {
			return fmt.Errorf("%w: tenant %s has another key named %q", ErrInvalid, t.Name, k.Name)
		}
	}
	i, found := slices.BinarySearchFunc(t.Keys, k.KeySHA256, func(a KeySettings, h string) int { return strings.Compare(a.KeySHA256, h) })
	if found {
		t.Keys[i] = k
	} else {
		t.Keys = slices.Insert(t.Keys, i, k)
	}
	return nil
}

func (l *Ledger) setTenantLimits(cmd Command) Result {
	var c SetTenantLimits
	if err := json.Unmarshal(cmd.Body, &c); err != nil || c.Tenant == "" {
		return fail(fmt.Errorf("%w: set_tenant_limits needs a tenant", ErrInvalid))
	}
	t := l.s.Tenants[c.Tenant]
	if t == nil {
		return fail(fmt.Errorf("%w: %q", ErrNoTenant, c.Tenant))
	}
	lim := Limits{}
	if t.Limits != nil {
		lim = *t.Limits
	}
	if c.RPM != nil {
		lim.RPM = *c.RPM
	}
	if c.TPM != nil {
		lim.TPM = *c.TPM
	}
	if err := checkLimit("rpm", lim.RPM); err != nil {
		return fail(err)
	}
	if err := checkLimit("tpm", lim.TPM); err != nil {
		return fail(err)
	}
	t.Limits, t.LimitsLive = &lim, true
	if lim.none() {
		t.Limits = nil
	}
	return Result{}
}

func (l *Ledger) seedKeys(cmd Command) Result {
	var c SeedKeys
	if err := json.Unmarshal(cmd.Body, &c); err != nil || c.Tenant == "" {
		return fail(fmt.Errorf("%w: seed_keys needs a tenant", ErrInvalid))
	}
	t := l.s.Tenants[c.Tenant]
	if t == nil {
		return fail(fmt.Errorf("%w: %q", ErrNoTenant, c.Tenant))
	}
	// The file's settings replace the file's settings: those set live
	// stay, and so do their names.
	kept := slices.DeleteFunc(slices.Clone(t.Keys), func(k KeySettings) bool { return !k.Live })
	next := &Tenant{Name: t.Name, Keys: kept}
	for _, k := range c.Keys {
		k = k.clone()
		k.Live = false
		if err := k.check(); err != nil {
			return fail(err)
		}
		if next.Key(k.KeySHA256) != nil || slices.Contains(t.Revoked, k.KeySHA256) || l.owner(k.KeySHA256, t.Name) != "" {
			continue // set live, revoked, or another tenant's
		}
		if err := next.putKey(k); err != nil {
			return fail(err)
		}
	}
	if c.Limits != nil {
		if err := checkLimit("rpm", c.Limits.RPM); err != nil {
			return fail(err)
		}
		if err := checkLimit("tpm", c.Limits.TPM); err != nil {
			return fail(err)
		}
	}
	if !t.LimitsLive {
		t.Limits = nil
		if !c.Limits.none() {
			lim := *c.Limits
			t.Limits = &lim
		}
	}
	t.Keys = next.Keys
	for _, k := range t.Keys {
		l.updateLimits(KeyAccount(t.Name, k.ID()), cmd.Time)
	}
	return Result{}
}

// dropKey forgets the settings of a revoked key.
func (t *Tenant) dropKey(h string) {
	t.Keys = slices.DeleteFunc(t.Keys, func(k KeySettings) bool { return k.KeySHA256 == h })
}

// replacing makes t, a tenant a command puts, the replacement of old
// (nil when there was none): a revocation outlives any replacement, and
// so do old's keys' settings and limits unless t gives some. Revoked keys
// are dropped, and what t gives of settings checked.
func (t *Tenant) replacing(old *Tenant) error {
	if old != nil {
		for _, h := range old.Revoked {
			if !slices.Contains(t.Revoked, h) {
				t.Revoked = append(t.Revoked, h)
			}
		}
		if t.Keys == nil {
			t.Keys = old.Keys
		}
		if t.Limits == nil && !t.LimitsLive {
			t.Limits, t.LimitsLive = old.Limits, old.LimitsLive
		}
	}
	t.KeySHA256 = slices.DeleteFunc(t.KeySHA256, func(h string) bool { return slices.Contains(t.Revoked, h) })
	t.Keys = slices.DeleteFunc(t.Keys, func(k KeySettings) bool { return slices.Contains(t.Revoked, k.KeySHA256) })
	return t.checkSettings()
}

// applyKeySettings applies a command of keys' settings or tenants'
// limits.
func (l *Ledger) applyKeySettings(cmd Command) Result {
	switch cmd.Type {
	case CmdSetKey:
		return l.setKey(cmd)
	case CmdSetTenantLimits:
		return l.setTenantLimits(cmd)
	}
	return l.seedKeys(cmd)
}

// checkSettings reports what is wrong with a tenant's key settings and
// limits as a command gives them.
func (t *Tenant) checkSettings() error {
	if t.Limits != nil {
		if err := checkLimit("rpm", t.Limits.RPM); err != nil {
			return err
		}
		if err := checkLimit("tpm", t.Limits.TPM); err != nil {
			return err
		}
	}
	keys := t.Keys
	t.Keys = nil
	for _, k := range keys {
		if err := k.check(); err != nil {
			return err
		}
		if err := t.putKey(k.clone()); err != nil {
			return err
		}
	}
	return nil
}

// cloneSettings makes t's key settings and limits its own copies.
func (t *Tenant) cloneSettings() {
	if t.Limits != nil {
		l := *t.Limits
		t.Limits = &l
	}
	if t.Keys != nil {
		keys := make([]KeySettings, len(t.Keys))
		for i, k := range t.Keys {
			keys[i] = k.clone()
		}
		t.Keys = keys
	}
}
