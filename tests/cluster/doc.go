// Package cluster runs a real Kubernetes for tests, one node or more: etcd,
// kube-apiserver, containerd with runc, kube-controller-manager,
// kube-scheduler, the kubelet, kube-proxy and CoreDNS, from the binaries
// `deps/install.sh kube-node` and `envtest` install. Pods really run, from
// OCI archives imported with Cluster.ImportImage (WriteImageArchive writes
// small single-layer ones). Options.Nodes adds nodes, each with its own
// containerd, kubelet and kube-proxy in network and mount namespaces of its
// own. Linux and root only. README.md says what runs, where its state and
// logs are, and how to debug it.
//
// Why one package: every part writes to or reads from the one record of
// what the cluster changed on the host (hostState: cgroups, mounts, links,
// iptables, network namespaces), which Stop and the next Start's clean-up
// undo, and the nodes' files come from one CA and one set of addresses.
// Split, the record and the CA would be exported for the rooms to share,
// and a test could then change the host behind the record's back.
//
// # Lifecycle hazards
//
//   - One cluster per host: the first node's kube-proxy iptables chains and
//     CNI bridge are host-wide. Start takes a host lock (/run/lock/spikehunt-cluster.lock)
//     and waits while another test binary's node runs.
//   - Shared starts the test binary's node on first use; StopShared, called
//     from TestMain, stops it and returns an error when the node left
//     anything on the host: fail the binary on it.
//   - Stop kills every process of the node, pods included, and takes the
//     host back to what Start found (mounts, network namespaces, bridge,
//     iptables rules, cgroups, sysctls, state folder). A test binary that
//     dies without Stop leaves its pods running: the components die with
//     it (Pdeathsig, so do not start a node from a goroutine locked to its
//     OS thread), and the next Start tears the rest down first.
//   - Tests share the node: each uses a namespace of its own.
//   - Pods reach the host at NodeIP, never at 127.0.0.1: a host service for
//     pods listens on NodeIP or 0.0.0.0.
package cluster
