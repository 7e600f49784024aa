package detect

import "strings"

// Workload cgroups as suspects: the agent reports each cgroup it keeps
// (the busiest by CPU and every throttled one) as its own series, named
// by its path — a slice beside the services in it, a pod beside its
// containers. Two rules make their ranking name the workload an SRE acts
// on.
//
// Fresh cgroups. A cgroup the agent did not report in enough of the
// baseline has too little of a baseline of its own: it did not exist (a
// cron job's or a backup's transient unit, a pod scheduled minutes ago),
// or it was below the kept set. A cgroup never reported before the window
// used less CPU than any cgroup kept then, and it is judged against zero,
// with the metric's absolute floor as the scale. A cgroup reported in a
// few intervals of the baseline is judged against those: a service
// started a minute before the stall, serving its requests since, did not
// use nothing, and judging its work against zero would make any rise of
// its load a suspect. On a node with more busy cgroups than the agent keeps, a cgroup
// that enters the kept set with the stall is thereby overstated by at most
// the smallest kept cgroup's CPU; skipping it instead would hide the
// neighbour that appears with the stall, the commonest one.
//
// Leaves before parents. A parent's CPU includes its children's: when a
// slice and a service in it both rise, the slice's rise is the service's,
// counted again. preferLeaves drops a parent cgroup's row when a
// descendant's row of the same metric and mode in the same window
// accounts for at least leafShare of the parent's rise, and ranks again.

// cgroupPrefix begins the names of the metrics of workload cgroups.
const cgroupPrefix = "spikehunt.cgroup."

// leafShare is how much of a parent's rise its descendant must account for
// to stand in for it: half, so that two children who rose together leave
// their parent standing (neither explains it alone).
const leafShare = 0.5

// fetchPerWindow is how many rows per window the query returns, so that
// max remain after preferLeaves has dropped parents.
func fetchPerWindow(max int) int { return max * 2 }

// preferLeaves drops, in each window's rows (ordered by window, then
// rank), the parent cgroups a descendant stands in for, puts each cause
// before the echoes of it that outranked it (causesBeforeEchoes,
// suspects_echoes.go), renumbers the ranks and keeps max rows per window.
func preferLeaves(rows []suspectRow, max int) []suspectRow {
	out := rows[:0]
	for start := 0; start < len(rows); {
		end := start + 1
		for end < len(rows) && rows[end].spikeID == rows[start].spikeID {
			end++
		}
		window := rows[start:end]
		causesBeforeEchoes(window)
		rank := 0
		for i, r := range window {
			if rank == max || standsIn(window, i) {
				continue
			}
			rank++
			r.Rank = rank
			out = append(out, r)
		}
		start = end
	}
	return out
}

// standsIn reports whether a descendant in window stands in for row i.
func standsIn(window []suspectRow, i int) bool {
	p := window[i]
	if !strings.HasPrefix(p.Metric, cgroupPrefix) || p.Device == "" {
		return false
	}
	rise := p.During - p.Baseline
	for j, c := range window {
		if j != i && c.Metric == p.Metric && c.Mode == p.Mode && strings.HasPrefix(c.Device, p.Device+"/") &&
			c.During-c.Baseline >= leafShare*rise {
			return true
		}
	}
	return false
}
