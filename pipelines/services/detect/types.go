package detect

import "time"

// SpikeWindow is one host's spike: consecutive seconds whose max latency
// passed the threshold, merged across short gaps. A row of the spikes table.
type SpikeWindow struct {
	ID          string // spikes.spike_id: a function of (service, host, start)
	Service     string
	Host        string
	HWClass     string
	Start, End  time.Time // [Start, End): End is one second past the last slow second
	PeakUS      uint32    // the largest per-second max inside the window
	BaselineUS  float64   // the threshold's base (the host's or fleet's typical latency)
	Score       float64   // PeakUS / threshold: how far past the threshold it went
	Suspects    []Suspect // ranked, most deviating first; empty when no counter moved
	DetectedAt  time.Time
	DetectorVer string
	// Changed: the window is new, or its end or peak differ from the row
	// stored before, in the pass that returned it (not stored).
	Changed bool
	// Endpoint names the endpoint(s) whose requests alone showed the window
	// (comma-separated), "" when the host's per-second figures did (not
	// stored; a pass's own windows only).
	Endpoint string
}

// Suspect is one kernel counter series on a spike's host that moved with
// the spike, compared with the same host's own baseline. Per-CPU series of
// one metric and mode (NET_RX on CPUs 0, 2, 4, 6) are separate suspects
// sharing Metric/Mode/Device; Group joins them for presentation.
type Suspect struct {
	Rank      int
	Metric    string // counters.metric
	CPU       int    // -1 when the series is not per CPU
	Device    string // NIC, disk or IRQ; "" when none
	Mode      string // cpu.mode, direction, softirq vector…
	Baseline  float64
	During    float64
	Deviation float64 // the score ranks are ordered by
}

// Pattern is one fleet pattern of a service over a look-back: a row of the
// patterns table.
type Pattern struct {
	ID                  string // stable across evaluations: a function of (service, class)
	Service             string
	Class               string
	Modifiers           []string
	LookbackStart       time.Time
	LookbackEnd         time.Time
	HostsAffected       int
	HostsTotal          int
	RecurrenceInterval  time.Duration // median per-host interval between spikes
	Regularity          float64       // 0..1, 1 = perfectly periodic
	Synchronicity       float64       // 0..1, 1 = all affected hosts spike in the same windows
	HWClassSkew         map[string]float64
	IllusionShare       float64
	Suspects            []PatternSuspect
	AffectedHostsSample []string // up to 20 affected hosts, most spikes first (not stored; for alerts and the CLI)
	DetectedAt          time.Time
	DetectorVer         string
}

// PatternSuspect is a counter family that moved during the spikes of many
// affected hosts: the patterns.suspects tuple.
type PatternSuspect struct {
	Metric, Mode, Device string
	CPUs                 []int // the CPUs involved (most frequent first); empty when not per CPU (not stored)
	Hosts                int   // affected hosts whose spikes had it among their top suspects
	Score                float64
}
