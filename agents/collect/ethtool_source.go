package collect

import "strings"

// ethtoolSource supplies a network driver's own statistics, what
// `ethtool -S <iface>` prints. The real one is the SIOCETHTOOL ioctl
// (ethtool_ioctl_linux.go); tests supply fixtures.
type ethtoolSource interface {
	// Stats returns the driver counters of iface as parallel slices. names
	// may be the very same slice across calls while the driver's set of
	// counters is unchanged; callers may cache work keyed on it but must
	// not modify it. An error wrapping ErrNotSupported means the driver
	// has no statistics.
	Stats(iface string) (names []string, values []uint64, err error)
}

type ethtoolKind uint8

const (
	ethtoolIgnored ethtoolKind = iota
	ethtoolPause               // a flow-control (802.3x or per-priority) frame count
	ethtoolDrop                // a packet the driver or NIC dropped
)

// ethtoolPick is one driver counter worth reporting.
type ethtoolPick struct {
	index     int // into the names and values of ethtoolSource.Stats
	name      string
	kind      ethtoolKind
	direction string // "receive" or "transmit"; pause frames only
}

// classifyEthtool picks the pause-frame and drop counters out of a
// driver's counter names. Names are driver-specific; what they share:
//   - pause frames: "pause" (rx_pause, tx_pause_frames, rx_pause_ctrl_phy,
//     rx_prio3_pause) or XON/XOFF (rx_flow_control_xoff, link_xon_rx).
//     mlx4/mlx5 also export pause *durations*, transitions and storm
//     events under "pause" names; they are not frame counts and are left
//     out. A pause counter whose direction cannot be told is left out.
//   - drops: drop/discard/missed words (rx_queue_0_drops, rx_discards_phy,
//     rx_missed_errors) and out-of-buffer counters (rx_out_of_buffer,
//     rx_no_buffer_count, rx_no_dma_resources).
//
// skip names counters already reported from sysfs, which many drivers
// repeat in their ethtool set; reporting both would make two series with
// the same attributes.
func classifyEthtool(names []string, skip func(string) bool) []ethtoolPick {
	var picks []ethtoolPick
	for i, name := range names {
		kind, dir := classifyEthtoolName(name)
		if kind == ethtoolIgnored || (kind == ethtoolDrop && skip != nil && skip(name)) {
			continue
		}
		picks = append(picks, ethtoolPick{index: i, name: name, kind: kind, direction: dir})
	}
	return picks
}

func classifyEthtoolName(name string) (ethtoolKind, string) {
	lower := strings.ToLower(name)
	words := strings.FieldsFunc(lower, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9')
	})
	has := func(ws ...string) bool {
		for _, w := range words {
			for _, x := range ws {
				if w == x {
					return true
				}
			}
		}
		return false
	}
	dir := ""
	switch rx, tx := has("rx"), has("tx"); {
	case rx && !tx:
		dir = "receive"
	case tx && !rx:
		dir = "transmit"
	}
	isPause := strings.Contains(lower, "pause") || has("xon", "xoff")
	switch {
	case isPause && !has("duration", "transition", "storm", "time", "us"):
		if dir == "" {
			return ethtoolIgnored, ""
		}
		return ethtoolPause, dir
	case isPause:
		return ethtoolIgnored, ""
	case has("drop", "drops", "dropped", "discard", "discards", "discarded", "missed"),
		strings.Contains(lower, "out_of_buffer"), strings.Contains(lower, "no_buffer"), strings.Contains(lower, "no_dma"):
		return ethtoolDrop, dir
	}
	return ethtoolIgnored, ""
}
