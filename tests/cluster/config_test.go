package cluster

import (
	"strings"
	"testing"
	"time"
)

func TestOptionsValidateNamesEachProblem(t *testing.T) {
	tests := []struct {
		name    string
		edit    func(*Options)
		wantErr []string // substrings; none: valid
	}{
		{"the defaults are valid", func(*Options) {}, nil},
		{"a node IP of this host's network is valid", func(o *Options) { o.NodeIP = "192.0.2.2" }, nil},
		{"a loopback node IP is refused: pods cannot reach it", func(o *Options) { o.NodeIP = "127.0.0.1" }, []string{"NodeIP"}},
		{"an upper-case node name is refused", func(o *Options) { o.NodeName = "Node" }, []string{"NodeName"}},
		{"overlapping ranges are refused", func(o *Options) { o.PodCIDR = "10.0.0.0/16" }, []string{"overlap"}},
		{"a tiny Service range is refused", func(o *Options) { o.ServiceCIDR = "10.0.0.0/30" }, []string{"too small"}},
		{"a second node is valid", func(o *Options) { o.Nodes = []NodeOptions{SecondNode()} }, nil},
		{"a second node's pod range inside the first's is refused", func(o *Options) {
			n := SecondNode()
			n.PodCIDR = "10.244.0.128/25"
			o.Nodes = []NodeOptions{n}
		}, []string{"Nodes[0].PodCIDR", "overlaps"}},
		{"a second node's link wider than a /30 is refused", func(o *Options) {
			n := SecondNode()
			n.Link = "10.245.0.0/24"
			o.Nodes = []NodeOptions{n}
		}, []string{"Nodes[0].Link"}},
		{"a second node named as the first is refused", func(o *Options) {
			n := SecondNode()
			n.Name = o.NodeName
			o.Nodes = []NodeOptions{n}
		}, []string{"not unique"}},
		{"a relative private folder is refused", func(o *Options) {
			n := SecondNode()
			n.Private = []string{"var/lib/x"}
			o.Nodes = []NodeOptions{n}
		}, []string{"Nodes[0].Private"}},
		{"every problem is named at once", func(o *Options) {
			o.PodCIDR, o.ServiceCIDR, o.StartTimeout = "x", "y", time.Second
		}, []string{"PodCIDR", "ServiceCIDR", "StartTimeout"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := DefaultOptions()
			tt.edit(&o)
			before := o
			err := o.Validate()
			if len(tt.wantErr) == 0 && err != nil {
				t.Fatalf("Validate() = %v, want nil", err)
			}
			for _, w := range tt.wantErr {
				if err == nil || !strings.Contains(err.Error(), w) {
					t.Errorf("Validate() = %v, want an error naming %q", err, w)
				}
			}
			if o.NodeName != before.NodeName || o.PodCIDR != before.PodCIDR || o.ServiceCIDR != before.ServiceCIDR {
				t.Errorf("Validate changed its receiver")
			}
		})
	}
}
