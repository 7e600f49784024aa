package testenv

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// KafkaClusterOptions configures StartKafkaCluster. The zero value is
// ready to use.
type KafkaClusterOptions struct {
	// Libs, Java, MaxHeap, StartTimeout, StopTimeout and LogLimit are as
	// in KafkaOptions, for each node (MaxHeap and LogLimit per node).
	Libs         string
	Java         string
	MaxHeap      string
	StartTimeout time.Duration
	StopTimeout  time.Duration
	LogLimit     int
	// LogDirs are the nodes' log.dirs, one per node, for a test that
	// gives a node a disk of its own (a small tmpfs it fills). Each must be
	// an existing empty directory; Stop empties it but leaves it (it may be
	// a mount point). Empty: a folder in each node's own folder.
	LogDirs []string
	// Properties are added to every node's server.properties, replacing
	// generated keys of the same name. Do not set the listeners, log.dirs,
	// node.id, the controller or the ssl keys: the cluster relies on them.
	Properties map[string]string
}

// Validate checks the options that are set; zero values get defaults.
func (o KafkaClusterOptions) Validate() error {
	single := KafkaOptions{Libs: o.Libs, Java: o.Java, MaxHeap: o.MaxHeap, StartTimeout: o.StartTimeout, StopTimeout: o.StopTimeout, LogLimit: o.LogLimit}
	if err := single.Validate(); err != nil {
		return fmt.Errorf("testenv: KafkaClusterOptions: %w", err)
	}
	if o.LogDirs != nil && len(o.LogDirs) != KafkaClusterNodes {
		return fmt.Errorf("testenv: KafkaClusterOptions.LogDirs has %d entries, want none or %d (one per node)", len(o.LogDirs), KafkaClusterNodes)
	}
	for i, d := range o.LogDirs {
		if !filepath.IsAbs(d) {
			return fmt.Errorf("testenv: KafkaClusterOptions.LogDirs[%d] %q is not an absolute path", i, d)
		}
		if slices.Index(o.LogDirs, d) != i {
			return fmt.Errorf("testenv: KafkaClusterOptions.LogDirs[%d] %q is also an earlier node's: each node needs its own", i, d)
		}
		entries, err := os.ReadDir(d)
		if err != nil {
			return fmt.Errorf("testenv: KafkaClusterOptions.LogDirs[%d]: %w (create it first)", i, err)
		}
		if len(entries) > 0 {
			return fmt.Errorf("testenv: KafkaClusterOptions.LogDirs[%d] %s is not empty: a node formats its own storage", i, d)
		}
	}
	for key := range o.Properties {
		for _, owned := range []string{"listeners", "advertised.listeners", "log.dirs", "node.id", "process.roles", "listener.security.protocol.map", "inter.broker.listener.name"} {
			if key == owned {
				return fmt.Errorf("testenv: KafkaClusterOptions.Properties sets %s, which the cluster generates", key)
			}
		}
		if strings.HasPrefix(key, "controller.") || strings.HasPrefix(key, "ssl.") {
			return fmt.Errorf("testenv: KafkaClusterOptions.Properties sets %s: the controller and ssl keys are the cluster's", key)
		}
	}
	return nil
}
