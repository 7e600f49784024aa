package cluster

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// hostState is what Start changes outside Dir, recorded before the first
// change so that teardown can put the host back, also after a test binary
// that died without Stop (the next Start reads Dir/host-state.json).
type hostState struct {
	Dir      string              `json:"dir"`
	Cgroup   string              `json:"cgroup"` // "/spikehunt-<pid>", in every cgroup v1 hierarchy
	Bridge   string              `json:"bridge"`
	PodCIDR  string              `json:"podCIDR"`
	Sysctls  map[string]string   `json:"sysctls"`  // /proc/sys path -> value before
	IPTables map[string]string   `json:"iptables"` // "iptables"/"ip6tables" -> iptables-save before
	Absent   []string            `json:"absent"`   // host paths the runtime may create that did not exist
	Entries  map[string][]string `json:"entries"`  // host folders the runtime adds to -> their entries before
	// NFTable is the nftables table (family inet) the NetworkPolicy engine
	// writes, when the node runs one; Start refuses a host that has it.
	NFTable string `json:"nftable,omitempty"`
	// Links are the host's ends of the veth pairs to the network
	// namespaces of Options.Nodes (the namespaces themselves are under
	// /run/netns, with the pods').
	Links []string `json:"links,omitempty"`
}

// sysctlsTouched are the kernel settings the node changes: ip_forward for
// pod traffic, and those the kubelet sets at start (setupKernelTunables)
// and kube-proxy may set.
var sysctlsTouched = []string{
	"net/ipv4/ip_forward",
	"net/ipv4/conf/all/route_localnet",
	"net/bridge/bridge-nf-call-iptables",
	"net/netfilter/nf_conntrack_max",
	"net/netfilter/nf_conntrack_tcp_be_liberal",
	"vm/overcommit_memory",
	"vm/panic_on_oom",
	"kernel/panic",
	"kernel/panic_on_oops",
	"kernel/keys/root_maxkeys",
	"kernel/keys/root_maxbytes",
}

// hostPathsTouched are the host folders containerd 1.6, the CNI plugins and
// the kubelet write to whatever their configuration says: network
// namespaces, shim sockets, libcni's cache and the kubelet's log symlinks.
var hostPathsTouched = []string{"/run/netns", "/run/containerd", "/run/containerd/s", "/var/lib/cni", "/var/log/containers", "/var/log/pods"}

func recordHostState(dir, cgroup, bridge, podCIDR, nftable string) (*hostState, error) {
	h := &hostState{Dir: dir, Cgroup: cgroup, Bridge: bridge, PodCIDR: podCIDR, NFTable: nftable,
		Sysctls: map[string]string{}, IPTables: map[string]string{}, Entries: map[string][]string{}}
	if nftable != "" && nftTableExists(nftable) {
		return nil, fmt.Errorf("nftables table inet %s is already on the host: another NetworkPolicy engine runs (nft delete table inet %s if it is a leftover)", nftable, nftable)
	}
	for _, s := range sysctlsTouched {
		if b, err := os.ReadFile("/proc/sys/" + s); err == nil {
			h.Sysctls[s] = strings.TrimSpace(string(b))
		}
	}
	for _, bin := range []string{"iptables", "ip6tables"} {
		out, err := exec.Command(bin + "-save").Output()
		if err != nil {
			return nil, fmt.Errorf("%s-save: %w (install iptables: deps/install.sh kube-node)", bin, err)
		}
		h.IPTables[bin] = string(out)
	}
	for _, p := range hostPathsTouched {
		entries, err := os.ReadDir(p)
		switch {
		case errors.Is(err, os.ErrNotExist):
			h.Absent = append(h.Absent, p)
		case err != nil:
			return nil, err
		default:
			names := []string{}
			for _, e := range entries {
				names = append(names, e.Name())
			}
			h.Entries[p] = names
		}
	}
	b, err := json.MarshalIndent(h, "", "  ")
	if err != nil {
		return nil, err
	}
	return h, os.WriteFile(filepath.Join(dir, "host-state.json"), b, 0o600)
}

func loadHostState(dir string) (*hostState, error) {
	b, err := os.ReadFile(filepath.Join(dir, "host-state.json"))
	if err != nil {
		return nil, err
	}
	var h hostState
	return &h, json.Unmarshal(b, &h)
}

func writeSysctl(name, value string) error {
	return os.WriteFile("/proc/sys/"+name, []byte(value), 0o644)
}

