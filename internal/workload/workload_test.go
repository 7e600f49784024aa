package workload

import "testing"

func TestFamilyDropsAPodsOwnSuffixAndNothingElse(t *testing.T) {
	for _, tc := range []struct{ metric, device, want string }{
		{"spikehunt.cgroup.cpu.throttled_time", "shop/checkout-7d9c8b6f5-x2k4q", "shop/checkout-7d9c8b6f5"},
		{"spikehunt.cgroup.cpu.usage", "shop/checkout-7d9c8b6f5-x2k4q/app", "shop/checkout-7d9c8b6f5/app"},
		{"spikehunt.cgroup.cpu.usage", "kube-system/kube-proxy-zx5wq", "kube-system/kube-proxy"},
		// A StatefulSet's pods keep their identity, and a suffix with a
		// vowel was not generated.
		{"spikehunt.cgroup.cpu.usage", "db/postgres-0", "db/postgres-0"},
		{"spikehunt.cgroup.cpu.usage", "shop/web-queue", "shop/web-queue"},
		{"spikehunt.cgroup.cpu.usage", "system.slice/backup.service", "system.slice/backup.service"},
		{"spikehunt.cgroup.cpu.usage", "system.slice/docker-abcde.scope", "system.slice/docker-abcde.scope"},
		{"spikehunt.cgroup.cpu.usage", "other", "other"},
		{"spikehunt.cgroup.cpu.usage", "/x-bcdfg", "/x-bcdfg"},
		// Only per-cgroup counters name workloads.
		{"spikehunt.interrupts", "ns/eth0-bcdfg", "ns/eth0-bcdfg"},
	} {
		if got := Family(tc.metric, tc.device); got != tc.want {
			t.Errorf("Family(%q, %q) = %q, want %q", tc.metric, tc.device, got, tc.want)
		}
	}
}
