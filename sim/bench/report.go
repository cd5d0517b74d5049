package bench

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"
)

// Added is what a target adds over the baseline at each percentile.
type Added struct {
	Target string        `json:"target"`
	P50    time.Duration `json:"p50_ns"`
	P99    time.Duration `json:"p99_ns"`
	TTFB50 time.Duration `json:"ttfb_p50_ns,omitempty"`
}

// AddedOver returns, for every target but the baseline, what it adds
// over the baseline's latency.
func AddedOver(rs []Result, baseline string) []Added {
	var base *Result
	for i := range rs {
		if rs[i].Target == baseline {
			base = &rs[i]
		}
	}
	if base == nil {
		return nil
	}
	var out []Added
	for _, r := range rs {
		if r.Target == baseline {
			continue
		}
		out = append(out, Added{Target: r.Target, P50: r.P50 - base.P50, P99: r.P99 - base.P99, TTFB50: r.TTFB50 - base.TTFB50})
	}
	return out
}

// Table prints the results for people: one row per target, and what each
// adds over the baseline.
func Table(w io.Writer, rs []Result, baseline string) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "target\tsent\tok\terrors\ttruncated\tanswered/s\tp50\tp90\tp99\tp99.9\tTTFB p50\tTTFB p99\tCPU/req\tRSS idle\tRSS peak\t")
	for _, r := range rs {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%.0f\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", r.Target, r.Sent, r.OK, r.Errors, r.Truncated, r.RPS,
			ms(r.P50), ms(r.P90), ms(r.P99), ms(r.P999), ms(r.TTFB50), ms(r.TTFB99), us(r.CPUPerReq), mib(r.RSSIdle), mib(r.RSSPeak))
	}
	tw.Flush()
	if added := AddedOver(rs, baseline); len(added) > 0 {
		fmt.Fprintf(w, "\nadded over %s:\n", baseline)
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "target\tp50\tp99\tTTFB p50\t")
		for _, a := range added {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t\n", a.Target, ms(a.P50), ms(a.P99), ms(a.TTFB50))
		}
		tw.Flush()
	}
	for _, r := range rs {
		if r.FirstError != "" {
			fmt.Fprintf(w, "%s: first error: %s\n", r.Target, r.FirstError)
		}
	}
}

func mib(b int64) string {
	if b == 0 {
		return "-"
	}
	return fmt.Sprintf("%.0fMiB", float64(b)/(1<<20))
}

func ms(d time.Duration) string {
	if d == 0 {
		return "-"
	}
	return fmt.Sprintf("%.3fms", float64(d.Microseconds())/1000)
}

func us(d time.Duration) string {
	if d == 0 {
		return "-"
	}
	return fmt.Sprintf("%dµs", d.Microseconds())
}

// PrefixTable prints the shared-prefix results for people: one row per
// target, and each one's TTFT p90 and throughput against the baseline's
// (round robin's) and its hit rate against the oracle's.
func PrefixTable(w io.Writer, rs []PrefixResult, baseline, oracle string) {
	var base, orc *PrefixResult
	for i := range rs {
		switch rs[i].Target {
		case baseline:
			base = &rs[i]
		case oracle:
			orc = &rs[i]
		}
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "policy\trequests\tok\terrors\tunfinished\tTTFT p50\tTTFT p90\toutput tok/s\thit rate\tp90 vs base\ttok/s vs base\thit vs oracle\t")
	for _, r := range rs {
		p90, tps, hit := "-", "-", "-"
		if base != nil && r.TTFT90 > 0 {
			p90 = fmt.Sprintf("%.1f× lower", float64(base.TTFT90)/float64(r.TTFT90))
		}
		if base != nil && base.OutputTPS > 0 {
			tps = fmt.Sprintf("%.2f×", r.OutputTPS/base.OutputTPS)
		}
		if orc != nil && orc.HitRate > 0 {
			hit = fmt.Sprintf("%.0f%%", 100*r.HitRate/orc.HitRate)
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%s\t%s\t%.0f\t%.1f%%\t%s\t%s\t%s\t\n", r.Target, r.Requests, r.OK, r.Errors, r.Unfinished,
			ms(r.TTFT50), ms(r.TTFT90), r.OutputTPS, 100*r.HitRate, p90, tps, hit)
	}
	tw.Flush()
	for _, r := range rs {
		if r.FirstError != "" {
			fmt.Fprintf(w, "%s: first error: %s\n", r.Target, r.FirstError)
		}
	}
}