// cgroupHierarchies are the mount points of the cgroup v1 hierarchies
// (cpu, memory, pids, name=systemd, ...). The empty cgroup2 at
// /sys/fs/cgroup/unified holds no controller and is left alone.
func cgroupHierarchies() ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var dirs []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// mountinfo: ... mountpoint ... - fstype source options
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if !ok {
			continue
		}
		if fs := strings.Fields(post); len(fs) > 0 && fs[0] == "cgroup" {
			if f := strings.Fields(pre); len(f) > 4 {
				dirs = append(dirs, unescapeMount(f[4]))
			}
		}
	}
	return dirs, sc.Err()
}

// makeCgroupRoot creates cgroup in every v1 hierarchy: the kubelet refuses
// a cgroupRoot that does not exist, and puts every pod under it, so that
// teardown finds each process the node started in one subtree. cpuset
// starts a new cgroup with no CPUs and no memory nodes: copy the parent's.
func makeCgroupRoot(cgroup string) error {
	hs, err := cgroupHierarchies()
	if err != nil {
		return fmt.Errorf("list cgroup hierarchies: %w", err)
	}
	if !slices.Contains(hs, "/sys/fs/cgroup/pids") || !slices.Contains(hs, "/sys/fs/cgroup/memory") {
		return fmt.Errorf("the cgroup v1 pids and memory hierarchies are not mounted at /sys/fs/cgroup (found %v): the kubelet needs them", hs)
	}
	for _, h := range hs {
		for _, d := range []string{filepath.Join(h, cgroup), filepath.Join(h, cgroup, "runtime")} {
			if err := os.MkdirAll(d, 0o755); err != nil {
				return fmt.Errorf("create cgroup %s: %w", d, err)
			}
			if filepath.Base(h) == "cpuset" {
				for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
					v, err := os.ReadFile(filepath.Join(filepath.Dir(d), f))
					if err == nil {
						err = os.WriteFile(filepath.Join(d, f), v, 0o644)
					}
					if err != nil {
						return fmt.Errorf("cgroup %s: copy %s from its parent: %w", d, f, err)
					}
				}
			}
		}
	}
	return nil
}

// joinRuntimeCgroup moves pid into cgroup/runtime in every hierarchy: the
// shims containerd starts inherit it, and they outlive containerd.
func joinRuntimeCgroup(cgroup string, pid int) error {
	hs, err := cgroupHierarchies()
	if err != nil {
		return err
	}
	for _, h := range hs {
		if err := os.WriteFile(filepath.Join(h, cgroup, "runtime", "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644); err != nil {
			return fmt.Errorf("move pid %d into %s: %w", pid, filepath.Join(h, cgroup, "runtime"), err)
		}
	}
	return nil
}

// cgroupPids lists every process in cgroup's subtree of the pids hierarchy.
func cgroupPids(cgroup string) []int {
	var pids []int
	_ = filepath.WalkDir(filepath.Join("/sys/fs/cgroup/pids", cgroup), func(p string, d os.DirEntry, err error) error {
		if err != nil || d.Name() != "cgroup.procs" {
			return nil
		}
		b, _ := os.ReadFile(p)
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil {
				pids = append(pids, pid)
			}
		}
		return nil
	})
	return pids
}

// killCgroup SIGKILLs every process of cgroup's subtree until none is left.
func killCgroup(cgroup string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		pids := cgroupPids(cgroup)
		if len(pids) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("processes %v of cgroup %s survived SIGKILL for %s", pids, cgroup, timeout)
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// removeCgroup removes cgroup's subtree in every hierarchy, deepest first.
func removeCgroup(cgroup string) error {
	hs, err := cgroupHierarchies()
	if err != nil {
		return err
	}
	var errs []error
	for _, h := range hs {
		root := filepath.Join(h, cgroup)
		var dirs []string
		_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		sort.Slice(dirs, func(i, j int) bool { return len(dirs[i]) > len(dirs[j]) })
		for _, d := range dirs {
			// An emptied cgroup can stay busy for a moment while the kernel
			// finishes the last exits.
			var err error
			for range 50 {
				if err = syscall.Rmdir(d); err == nil || errors.Is(err, syscall.ENOENT) {
					err = nil
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("remove cgroup %s: %w", d, err))
			}
		}
	}
	return errors.Join(errs...)
}

// mountsUnder lists the mount points at or under any of roots, deepest
// first.
func mountsUnder(roots ...string) ([]string, error) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	var ms []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		mp := unescapeMount(f[4])
		for _, r := range roots {
			if mp == r || strings.HasPrefix(mp, r+"/") {
				ms = append(ms, mp)
				break
			}
		}
	}
	sort.Slice(ms, func(i, j int) bool { return len(ms[i]) > len(ms[j]) })
	return ms, nil
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func unmountAll(roots ...string) error {
	var errs []error
	// Mounts can stack on one point: repeat until none is left.
	for range 5 {
		ms, err := mountsUnder(roots...)
		if err != nil {
			return err
		}
		if len(ms) == 0 {
			return nil
		}
		errs = errs[:0]
		for _, m := range ms {
			if err := syscall.Unmount(m, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOENT) {
				errs = append(errs, fmt.Errorf("unmount %s: %w", m, err))
			}
		}
	}
	if ms, _ := mountsUnder(roots...); len(ms) > 0 {
		errs = append(errs, fmt.Errorf("still mounted: %v", ms))
	}
	return errors.Join(errs...)
}

