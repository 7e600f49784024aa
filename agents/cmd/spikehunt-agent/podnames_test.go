package main

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// Outside a cluster, or switched off, the pod watch is off and pods are
// shown by UID; asked for where it cannot run, the agent does not start.
// (The watch itself is tested on a real API server in agents/podwatch.)
func TestThePodWatchIsOnOnlyInAClusterWithTheNodesName(t *testing.T) {
	on, off := true, false
	for _, tc := range []struct {
		name      string
		enabled   *bool
		inCluster bool
		nodeGiven bool
		wantErr   string
		wantLog   string
	}{
		{name: "outside a cluster it is off, silently"},
		{name: "switched off it is off, even in a cluster", enabled: &off, inCluster: true, nodeGiven: true},
		{name: "asked for outside a cluster the start fails", enabled: &on, wantErr: "not in a Kubernetes cluster"},
		{name: "in a cluster without the token it is off, with a warning", inCluster: true, nodeGiven: true, wantLog: "token is not mounted"},
		{name: "asked for in a cluster without the token the start fails", enabled: &on, inCluster: true, nodeGiven: true, wantErr: "token is not mounted"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			host, port := "", ""
			if tc.inCluster {
				host, port = "10.0.0.1", "443"
			}
			t.Setenv("KUBERNETES_SERVICE_HOST", host)
			t.Setenv("KUBERNETES_SERVICE_PORT", port)
			var logs bytes.Buffer
			namer, stop, err := startPodNames(context.Background(), PodNamesConfig{Enabled: tc.enabled}, "node-a", tc.nodeGiven,
				slog.New(slog.NewTextHandler(&logs, nil)), prometheus.NewRegistry())
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want one saying %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer stop()
			if namer != nil {
				t.Errorf("a pod namer %T where the watch should be off", namer)
			}
			if !strings.Contains(logs.String(), tc.wantLog) {
				t.Errorf("log %q, want it to say %q", logs.String(), tc.wantLog)
			}
		})
	}
}
