package des

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
)

// Table prints the policies side by side, for people.
func Table(w io.Writer, s *Scenario, rs []Result) {
	fmt.Fprintf(w, "%s: %s of virtual time, %d regions, %d providers, seed %d\n\n", s.Name, s.Duration, len(s.Regions), len(s.Providers), s.Seed)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	engines := slices.ContainsFunc(s.Providers, func(p ProviderSpec) bool { return p.Engine != nil })
	header := "policy\trequests\tok\tfailed\t402\t503 escrow\t429 upstream\tfailovers\tcost\tsaved vs RR\tp50\tp99\tTTFT p50\tTTFT p99\taffinity\t"
	if engines {
		header += "prefix hits\t"
	}
	fmt.Fprintln(tw, header+"residency violations\toverspend\t")
	for _, r := range rs {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t$%.4f\t%.1f%%\t%.0fms\t%.0fms\t%.0fms\t%.0fms\t%.1f%%\t",
			r.Policy, r.Requests, r.OK, r.Failed, r.BudgetRefused, r.EscrowWait, r.Upstream429, r.Failovers, r.CostUSD, 100*r.SavedVsRR,
			r.LatencyP50, r.LatencyP99, r.TTFTP50, r.TTFTP99, 100*r.AffinityHitRate)
		if engines {
			fmt.Fprintf(tw, "%.1f%%\t", 100*r.PrefixHitRate)
		}
		fmt.Fprintf(tw, "%d\t$%.6f\t\n", r.ResidencyViolations, r.OverspendUSD)
	}
	tw.Flush()
	phaseTable(w, rs)
}

