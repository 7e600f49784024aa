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
