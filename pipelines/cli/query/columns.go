package query

// What each command's rows are in time, and what each column of its table
// means, with its unit: the -h text under the synopsis. docs/detection.md
// defines the detectors' figures; the command docs (README, docs/reference.md) repeat these.

// rangeRule is the time-range paragraph of every query command's -h.
func rangeRule(rows string) string {
	return "Range: a row is shown when its interval overlaps [--from, --to) (or the --since\n" +
		"before --to) by an instant; " + rows + ". Both are half-open:\n" +
		"a row that ends where the range starts, or starts where it ends, is not in it.\n" +
		"--limit (default 50) limits the rows shown, never what is found or counted."
}

const spikesColumns = `Columns:
  SPIKE         the window's id: its first 12 characters, longer where two shown
                share them (-o json: the whole id); suspects --spike and
                captures --spike take any unique prefix
  SERVICE       the service (only without --service)
  HOST          the host, and HW_CLASS its hardware class
  WINDOW_START  the window's start, UTC
  DURATION      its length: from its first slow second to one second past its last
  PEAK_MS       the slowest request in the window, milliseconds
  SCORE         PEAK ÷ the slow-second bar (max(25 ms, m × the host's or fleet's
                typical latency), docs/detection.md): how many times past the bar;
                no unit, 1 is at the bar
  TOP_SUSPECT   the rank-1 kernel counter (spikehunt suspects), with the other CPUs
                of its metric and mode among the window's suspects; - when no
                counter moved beyond its baseline, or the host sent none then
                (spikehunt suspects --spike ID says which)`

const suspectsColumns = `Columns:
  RANK          1 is the suspect with the highest DEVIATION
  METRIC, MODE, DEVICE, CPU
                the counter series (CPU "-" when it is not per CPU)
  BASELINE      the series' median rate over the half hour before the window: for
                time (CPU time, run delay, stall time) the share of one CPU it
                took (2.0%), for counts events per second (861/s)
  DURING        its highest rate in the window (±2 s), same unit; a counter read
                every 30 s shows a 1 s storm at about a thirtieth of its height,
                and a line under the table says when the counters' step is
                coarser than the windows
  DEVIATION     (DURING − baseline median) ÷ the baseline's robust spread
                (1.4826 × MAD, with floors), times the series' weight: 100 for time
                taken from the workload (CPU time, run delay, stall time), 10 000 for
                packets on a down interface, 1 for other counts (docs/detection.md);
                no unit; a suspect has at least detect --min-deviation (6)
Families (under the table, and --aggregate):
  TOP_SUSPECT_IN  the spike windows of the range where the family ranked first
                  (and their share of all windows of the range)
  SUSPECT_IN      the windows where it was a suspect at all; HOSTS, on how many hosts`

const patternsColumns = `Columns:
  CLASS        fleet-recurrent: hosts stall at regular intervals, each at its own
               phase; fleet-synchronized: hosts stall together, in bursts beyond
               chance; isolated-host: a few hosts, outliers of the fleet's rate
  MODIFIERS    hw-class-skewed: one hardware class stalls more often
  HOSTS        affected / all hosts of the service in the look-back (share)
  INTERVAL     the median interval between one host's spike windows
  REGULARITY   0–1, 1 is perfectly periodic: 1 − D ÷ (2 × the classifier's bar
               for a recurrent D), D = (p75 − p25) ÷ p50 of the per-host intervals
  SYNC         0–1: the share of spike windows that fall in fleet-wide bursts
               (many hosts within seconds); 1 = every host stalls at once
  HW_SKEW      the hardware class with the highest spike rate, and how many times
               the calmest class's rate it is
  ILLUSION     0–100%: how much of the fleet's averaged p99 the spikes make:
               1 − A_clean ÷ A_all, A the mean of per-host per-minute p99s, clean
               without the seconds in spike windows; near 100% a "fleet-wide p99
               regression" is the spikes alone
  SUSPECTS     counter families that moved during the spikes of many affected
               hosts (on how many hosts), strongest first
The sentence under the table: with a hardware-class skew, each class's interval
(median gap between one host's spikes, median over the class's hosts); the
slowest request of a stall (latency_1s's max over the window and the second
before it; the median over the pattern's stalls, and the slowest of all); when
the stalls hold up some endpoints only, which ("stalls on /checkout only; /feed
and /search unaffected": the requests of the stalls' seconds, an endpoint
stalling when its share of requests over the window's threshold is near the
highest one's, unaffected when it had requests enough and almost none were
slow); the top suspect in units (CPU time as a share of each CPU, counts per
second), put back into the stall where the counters' step is coarser, which it
says.`

const hostsColumns = `Columns:
  REQUESTS     requests served in the range (the sum of the agents' sampling weights)
  P50_MS, P99_MS
               the host's latency quantiles over the range, milliseconds
  MAX_MS       its slowest request, milliseconds
  SPIKES       its spike windows overlapping the range; LAST_SPIKE, the newest's
               start, UTC`

const capturesColumns = `Columns:
  CAPTURE      the capture's id; HOST the host it traced
  BACKEND      the recorder (perf, ftrace, bpftrace, wpr) and its profile
  WINDOW_START the trace's start, UTC; WINDOW its length
  SPIKES       how many spike windows of its host it overlaps (-o json: their ids)
  SIZE         the trace's size, binary units (KiB, MiB)
  LOST         events the recorder dropped or overwrote: a trace with holes
Under the table: a capture the index has not yet indexed, with its status, and
each capture's verdict, the agent's analysis of the slowest request in its window,
made on its node from the trace (spikehunt captures explain gives all of the
analysis). Where a trace is stored (uri) is in -o json and spikehunt captures get.`
