package collect

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestClassifyEthtoolName(t *testing.T) {
	type class struct {
		Kind      ethtoolKind
		Direction string
	}
	tests := map[string]class{
		"rx_pause":                      {ethtoolPause, "receive"},
		"tx_pause_frames":               {ethtoolPause, "transmit"},
		"rx_pause_ctrl_phy":             {ethtoolPause, "receive"},
		"rx_prio3_pause":                {ethtoolPause, "receive"},
		"rx_flow_control_xoff":          {ethtoolPause, "receive"},
		"port.link_xon_tx":              {ethtoolPause, "transmit"},
		"rx_prio3_pause_duration":       {ethtoolIgnored, ""},
		"rx_pause_transition":           {ethtoolIgnored, ""},
		"tx_pause_storm_warning_events": {ethtoolIgnored, ""},
		"pause_frames":                  {ethtoolIgnored, ""}, // direction unknown
		"rx_queue_0_drops":              {ethtoolDrop, "receive"},
		"rx0_xdp_drops":                 {ethtoolDrop, ""}, // "rx0" is a queue, not a direction word
		"rx_discards_phy":               {ethtoolDrop, "receive"},
		"rx_out_of_buffer":              {ethtoolDrop, "receive"},
		"rx_no_buffer_count":            {ethtoolDrop, "receive"},
		"rx_no_dma_resources":           {ethtoolDrop, "receive"},
		"tx_dropped":                    {ethtoolDrop, "transmit"},
		"rx_packets":                    {ethtoolIgnored, ""},
		"tx_kicks":                      {ethtoolIgnored, ""},
	}
	got := map[string]class{}
	for name := range tests {
		k, d := classifyEthtoolName(name)
		got[name] = class{k, d}
	}
	if diff := cmp.Diff(tests, got); diff != "" {
		t.Errorf("classifyEthtoolName (-want +got):\n%s", diff)
	}
}

func TestClassifyEthtoolSkipsCountersReportedFromSysfs(t *testing.T) {
	names := []string{"rx_missed_errors", "rx_pause", "rx_packets", "rx_discards"}
	got := classifyEthtool(names, func(n string) bool { return n == "rx_missed_errors" })
	want := []ethtoolPick{
		{index: 1, name: "rx_pause", kind: ethtoolPause, direction: "receive"},
		{index: 3, name: "rx_discards", kind: ethtoolDrop, direction: "receive"},
	}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(ethtoolPick{})); diff != "" {
		t.Errorf("classifyEthtool (-want +got):\n%s", diff)
	}
}
