//go:build linux

package cluster

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Stop stops every process of the node, kills what runs in its pods, and
// takes the host back to what it was: mounts, network namespaces, the
// bridge and veths, iptables rules and chains, cgroups, sysctls and the
// state folder (logs/ stays with KeepLogs). It then checks that nothing is
// left and says what is. Safe to call more than once.
func (c *Cluster) Stop() error {
	c.stopOnce.Do(func() { c.stopErr = c.stop() })
	return c.stopErr
}

func (c *Cluster) stop() error {
	var errs []error
	// The controllers first, so that nothing recreates what the kubelet
	// stops; then the node; the API server and etcd last.
	for i := len(c.comps) - 1; i >= 0; i-- {
		if err := c.comps[i].stop(10 * time.Second); err != nil {
			errs = append(errs, err)
		}
	}
	switch {
	case c.host != nil:
		errs = append(errs, teardownHost(c.host, c.opts.KeepLogs))
	case c.dir != "" && c.opts.Dir == "":
		errs = append(errs, os.RemoveAll(c.dir)) // Start failed before changing the host
	}
	if c.lock != nil {
		_ = c.lock.Truncate(0)
		_ = c.lock.Close() // releases the flock
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("cluster: stop: %w", err)
	}
	return nil
}

// teardownHost undoes what recordHostState recorded and reports what it
// could not undo.
func teardownHost(h *hostState, keepLogs bool) error {
	var errs []error
	add := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	// Pods and shims outlive the kubelet and containerd.
	add(killCgroup(h.Cgroup, 20*time.Second))
	var netns []string
	for _, e := range newEntries(h, "/run/netns") {
		netns = append(netns, filepath.Join("/run/netns", e))
	}
	add(unmountAll(append([]string{h.Dir}, netns...)...))
	for _, n := range netns {
		add(os.Remove(n))
	}
	// The host ends of the pods' veths go with their namespaces once
	// nothing holds them; delete any still on the bridge, then the bridge.
	for _, l := range bridgePorts(h.Bridge) {
		out, err := exec.Command("ip", "link", "del", l).CombinedOutput()
		if _, statErr := os.Stat("/sys/class/net/" + l); err != nil && statErr == nil {
			add(fmt.Errorf("ip link del %s: %w: %s", l, err, out)) // not gone meanwhile
		}
	}
	if _, err := os.Stat("/sys/class/net/" + h.Bridge); err == nil {
		if out, err := exec.Command("ip", "link", "del", h.Bridge).CombinedOutput(); err != nil {
			add(fmt.Errorf("ip link del %s: %w: %s", h.Bridge, err, out))
		}
	}
	// A veth pair goes with its namespace, but the kernel frees a namespace
	// in the background: delete the host's end now, with its route.
	for _, l := range h.Links {
		if _, err := os.Stat("/sys/class/net/" + l); err == nil {
			if out, err := exec.Command("ip", "link", "del", l).CombinedOutput(); err != nil {
				if _, statErr := os.Stat("/sys/class/net/" + l); statErr == nil {
					add(fmt.Errorf("ip link del %s: %w: %s", l, err, out))
				}
			}
		}
	}
	add(restoreIPTables(h))
	if h.NFTable != "" {
		add(deleteNFTable(h.NFTable))
	}
	add(removeCgroup(h.Cgroup))
	for name, v := range h.Sysctls {
		if now, err := os.ReadFile("/proc/sys/" + name); err == nil && strings.TrimSpace(string(now)) != v {
			add(writeSysctl(name, v))
		}
	}
	for dir := range h.Entries {
		for _, e := range newEntries(h, dir) {
			add(os.RemoveAll(filepath.Join(dir, e)))
		}
	}
	for _, p := range h.Absent {
		add(os.RemoveAll(p))
	}
	if keepLogs {
		entries, _ := os.ReadDir(h.Dir)
		for _, e := range entries {
			if e.Name() != "logs" {
				add(os.RemoveAll(filepath.Join(h.Dir, e.Name())))
			}
		}
	} else {
		add(os.RemoveAll(h.Dir))
	}
	add(checkHost(h))
	return errors.Join(errs...)
}

// checkHost reports what the node left on the host.
func checkHost(h *hostState) error {
	var errs []error
	if pids := cgroupPids(h.Cgroup); len(pids) > 0 {
		errs = append(errs, fmt.Errorf("processes left: %v", pids))
	}
	if ms, _ := mountsUnder(h.Dir); len(ms) > 0 {
		errs = append(errs, fmt.Errorf("mounts left: %v", ms))
	}
	if _, err := os.Stat("/sys/class/net/" + h.Bridge); err == nil {
		errs = append(errs, fmt.Errorf("bridge %s left", h.Bridge))
	}
	if l := bridgePorts(h.Bridge); len(l) > 0 {
		errs = append(errs, fmt.Errorf("interfaces left on bridge %s: %v", h.Bridge, l))
	}
	for _, l := range h.Links {
		if _, err := os.Stat("/sys/class/net/" + l); err == nil {
			errs = append(errs, fmt.Errorf("link %s left", l))
		}
	}
	hs, _ := cgroupHierarchies()
	for _, hier := range hs {
		if _, err := os.Stat(filepath.Join(hier, h.Cgroup)); err == nil {
			errs = append(errs, fmt.Errorf("cgroup %s left", filepath.Join(hier, h.Cgroup)))
		}
	}
	for name, v := range h.Sysctls {
		if now, err := os.ReadFile("/proc/sys/" + name); err == nil && strings.TrimSpace(string(now)) != v {
			errs = append(errs, fmt.Errorf("sysctl %s is %s, was %s", name, strings.TrimSpace(string(now)), v))
		}
	}
	for dir := range h.Entries {
		if e := newEntries(h, dir); len(e) > 0 {
			errs = append(errs, fmt.Errorf("left in %s: %v", dir, e))
		}
	}
	for _, p := range h.Absent {
		if _, err := os.Stat(p); err == nil {
			errs = append(errs, fmt.Errorf("%s left", p))
		}
	}
	errs = append(errs, checkIPTables(h))
	if h.NFTable != "" && nftTableExists(h.NFTable) {
		errs = append(errs, fmt.Errorf("nftables table inet %s left", h.NFTable))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("the node left things behind: %w", err)
	}
	return nil
}

// newEntries lists the entries of dir that h did not record: all of them
// when dir did not exist.
func newEntries(h *hostState, dir string) []string {
	before, ok := h.Entries[dir]
	if !ok && !slices.Contains(h.Absent, dir) {
		return nil
	}
	entries, _ := os.ReadDir(dir)
	var added []string
	for _, e := range entries {
		if !slices.Contains(before, e.Name()) {
			added = append(added, e.Name())
		}
	}
	return added
}
