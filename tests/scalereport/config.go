package main

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Config is what the report judges the figures against.
type Config struct {
	// Want is, per stage, the sizes (hosts) the run was meant to cover.
	Want map[string][]float64
	// Skipped says, per stage and size, why a wanted size was not run.
	Skipped map[string]map[float64]string
	// SpansPerHostS is what one host sends (spans a second its agent
	// keeps). The ingest benchmark loads 1,000 spans a host, which the
	// fleet sends in 1,000/SpansPerHostS seconds: an ingest slower than
	// that falls behind. Default 1, the simulated host of docs/kubernetes.md's
	// store-mode table (0.95).
	SpansPerHostS float64
	// DetectBudgetS is how long one full pass over 24 h may take: the
	// chart's detect.every (30 s), the detector's pass interval.
	DetectBudgetS float64
	// OperatorBudgetS is how long a policy's Captures may take to exist
	// after it is created or rotates: a minute, under 2% of the default
	// one-hour rotation period, so the bait is armed for nearly all of it.
	OperatorBudgetS float64
	// MemoryBudgetMiB is, per stage, the memory limits in the chart of
	// the pods that do that stage's work, added up: in the benchmark the
	// embedded engine runs inside the ingest or detector process, in the
	// chart inside serve-clickhouse (clickhouse.embedded, 4 GiB).
	MemoryBudgetMiB map[string]float64
}

func defaultConfig() Config {
	return Config{
		Want:            map[string][]float64{},
		Skipped:         map[string]map[float64]string{},
		SpansPerHostS:   1,
		DetectBudgetS:   30,
		OperatorBudgetS: 60,
		MemoryBudgetMiB: map[string]float64{
			"ingest":   2048 + 4096, // ingest.resources.limits + clickhouse.embedded
			"detect":   1024 + 4096, // detect.resources.limits + clickhouse.embedded
			"operator": 256,         // operator.resources.limits
		},
	}
}

// Validate checks the configuration; it does not change it.
func (c Config) Validate() error {
	var errs []error
	if !(c.SpansPerHostS > 0) {
		errs = append(errs, fmt.Errorf("--spans-per-host-s %g: must be above 0", c.SpansPerHostS))
	}
	if !(c.DetectBudgetS > 0) {
		errs = append(errs, fmt.Errorf("--detect-budget-s %g: must be above 0", c.DetectBudgetS))
	}
	if !(c.OperatorBudgetS > 0) {
		errs = append(errs, fmt.Errorf("--operator-budget-s %g: must be above 0", c.OperatorBudgetS))
	}
	for stage, sizes := range c.Want {
		if stageOf(stage) == nil {
			errs = append(errs, fmt.Errorf("--want %s: no such stage (%s)", stage, strings.Join(stageNames(), ", ")))
		}
		for _, s := range sizes {
			if !(s > 0) {
				errs = append(errs, fmt.Errorf("--want %s: size %g must be above 0", stage, s))
			}
		}
	}
	for stage := range c.Skipped {
		if stageOf(stage) == nil {
			errs = append(errs, fmt.Errorf("--skipped %s: no such stage (%s)", stage, strings.Join(stageNames(), ", ")))
		}
	}
	return errors.Join(errs...)
}

// timeBudgetS is the stage's time budget in seconds.
func (c Config) timeBudgetS(stage string) float64 {
	switch stage {
	case "ingest":
		return 1000 / c.SpansPerHostS
	case "detect":
		return c.DetectBudgetS
	case "operator":
		return c.OperatorBudgetS
	}
	return 0
}

// sizesFlag parses stage=size,size,… into the map.
type sizesFlag map[string][]float64

func (f sizesFlag) String() string { return "" }

func (f sizesFlag) Set(v string) error {
	stage, list, ok := strings.Cut(v, "=")
	if !ok {
		return fmt.Errorf("%q: want stage=size,size,… (ingest=1000,3000,10000)", v)
	}
	for _, s := range strings.Split(list, ",") {
		n, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
		if err != nil {
			return fmt.Errorf("%q: size %q: %w", v, s, err)
		}
		if !slices.Contains(f[stage], n) {
			f[stage] = append(f[stage], n)
		}
	}
	slices.Sort(f[stage])
	return nil
}

// reasonsFlag parses stage=size:reason into the map.
type reasonsFlag map[string]map[float64]string

func (f reasonsFlag) String() string { return "" }

func (f reasonsFlag) Set(v string) error {
	stage, rest, ok1 := strings.Cut(v, "=")
	size, reason, ok2 := strings.Cut(rest, ":")
	if !ok1 || !ok2 || strings.TrimSpace(reason) == "" {
		return fmt.Errorf("%q: want stage=size:reason (detect=10000:too long to load here)", v)
	}
	n, err := strconv.ParseFloat(size, 64)
	if err != nil {
		return fmt.Errorf("%q: size %q: %w", v, size, err)
	}
	if f[stage] == nil {
		f[stage] = map[float64]string{}
	}
	f[stage][n] = strings.TrimSpace(reason)
	return nil
}