// phaseTable prints, for a workload in phases, who served each phase's
// requests under each policy.
func phaseTable(w io.Writer, rs []Result) {
	if len(rs) == 0 || len(rs[0].Phases) == 0 {
		return
	}
	fmt.Fprintln(w, "\nserved by, phase by phase:")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, r := range rs {
		fmt.Fprintf(tw, "%s\t", r.Policy)
		for i, p := range r.Phases {
			names := make([]string, 0, len(p.ServedBy))
			for name := range p.ServedBy {
				names = append(names, name)
			}
			slices.Sort(names)
			var parts []string
			for _, name := range names {
				parts = append(parts, fmt.Sprintf("%s %d", name, p.ServedBy[name]))
			}
			fmt.Fprintf(tw, "%d (%s-%s): %s\t", i+1, p.Start, p.End, strings.Join(parts, ", "))
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()
}

// JSON writes the results for scripts; the same scenario and seed give the
// same bytes.
func JSON(w io.Writer, s *Scenario, rs []Result) error {
	b, err := json.MarshalIndent(map[string]any{"scenario": s.Name, "seed": s.Seed, "duration": s.Duration.String(), "results": rs}, "", "  ")
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// Chart colours, one per policy in Policies' order.
var colours = []string{"#999999", "#e69f00", "#56b4e9", "#009e73", "#cc79a7", "#0072b2"}

const (
	chartW, chartH = 720, 400
	padL, padR     = 70, 170
	padT, padB     = 40, 50
)

func svgOpen(b *strings.Builder, title string) {
	fmt.Fprintf(b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", chartW, chartH, chartW, chartH)
	fmt.Fprintf(b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(b, `<text x="%d" y="24" font-size="15" font-weight="bold">%s</text>`+"\n", padL, escape(title))
}

func escape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}

// axes draws the frame, ticks and labels; xs and ys map values to pixels.
func axes(b *strings.Builder, xlabel, ylabel string, xticks, yticks []float64, xs, ys func(float64) float64, xfmt, yfmt func(float64) string) {
	x0, x1, y0, y1 := float64(padL), float64(chartW-padR), float64(chartH-padB), float64(padT)
	fmt.Fprintf(b, `<path d="M%.1f %.1fV%.1fH%.1f" fill="none" stroke="#333"/>`+"\n", x0, y1, y0, x1)
	for _, t := range xticks {
		x := xs(t)
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#ddd"/><text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", x, y0, x, y1, x, y0+16, xfmt(t))
	}
	for _, t := range yticks {
		y := ys(t)
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#ddd"/><text x="%.1f" y="%.1f" text-anchor="end">%s</text>`+"\n", x0, y, x1, y, x0-6, y+4, yfmt(t))
	}
	fmt.Fprintf(b, `<text x="%.1f" y="%d" text-anchor="middle">%s</text>`+"\n", (x0+x1)/2, chartH-12, escape(xlabel))
	fmt.Fprintf(b, `<text x="16" y="%.1f" text-anchor="middle" transform="rotate(-90 16 %.1f)">%s</text>`+"\n", (y0+y1)/2, (y0+y1)/2, escape(ylabel))
}

func legend(b *strings.Builder, names []string) {
	for i, n := range names {
		y := padT + 10 + 20*i
		fmt.Fprintf(b, `<rect x="%d" y="%d" width="14" height="4" fill="%s"/><text x="%d" y="%d">%s</text>`+"\n", chartW-padR+12, y, colours[i%len(colours)], chartW-padR+32, y+5, escape(n))
	}
}

// LatencyCDF is an SVG chart of each policy's end-to-end latency
// distribution, on a logarithmic axis.
func LatencyCDF(s *Scenario, rs []Result) string {
	var b strings.Builder
	svgOpen(&b, "Latency CDF by policy — "+s.Name)
	lo, hi := math.Inf(1), 0.0
	for _, r := range rs {
		if len(r.latencies) > 0 {
			lo, hi = math.Min(lo, r.latencies[0]), math.Max(hi, r.latencies[len(r.latencies)-1])
		}
	}
	if hi == 0 {
		b.WriteString("</svg>\n")
		return b.String()
	}
	lo = math.Pow(10, math.Floor(math.Log10(math.Max(lo, 1))))
	hi = math.Pow(10, math.Ceil(math.Log10(hi)))
	xs := func(v float64) float64 {
		return padL + (math.Log10(math.Max(v, lo))-math.Log10(lo))/(math.Log10(hi)-math.Log10(lo))*float64(chartW-padL-padR)
	}
	ys := func(v float64) float64 { return float64(chartH-padB) - v*float64(chartH-padT-padB) }
	var xticks []float64
	for v := lo; v <= hi; v *= 10 {
		xticks = append(xticks, v)
	}
	axes(&b, "latency (ms, log)", "fraction of answered requests", xticks, []float64{0, .25, .5, .75, .9, 1}, xs, ys,
		func(v float64) string { return fmt.Sprintf("%g", v) }, func(v float64) string { return fmt.Sprintf("%g", v) })
	var names []string
	for i, r := range rs {
		names = append(names, r.Policy)
		n := len(r.latencies)
		if n == 0 {
			continue
		}
		var path strings.Builder
		const points = 200
		for k := 0; k <= points; k++ {
			q := float64(k) / points
			v := r.latencies[min(int(q*float64(n)), n-1)]
			cmd := "L"
			if k == 0 {
				cmd = "M"
			}
			fmt.Fprintf(&path, "%s%.1f %.1f", cmd, xs(v), ys(q))
		}
		fmt.Fprintf(&b, `<path d="%s" fill="none" stroke="%s" stroke-width="2"/>`+"\n", path.String(), colours[i%len(colours)])
	}
	legend(&b, names)
	b.WriteString("</svg>\n")
	return b.String()
}

// CostOverTime is an SVG chart of each policy's cumulative cost, hour by
// hour.
func CostOverTime(s *Scenario, rs []Result) string {
	var b strings.Builder
	svgOpen(&b, "Cumulative cost by policy — "+s.Name)
	hours := 0
	top := 0.0
	for _, r := range rs {
		hours = max(hours, len(r.CostByHour))
		sum := 0.0
		for _, c := range r.CostByHour {
			sum += c
		}
		top = math.Max(top, sum)
	}
	if hours == 0 || top == 0 {
		b.WriteString("</svg>\n")
		return b.String()
	}
	top = niceCeil(top)
	xs := func(h float64) float64 { return padL + h/float64(hours)*float64(chartW-padL-padR) }
	ys := func(v float64) float64 { return float64(chartH-padB) - v/top*float64(chartH-padT-padB) }
	var xticks, yticks []float64
	for h := 0; h <= hours; h += max(1, hours/8) {
		xticks = append(xticks, float64(h))
	}
	for k := 0; k <= 4; k++ {
		yticks = append(yticks, top*float64(k)/4)
	}
	axes(&b, "hour", "USD spent", xticks, yticks, xs, ys, func(v float64) string { return fmt.Sprintf("%g", v) }, func(v float64) string { return fmt.Sprintf("$%.3g", v) })
	var names []string
	for i, r := range rs {
		names = append(names, r.Policy)
		sum := 0.0
		var path strings.Builder
		fmt.Fprintf(&path, "M%.1f %.1f", xs(0), ys(0))
		for h, c := range r.CostByHour {
			sum += c
			fmt.Fprintf(&path, "L%.1f %.1f", xs(float64(h+1)), ys(sum))
		}
		fmt.Fprintf(&b, `<path d="%s" fill="none" stroke="%s" stroke-width="2"/>`+"\n", path.String(), colours[i%len(colours)])
	}
	legend(&b, names)
	b.WriteString("</svg>\n")
	return b.String()
}

// LoadByRegion is an SVG bar chart of the requests each region's
// providers served under one policy (the busiest 20 regions).
func LoadByRegion(s *Scenario, r Result) string {
	var b strings.Builder
	svgOpen(&b, "Requests served by providers of each region ("+r.Policy+") — "+s.Name)
	type kv struct {
		region string
		n      int
	}
	var rows []kv
	for k, v := range r.LoadByRegion {
		rows = append(rows, kv{k, v})
	}
	slices.SortFunc(rows, func(a, b kv) int {
		if a.n != b.n {
			return b.n - a.n
		}
		return strings.Compare(a.region, b.region)
	})
	rows = rows[:min(len(rows), 20)]
	if len(rows) == 0 {
		b.WriteString("</svg>\n")
		return b.String()
	}
	top := niceCeil(float64(rows[0].n))
	bw := float64(chartW-padL-padR) / float64(len(rows))
	ys := func(v float64) float64 { return float64(chartH-padB) - v/top*float64(chartH-padT-padB) }
	var yticks []float64
	for k := 0; k <= 4; k++ {
		yticks = append(yticks, top*float64(k)/4)
	}
	axes(&b, "region", "requests", nil, yticks, func(float64) float64 { return 0 }, ys, nil, func(v float64) string { return fmt.Sprintf("%.0f", v) })
	for i, row := range rows {
		x := float64(padL) + float64(i)*bw
		y := ys(float64(row.n))
		fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"/>`+"\n", x+bw*0.1, y, bw*0.8, float64(chartH-padB)-y, colours[3])
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="end" font-size="10" transform="rotate(-45 %.1f %d)">%s</text>`+"\n", x+bw/2, chartH-padB+12, x+bw/2, chartH-padB+12, escape(row.region))
	}
	b.WriteString("</svg>\n")
	return b.String()
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten.
func niceCeil(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if v <= m*p {
			return m * p
		}
	}
	return 10 * p
}