// iptablesRestoreScript returns the iptables-restore --noflush input that
// removes the node's rules from after, given the host's rules before: the
// rules the node added to chains that existed are deleted one by one, and
// the chains it created are flushed and deleted. The machine is shared, and
// another program (buildah running a step in a netns, say) may add rules
// meanwhile: a new rule is the node's only when ours says so, and a new
// chain when it is a KUBE- chain (the kubelet's and kube-proxy's) or a CNI-
// chain that only the node's rules fill and jump to.
func iptablesRestoreScript(before, after string, ours func(rule string) bool) string {
	b, a := parseIPTablesSave(before), parseIPTablesSave(after)
	var out strings.Builder
	tables := make([]string, 0, len(a))
	for t := range a {
		tables = append(tables, t)
	}
	sort.Strings(tables)
	for _, t := range tables {
		at, bt := a[t], b[t]
		left := map[string]int{}
		if bt != nil {
			for _, r := range bt.rules {
				left[r]++
			}
		}
		var added []string
		for _, r := range at.rules {
			if left[r] > 0 {
				left[r]--
				continue
			}
			added = append(added, r)
		}
		var newChains []string
		for _, c := range at.chains {
			if bt != nil && slices.Contains(bt.chains, c) {
				continue
			}
			mine := strings.HasPrefix(c, "KUBE-")
			if !mine && strings.HasPrefix(c, "CNI-") {
				mine = true
				for _, r := range added {
					if (ruleChain(r) == c || jumpsTo(r, c)) && !ours(r) {
						mine = false
					}
				}
			}
			if mine {
				newChains = append(newChains, c)
			}
		}
		var dels []string
		for _, r := range added {
			if slices.Contains(newChains, ruleChain(r)) {
				continue // flushed with its chain
			}
			if ours(r) || slices.ContainsFunc(newChains, func(c string) bool { return jumpsTo(r, c) }) {
				dels = append(dels, "-D"+strings.TrimPrefix(r, "-A"))
			}
		}
		if len(dels) == 0 && len(newChains) == 0 {
			continue
		}
		fmt.Fprintf(&out, "*%s\n", t)
		for _, d := range dels {
			fmt.Fprintln(&out, d)
		}
		for _, c := range newChains {
			fmt.Fprintf(&out, "-F %s\n", c)
		}
		for _, c := range newChains {
			fmt.Fprintf(&out, "-X %s\n", c)
		}
		fmt.Fprintln(&out, "COMMIT")
	}
	return out.String()
}

// ruleChain is the chain of an "-A CHAIN ..." line.
func ruleChain(rule string) string {
	if f := strings.Fields(rule); len(f) > 1 {
		return f[1]
	}
	return ""
}

// jumpsTo reports whether rule jumps or goes to chain.
func jumpsTo(rule, chain string) bool {
	return strings.Contains(rule+" ", " -j "+chain+" ") || strings.Contains(rule+" ", " -g "+chain+" ")
}

// oursFunc recognizes the node's rules in chains it shares with the host:
// they name a KUBE- chain, the CNI network "spikehunt" (the bridge and
// portmap plugins' comments), the pod network or the bridge.
// serviceRangeMark names the rules of rejectUntranslatedServices, so that
// Stop knows them for the node's.
const serviceRangeMark = "spikehunt-cluster: untranslated ClusterIP"

