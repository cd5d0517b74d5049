package consensus

import (
	"fmt"
	"math"
	"time"
)

// Nanos is an amount of money in billionths of a US dollar. Budgets are
// kept in integers so that settling the same costs in any order gives the
// same total, exactly.
type Nanos int64

// NanosPerUSD is one dollar.
const NanosPerUSD = 1_000_000_000

// CeilNanos converts usd to Nanos rounding up: what a reservation, a true
// upper bound, must cover.
func CeilNanos(usd float64) Nanos {
	if usd <= 0 || math.IsNaN(usd) {
		return 0
	}
	return Nanos(math.Ceil(usd * NanosPerUSD))
}

// RoundNanos converts usd to the nearest Nanos: what a settled cost is.
func RoundNanos(usd float64) Nanos {
	if usd <= 0 || math.IsNaN(usd) {
		return 0
	}
	return Nanos(math.Round(usd * NanosPerUSD))
}

// USD returns n in dollars.
func (n Nanos) USD() float64 { return float64(n) / NanosPerUSD }

func (n Nanos) String() string { return fmt.Sprintf("$%.9f", n.USD()) }

// Budget periods.
const (
	PeriodDay   = "day"
	PeriodMonth = "month"
	PeriodTotal = "total"
)

// periodOf names the budget period containing t (UTC) and when it ends,
// in Unix nanoseconds: "2026-11-29" for a day, "2026-11" for a month,
// "total" (never ending) otherwise. Periods roll over on the leader's
// timestamps, so every replica agrees.
func periodOf(t int64, period string) (string, int64) {
	at := time.Unix(0, t).UTC()
	switch period {
	case PeriodDay:
		start := time.Date(at.Year(), at.Month(), at.Day(), 0, 0, 0, 0, time.UTC)
		return start.Format("2006-01-02"), start.AddDate(0, 0, 1).UnixNano()
	case PeriodMonth:
		start := time.Date(at.Year(), at.Month(), 1, 0, 0, 0, 0, time.UTC)
		return start.Format("2006-01"), start.AddDate(0, 1, 0).UnixNano()
	}
	return PeriodTotal, math.MaxInt64
}
