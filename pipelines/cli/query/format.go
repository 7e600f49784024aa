package query

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"
)

// How the commands render values in tables and sentences.

// ms renders microseconds as milliseconds: whole above 100 ms, where a
// decimal is noise, one decimal below.
func ms(us float64) string {
	m := us / 1000
	if m >= 100 {
		return strconv.FormatFloat(m, 'f', 0, 64)
	}
	return strconv.FormatFloat(m, 'f', 1, 64)
}

// roughDuration renders an interval the way people say it: 45s, 17m, 2.5h, 3d.
func roughDuration(d time.Duration) string {
	switch {
	case d <= 0:
		return "-"
	case d < 90*time.Second:
		return fmt.Sprintf("%ds", int(d.Round(time.Second)/time.Second))
	case d < 90*time.Minute:
		return fmt.Sprintf("%dm", int(d.Round(time.Minute)/time.Minute))
	case d < 48*time.Hour:
		return strings.TrimSuffix(strconv.FormatFloat(d.Hours(), 'f', 1, 64), ".0") + "h"
	default:
		return strings.TrimSuffix(strconv.FormatFloat(d.Hours()/24, 'f', 1, 64), ".0") + "d"
	}
}

// windowDuration renders a spike window's length: 1s, 2.5s, 3m10s.
func windowDuration(d time.Duration) string {
	if d < time.Minute {
		return strings.TrimSuffix(strconv.FormatFloat(d.Seconds(), 'f', 1, 64), ".0") + "s"
	}
	return d.Round(time.Second).String()
}

// pct renders a share 0..1 as a whole percentage.
func pct(share float64) string { return fmt.Sprintf("%.0f%%", share*100) }

// share is a/b, 0 when b is 0.
func share(a, b int64) float64 {
	if b <= 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// utcTime renders a timestamp for tables: seconds, UTC, no zone letters.
func utcTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format("2006-01-02 15:04:05")
}

// SuspectLabel names a counter family compactly for tables: "softirq cpu
// 0,2,4,6" for system.cpu.time in mode softirq on those CPUs, "NET_RX
// softirq cpu 2", "network.pause_frames eth0".
func SuspectLabel(metric, mode, device string, cpus []int) string {
	var parts []string
	switch metric {
	case "system.cpu.time":
		parts = append(parts, orDash(mode))
	case "spikehunt.softirqs":
		parts = append(parts, mode+" softirq")
	default:
		parts = append(parts, strings.TrimPrefix(strings.TrimPrefix(metric, "spikehunt."), "system."))
		if mode != "" {
			parts = append(parts, mode)
		}
	}
	if device != "" {
		parts = append(parts, device)
	}
	if len(cpus) > 0 {
		parts = append(parts, "cpu "+joinInts(cpus, ","))
	}
	return strings.Join(parts, " ")
}

// suspectPhrase names a counter family in a sentence: "NET_RX softirq",
// "softirq CPU time", "interrupts of eth0-TxRx-0", "pause frames on eth0".
func suspectPhrase(metric, mode, device string) string {
	var s string
	switch metric {
	case "spikehunt.softirqs":
		s = mode + " softirq"
		device = ""
	case "system.cpu.time":
		s = mode + " CPU time"
	case "spikehunt.interrupts":
		s = "interrupts"
		if device != "" {
			return s + " of " + device
		}
	case "spikehunt.network.pause_frames":
		s = "pause frames"
	case "spikehunt.cpu.run_delay":
		s = "run-queue delay"
	case "spikehunt.pressure.stall_time":
		s = strings.TrimSpace(mode + " pressure stall time")
		mode = ""
	default:
		s = strings.NewReplacer(".", " ", "_", " ").Replace(strings.TrimPrefix(strings.TrimPrefix(metric, "spikehunt."), "system."))
		if mode != "" {
			s += " (" + mode + ")"
		}
	}
	if device != "" {
		s += " on " + device
	}
	return strings.TrimSpace(s)
}

func joinInts(v []int, sep string) string {
	s := make([]string, len(v))
	for i, n := range v {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, sep)
}

// cpuList renders CPUs for a sentence: "CPU 3", "CPUs 0, 2, 4 and 6", and
// "12 CPUs" when listing them would not help anyone.
func cpuList(cpus []int) string {
	switch n := len(cpus); {
	case n == 1:
		return fmt.Sprintf("CPU %d", cpus[0])
	case n > 8:
		return fmt.Sprintf("%d CPUs", n)
	default:
		return "CPUs " + joinInts(cpus[:n-1], ", ") + " and " + strconv.Itoa(cpus[n-1])
	}
}

// cpuCount is how often one CPU appeared among a counter family's suspects.
type cpuCount struct {
	cpu, n int
}

// frequentCPUs keeps the CPUs that appeared at least half as often as the
// most frequent one, in ascending order: a family that moves on CPUs 0, 2, 4
// and 6 in every spike and on CPU 5 once is "CPUs 0, 2, 4 and 6".
func frequentCPUs(counts []cpuCount) []int {
	top := 0
	for _, c := range counts {
		if c.cpu >= 0 && c.n > top {
			top = c.n
		}
	}
	var out []int
	for _, c := range counts {
		if c.cpu >= 0 && top > 0 && 2*c.n >= top {
			out = append(out, c.cpu)
		}
	}
	sort.Ints(out)
	return out
}

// plural: "1 host", "3 hosts".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return strconv.Itoa(n) + " " + noun + "s"
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