// rejectUntranslatedServices rejects, in the filter table's OUTPUT and
// FORWARD chains, packets to the Service range. kube-proxy's DNAT (nat
// OUTPUT and PREROUTING) comes before them, so a packet to a ClusterIP it
// translated is by then addressed to a pod and passes; only one it has
// not translated (no rules yet, or no such Service) still carries a
// Service address, and is refused here ("no route to host") instead of
// leaving by the default route. A route could not do this: the host's own
// packets are routed before the DNAT.
func rejectUntranslatedServices(cidr string) error {
	for _, chain := range []string{"OUTPUT", "FORWARD"} {
		args := []string{"-w", "5", "-I", chain, "1", "-d", cidr, "-m", "comment", "--comment", serviceRangeMark,
			"-j", "REJECT", "--reject-with", "icmp-host-unreachable"}
		if out, err := exec.Command("iptables", args...).CombinedOutput(); err != nil {
			return fmt.Errorf("iptables %s: %w: %s", strings.Join(args, " "), err, out)
		}
	}
	return nil
}

func oursFunc(podCIDR, bridge string) func(string) bool {
	_, n, _ := net.ParseCIDR(podCIDR)
	cidr := ""
	if n != nil {
		cidr = n.String()
	}
	return func(r string) bool {
		if strings.Contains(r, "KUBE-") || strings.Contains(r, `name: \"spikehunt\"`) || strings.Contains(r, " "+bridge+" ") || strings.Contains(r, serviceRangeMark) {
			return true
		}
		if cidr != "" && strings.Contains(r, cidr) {
			return true
		}
		// The bridge plugin's masquerade rule names one pod's address.
		for _, f := range strings.Fields(r) {
			if ip, _, err := net.ParseCIDR(f); err == nil && n != nil && n.Contains(ip) {
				return true
			}
		}
		return false
	}
}

type ipTable struct {
	chains []string // user chains only
	rules  []string // "-A CHAIN ..." exactly as iptables-save printed them
}

func parseIPTablesSave(s string) map[string]*ipTable {
	tables := map[string]*ipTable{}
	var cur *ipTable
	for _, line := range strings.Split(s, "\n") {
		switch {
		case strings.HasPrefix(line, "*"):
			cur = &ipTable{}
			tables[strings.TrimPrefix(line, "*")] = cur
		case cur == nil:
		case strings.HasPrefix(line, ":"):
			// ":KUBE-SERVICES - [0:0]"; a built-in chain has a policy
			// (":INPUT ACCEPT [0:0]").
			if f := strings.Fields(line[1:]); len(f) > 1 && f[1] == "-" {
				cur.chains = append(cur.chains, f[0])
			}
		case strings.HasPrefix(line, "-A "):
			cur.rules = append(cur.rules, line)
		}
	}
	return tables
}

// restoreIPTables takes the host's rules back to what h recorded.
func restoreIPTables(h *hostState) error {
	var errs []error
	for _, bin := range []string{"iptables", "ip6tables"} {
		after, err := exec.Command(bin + "-save").Output()
		if err != nil {
			errs = append(errs, fmt.Errorf("%s-save: %w", bin, err))
			continue
		}
		script := iptablesRestoreScript(h.IPTables[bin], string(after), oursFunc(h.PodCIDR, h.Bridge))
		if script == "" {
			continue
		}
		cmd := exec.Command(bin+"-restore", "--noflush", "--wait")
		cmd.Stdin = strings.NewReader(script)
		if out, err := cmd.CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("%s-restore: %w: %s\ninput:\n%s", bin, err, bytes.TrimSpace(out), script))
		}
	}
	return errors.Join(errs...)
}

// checkIPTables reports the rules and chains still differing from h.
func checkIPTables(h *hostState) error {
	var errs []error
	for _, bin := range []string{"iptables", "ip6tables"} {
		after, err := exec.Command(bin + "-save").Output()
		if err != nil {
			errs = append(errs, fmt.Errorf("%s-save: %w", bin, err))
			continue
		}
		if script := iptablesRestoreScript(h.IPTables[bin], string(after), oursFunc(h.PodCIDR, h.Bridge)); script != "" {
			errs = append(errs, fmt.Errorf("%s rules left behind:\n%s", bin, script))
		}
	}
	return errors.Join(errs...)
}

// bridgePorts lists the interfaces attached to bridge (the pods' veths).
func bridgePorts(bridge string) []string {
	entries, _ := os.ReadDir(filepath.Join("/sys/class/net", bridge, "brif"))
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}
