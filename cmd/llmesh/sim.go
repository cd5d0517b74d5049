package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/llmesh/llmesh/sim/des"
)

// runSim runs a scenario in virtual time under every policy and prints
// them side by side; -svg writes the charts.
func runSim(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("sim", flag.ContinueOnError)
	fs.SetOutput(stderr)
	scenario := fs.String("scenario", "", "the scenario `file` (YAML; see sim/scenarios)")
	asJSON := fs.Bool("json", false, "print JSON")
	svgDir := fs.String("svg", "", "write the charts (latency CDF, cost over time, load per region) to this `directory`")
	seed := fs.Uint64("seed", 0, "override the scenario's seed")
	duration := fs.Duration("duration", 0, "override the scenario's duration")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *scenario == "" || fs.NArg() > 0 {
		fmt.Fprintln(stderr, "llmesh sim: give -scenario FILE")
		return 2
	}
	s, err := des.LoadScenario(*scenario)
	if err != nil {
		fmt.Fprintf(stderr, "llmesh sim: %v\n", err)
		return 1
	}
	if *seed != 0 {
		s.Seed = *seed
	}
	if *duration > 0 {
		s.Duration = *duration
	}
	start := time.Now()
	rs, err := des.Run(s)
	if err != nil {
		fmt.Fprintf(stderr, "llmesh sim: %v\n", err)
		return 1
	}
	took := time.Since(start)
	if *svgDir != "" {
		if err := os.MkdirAll(*svgDir, 0o755); err != nil {
			fmt.Fprintf(stderr, "llmesh sim: %v\n", err)
			return 1
		}
		charts := map[string]string{
			"latency-cdf.svg":    des.LatencyCDF(s, rs),
			"cost-over-time.svg": des.CostOverTime(s, rs),
			"load-by-region.svg": des.LoadByRegion(s, rs[len(rs)-1]),
		}
		for name, svg := range charts {
			if err := os.WriteFile(filepath.Join(*svgDir, name), []byte(svg), 0o644); err != nil {
				fmt.Fprintf(stderr, "llmesh sim: %v\n", err)
				return 1
			}
		}
	}
	if *asJSON {
		if err := des.JSON(stdout, s, rs); err != nil {
			fmt.Fprintf(stderr, "llmesh sim: %v\n", err)
			return 1
		}
		return 0
	}
	des.Table(stdout, s, rs)
	fmt.Fprintf(stdout, "\nsimulated in %v\n", took.Round(time.Millisecond))
	return 0
}
