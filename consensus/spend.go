package consensus

// Spend attribution: every settled cost, by tenant and by each of its
// key, tag set, model and provider, in hourly and daily buckets. Nodes
// tally their charges (SpendTally) and report them with their periodic
// sync (SyncCmd.Spend), numbered so that a report applied twice counts
// once; the ledger files each report in the buckets of the time it
// applies it (the leader's clock), so that no node's clock matters.
//
// What is kept is bounded: buckets for SpendHours hours and SpendDays
// days; per tenant and dimension SpendCap distinct values, the rest
// under SpendOther. Each dimension's cells add up to the tenant's total
// in every bucket, whatever was folded.

import (
	"cmp"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Spend dimensions: what a report row, and a query, attributes spend by.
const (
	DimTenant   = "tenant" // a row of the tenant's total
	DimKey      = "key"    // the API key's id (KeyID)
	DimTag      = "tag"    // the request's tag set, sorted and comma-joined
	DimModel    = "model"
	DimProvider = "provider"
)

var spendDims = []string{DimKey, DimTag, DimModel, DimProvider}

// Values that stand for something other than a name.
const (
	SpendOther    = "(other)"    // beyond SpendCap distinct values
	SpendUntagged = "(untagged)" // a request without tags
	SpendUnknown  = "(unknown)"  // no key id (an older node's forward)
)

// Bounds of what the ledger keeps of spend.
const (
	// SpendCap bounds the distinct values of one dimension a tenant's
	// spend is kept under; a value not charged for SpendDays days frees
	// its place.
	SpendCap = 64
	// SpendHours and SpendDays are how long hourly and daily buckets are
	// kept: two days by the hour, two months by the day.
	SpendHours = 48
	SpendDays  = 62
	// maxSpendValue bounds a value's length: a longer one is SpendOther.
	maxSpendValue = 600
)

const (
	hourNs = int64(time.Hour)
	dayNs  = 24 * hourNs
)

// SpendAmount is money and the answers that cost it.
type SpendAmount struct {
	Nanos    Nanos `json:"n"`
	Requests int64 `json:"r"`
}

func (a *SpendAmount) add(b SpendAmount) {
	a.Nanos += b.Nanos
	a.Requests += b.Requests
}

// SpendReport is what a node charged between two of its syncs. Seq
// numbers its reports within its boot: the ledger applies a report only
// if its Seq is above the last it applied of the node, so one sent again
// (its sync's answer was lost) counts once.
type SpendReport struct {
	Seq  uint64     `json:"seq"`
	Rows []SpendRow `json:"rows"`
}

// SpendRow is one tenant's spend under one value of one dimension
// (Dim DimTenant: its total, Value ""). A report holds, for each tenant,
// its total row and rows of every dimension that add up to it.
type SpendRow struct {
	Tenant string `json:"t"`
	Dim    string `json:"d"`
	Value  string `json:"v,omitempty"`
	SpendAmount
}

// spendBook is one tenant's attributed spend.
type spendBook struct {
	Hours []*spendBucket `json:"hours,omitempty"` // oldest first
	Days  []*spendBucket `json:"days,omitempty"`
	// Seen holds, by dimension, the values spend is kept under and when
	// each was last charged: their number is capped at SpendCap.
	Seen map[string]map[string]int64 `json:"seen,omitempty"`
}

// spendBucket is one hour's or day's spend of a tenant: its total, and
// by "dimension=value".
type spendBucket struct {
	Start int64                  `json:"start"` // Unix ns
	Total SpendAmount            `json:"total"`
	Cells map[string]SpendAmount `json:"cells,omitempty"`
}

// attribute files a node's report rows in the buckets of now.
func (l *Ledger) attribute(rows []SpendRow, now int64) {
	if l.s.Spend == nil {
		l.s.Spend = map[string]*spendBook{}
	}
	if now-now%hourNs > l.s.SpendPruned {
		l.pruneSpend(now)
	}
	for _, r := range rows {
		if r.Tenant == "" || r.Nanos < 0 || r.Requests < 0 || (r.Dim != DimTenant && !slices.Contains(spendDims, r.Dim)) {
			continue // a newer node's dimension, or nonsense
		}
		b := l.s.Spend[r.Tenant]
		if b == nil {
			b = &spendBook{Seen: map[string]map[string]int64{}}
			l.s.Spend[r.Tenant] = b
		}
		hour, day := b.bucket(&b.Hours, now-now%hourNs), b.bucket(&b.Days, now-now%dayNs)
		if r.Dim == DimTenant {
			hour.Total.add(r.SpendAmount)
			day.Total.add(r.SpendAmount)
			continue
		}
		cell := r.Dim + "=" + b.admit(r.Dim, r.Value, now)
		for _, bk := range []*spendBucket{hour, day} {
			if bk.Cells == nil {
				bk.Cells = map[string]SpendAmount{}
			}
			a := bk.Cells[cell]
			a.add(r.SpendAmount)
			bk.Cells[cell] = a
		}
	}
}

// bucket returns the bucket of *list that starts at start, appending it
// if it is new (reports are filed at the ledger's time, which never runs
// backwards: a bucket is only ever the last or a new one).
func (b *spendBook) bucket(list *[]*spendBucket, start int64) *spendBucket {
	if n := len(*list); n > 0 && (*list)[n-1].Start >= start {
		return (*list)[n-1]
	}
	bk := &spendBucket{Start: start}
	*list = append(*list, bk)
	return bk
}

// admit returns the value spend of dim is kept under: value itself
// while the tenant has fewer than SpendCap of dim, else SpendOther.
func (b *spendBook) admit(dim, value string, now int64) string {
	switch {
	case value == "" && dim == DimTag:
		return SpendUntagged
	case value == "" && dim == DimKey:
		return SpendUnknown
	case value == SpendOther || value == "":
		return SpendOther
	case len(value) > maxSpendValue:
		return SpendOther
	}
	seen := b.Seen[dim]
	if seen == nil {
		seen = map[string]int64{}
		b.Seen[dim] = seen
	}
	if _, ok := seen[value]; !ok && len(seen) >= SpendCap {
		return SpendOther
	}
	seen[value] = now
	return value
}

// pruneSpend drops buckets older than their horizon, values not charged
// for SpendDays, and tenants left with nothing.
func (l *Ledger) pruneSpend(now int64) {
	l.s.SpendPruned = now - now%hourNs
	hourFrom := now - now%hourNs - (SpendHours-1)*hourNs
	dayFrom := now - now%dayNs - (SpendDays-1)*dayNs
	for tenant, b := range l.s.Spend { // the same tenants go, in any order
		b.Hours = dropBefore(b.Hours, hourFrom)
		b.Days = dropBefore(b.Days, dayFrom)
		for _, seen := range b.Seen {
			for v, at := range seen {
				if at < dayFrom {
					delete(seen, v)
				}
			}
		}
		if len(b.Days) == 0 {
			delete(l.s.Spend, tenant)
		}
	}
}

func dropBefore(list []*spendBucket, from int64) []*spendBucket {
	i := 0
	for i < len(list) && list[i].Start < from {
		i++
	}
	return list[i:]
}

// SpendQuery asks for spend by one dimension since a time.
type SpendQuery struct {
	By     string // DimTenant, DimKey, DimTag, DimModel or DimProvider
	Since  int64  // Unix ns: from the bucket that contains it on
	Tenant string // one tenant's; "" for every tenant
}

// Encode is the query as the ledger's "spend" view takes it.
func (q SpendQuery) Encode() string {
	v := url.Values{"by": {q.By}, "since": {strconv.FormatInt(q.Since, 10)}}
	if q.Tenant != "" {
		v.Set("tenant", q.Tenant)
	}
	return "spend?" + v.Encode()
}

// ParseSpendQuery reads a query Encode wrote.
func ParseSpendQuery(s string) (SpendQuery, error) {
	v, err := url.ParseQuery(s)
	if err != nil {
		return SpendQuery{}, fmt.Errorf("%w: spend query: %v", ErrInvalid, err)
	}
	q := SpendQuery{By: v.Get("by"), Tenant: v.Get("tenant")}
	if q.Since, err = strconv.ParseInt(v.Get("since"), 10, 64); err != nil {
		return SpendQuery{}, fmt.Errorf("%w: spend query: since %q", ErrInvalid, v.Get("since"))
	}
	if q.By != DimTenant && !slices.Contains(spendDims, q.By) {
		return SpendQuery{}, fmt.Errorf("%w: spend by %q: tenant, key, tag, model or provider", ErrInvalid, q.By)
	}
	return q, nil
}

// SpendView answers a SpendQuery: rows (a tenant and a name under the
// dimension asked for) with what they spent over the buckets from From
// on, most first, and each bucket's spend by the same rows, for charts.
type SpendView struct {
	By   string `json:"by"`
	Step string `json:"step"` // hour or day: the buckets'
	// From is the start of the first bucket counted, Until the ledger's
	// time when it answered (Unix ns).
	From    int64            `json:"from"`
	Until   int64            `json:"until"`
	Total   SpendAmount      `json:"total"`
	Rows    []SpendViewRow   `json:"rows"`
	Buckets []SpendViewPoint `json:"buckets"`
}

// SpendViewRow is one row of a SpendView: Name is the value of the
// dimension asked for (the tenant's name when by tenant).
type SpendViewRow struct {
	Tenant string `json:"tenant"`
	Name   string `json:"name"`
	SpendAmount
}

// SpendViewPoint is one bucket: its total, and Rows[i] what row i spent
// in it.
type SpendViewPoint struct {
	Start int64       `json:"start"`
	Total SpendAmount `json:"total"`
	Rows  []Nanos     `json:"rows"`
}

// Spend answers q: by the hour when it reaches back no further than the
// hourly buckets are kept, else by the day.
func (l *Ledger) Spend(q SpendQuery) SpendView {
	now := l.s.Time
	v := SpendView{By: q.By, Step: "hour", Until: now, Rows: []SpendViewRow{}, Buckets: []SpendViewPoint{}}
	step := hourNs
	v.From = max(q.Since-q.Since%hourNs, now-now%hourNs-(SpendHours-1)*hourNs)
	if q.Since < v.From {
		v.Step, step = "day", dayNs
		v.From = max(q.Since-q.Since%dayNs, now-now%dayNs-(SpendDays-1)*dayNs)
	}
	type rowKey struct{ tenant, name string }
	index := map[rowKey]int{}
	starts := map[int64]int{}
	var cells []struct {
		bucket, row int
		n           Nanos
	}
	for _, tenant := range sortedKeys(l.s.Spend) {
		if q.Tenant != "" && tenant != q.Tenant {
			continue
		}
		b := l.s.Spend[tenant]
		list := b.Hours
		if step == dayNs {
			list = b.Days
		}
		for _, bk := range list {
			if bk.Start < v.From {
				continue
			}
			bi, ok := starts[bk.Start]
			if !ok {
				bi = len(v.Buckets)
				starts[bk.Start] = bi
				v.Buckets = append(v.Buckets, SpendViewPoint{Start: bk.Start})
			}
			v.Buckets[bi].Total.add(bk.Total)
			v.Total.add(bk.Total)
			for name, a := range bucketRows(bk, tenant, q.By) {
				k := rowKey{tenant, name}
				ri, ok := index[k]
				if !ok {
					ri = len(v.Rows)
					index[k] = ri
					v.Rows = append(v.Rows, SpendViewRow{Tenant: tenant, Name: name})
				}
				v.Rows[ri].add(a)
				cells = append(cells, struct {
					bucket, row int
					n           Nanos
				}{bi, ri, a.Nanos})
			}
		}
	}
	// Rows most first (then by tenant and name), buckets oldest first;
	// each bucket's cells follow the rows' order.
	order := make([]int, len(v.Rows))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int {
		ra, rb := v.Rows[a], v.Rows[b]
		return cmp.Or(cmp.Compare(rb.Nanos, ra.Nanos), strings.Compare(ra.Tenant, rb.Tenant), strings.Compare(ra.Name, rb.Name))
	})
	rank := make([]int, len(order))
	rows := make([]SpendViewRow, len(order))
	for to, from := range order {
		rank[from], rows[to] = to, v.Rows[from]
	}
	v.Rows = rows
	for i := range v.Buckets {
		v.Buckets[i].Rows = make([]Nanos, len(rows))
	}
	for _, c := range cells {
		v.Buckets[c.bucket].Rows[rank[c.row]] += c.n
	}
	slices.SortFunc(v.Buckets, func(a, b SpendViewPoint) int { return cmp.Compare(a.Start, b.Start) })
	return v
}

// bucketRows is what a bucket holds by dimension by: its cells of that
// dimension, by value (the tenant's total, by tenant).
func bucketRows(bk *spendBucket, tenant, by string) map[string]SpendAmount {
	if by == DimTenant {
		return map[string]SpendAmount{tenant: bk.Total}
	}
	out := map[string]SpendAmount{}
	prefix := by + "="
	for cell, a := range bk.Cells {
		if name, ok := strings.CutPrefix(cell, prefix); ok {
			out[name] = a
		}
	}
	return out
}
