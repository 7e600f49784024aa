// Package helm holds the tests of the Helm chart in spikehunt/: they render
// it with the helm binary (SPIKEHUNT_HELM, from `make deps`), apply the
// render with server-side dry-run to a real kube-apiserver (tests/testenv),
// check policies on it (privileges, resources, probes, secrets), run each
// component's binary on the command line the chart gives it, and keep the
// chart's copies of the CRDs, the dashboards and the gateway config
// byte-identical to their sources (make chart-sync).
//
// The package has no code of its own; nothing imports it.
package helm
