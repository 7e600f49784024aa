package detect

// Disks as suspects: a disk is judged by how long its IOs took, not by how
// much IO time it summed. /proc/diskstats' time per direction
// (system.disk.operation_time) adds up the time of every IO completed in
// the interval, however many were in flight at once, so it is not bounded
// by one second per second as CPU time is: a quiet disk that starts writing
// back its page cache goes from 0.002 s/s to several seconds per second
// while each of its IOs stays fast, and would outrank any other cause.
// What makes a disk the cause of a stall is that its IOs got slow.
//
// The query therefore reads operation_time with the operations completed
// in the same interval (the agent reports both from one reading of
// diskstats, with the same start and length) and judges, in their place,
// the series diskLatencyMetric: per device and direction, the interval's
// operation time over its completed operations, seconds per IO (iostat's
// r_await and w_await). The kernel adds an IO's time when it completes, so
// a stall shows when its IOs come back, in the interval that holds its
// end; IOs that never come back show in spikehunt.disk.in_flight.
//
// An interval with fewer than diskLatencyMinOps completed operations is
// read as if it had that many: a lone slow IO on an idle disk (a flush, a
// seek after a long sleep) is not a suspect, and an idle interval reads 0,
// so an idle disk has a baseline of 0 rather than none. A disk that stalls
// while a workload waits on it completes more than that in the interval
// that holds the stall's end: the IOs the workload issued meanwhile.

// diskLatencyMetric names the per-IO latency series the suspects query
// derives; it exists in spike_suspects only, never in counters.
const diskLatencyMetric = "spikehunt.disk.operation_latency"

// diskLatencyMinOps is the fewest operations an interval's latency is
// spread over: on an idle disk a lone IO must take 1.2 s to deviate by
// MinDeviation (6) at the metric's floor in absoluteFloors (2 ms), while a
// stall of a second in a 30 s interval of 50 IOs a second still reads
// some 20 ms over its baseline.
const diskLatencyMinOps = 100
