// Command spikehunt-operator runs the operator's controllers in one
// controller-runtime manager: it samples nodes for bait Captures, widens
// them on fleet alerts and indexes what the agents upload (DESIGN.md §7).
//
// With --leader-elect, several replicas may run and one acts: the others
// wait on the Lease named by leaderElectionID and take over when it is not
// renewed. The process exits when it loses the lease, as controller-runtime
// requires.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	ctrlconfig "sigs.k8s.io/controller-runtime/pkg/client/config"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	capturev1alpha1 "github.com/spikehunt/spikehunt/operator/api/v1alpha1"
)

// leaderElectionID names the Lease the replicas compete for.
const leaderElectionID = "operator.spikehunt.io"

// options are the operator's command-line settings.
type options struct {
	metricsAddr             string
	probeAddr               string
	leaderElect             bool
	leaderElectionNamespace string
	zap                     zap.Options
}

func parseFlags(args []string) (options, error) {
	var o options
	fs := flag.NewFlagSet("spikehunt-operator", flag.ContinueOnError)
	fs.StringVar(&o.metricsAddr, "metrics-bind-address", ":8080", "address of the Prometheus /metrics endpoint; \"0\" turns it off")
	fs.StringVar(&o.probeAddr, "health-probe-bind-address", ":8081", "address of the /healthz and /readyz probes")
	fs.BoolVar(&o.leaderElect, "leader-elect", false, "compete for the Lease "+leaderElectionID+" so that one replica acts; run every replica with it")
	fs.StringVar(&o.leaderElectionNamespace, "leader-election-namespace", "", "namespace of the Lease (default: the pod's own namespace)")
	ctrlconfig.RegisterFlags(fs) // --kubeconfig, for a run outside the cluster
	o.zap.BindFlags(fs)
	if err := fs.Parse(args); err != nil {
		return options{}, err
	}
	if fs.NArg() > 0 {
		return options{}, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	return o, nil
}

// newScheme returns the types the operator reads and writes.
func newScheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		return nil, err
	}
	if err := capturev1alpha1.AddToScheme(s); err != nil {
		return nil, err
	}
	return s, nil
}

// newManager builds the manager with its probes and every controller.
func newManager(cfg *rest.Config, o options) (ctrl.Manager, error) {
	s, err := newScheme()
	if err != nil {
		return nil, fmt.Errorf("scheme: %w", err)
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                  s,
		Metrics:                 metricsserver.Options{BindAddress: o.metricsAddr},
		HealthProbeBindAddress:  o.probeAddr,
		LeaderElection:          o.leaderElect,
		LeaderElectionID:        leaderElectionID,
		LeaderElectionNamespace: o.leaderElectionNamespace,
		// The process exits right after losing or giving up the lease, so
		// releasing it on shutdown lets a standby take over at once
		// instead of after the lease duration.
		LeaderElectionReleaseOnCancel: true,
	})
	if err != nil {
		return nil, fmt.Errorf("manager: %w", err)
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return nil, fmt.Errorf("healthz check: %w", err)
	}
	if err := mgr.AddReadyzCheck("ping", healthz.Ping); err != nil {
		return nil, fmt.Errorf("readyz check: %w", err)
	}
	if err := registerControllers(mgr); err != nil {
		return nil, err
	}
	return mgr, nil
}

// registerControllers adds the operator's reconcilers to mgr. This is the
// one place a controller is registered: each lives in
// operator/internal/controller, one per concern, and is built here with its
// policy function and clock, e.g.
//
//	if err := (&controller.SamplingReconciler{...}).SetupWithManager(mgr); err != nil {
//		return fmt.Errorf("sampling controller: %w", err)
//	}
func registerControllers(mgr ctrl.Manager) error {
	_ = mgr // none yet (issue 7)
	return nil
}

func run(ctx context.Context, args []string) error {
	o, err := parseFlags(args)
	if err != nil {
		return err
	}
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&o.zap)))
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("kubernetes config (in a pod, or --kubeconfig / $KUBECONFIG): %w", err)
	}
	mgr, err := newManager(cfg, o)
	if err != nil {
		return err
	}
	ctrl.Log.WithName("setup").Info("starting", "leaderElect", o.leaderElect, "metrics", o.metricsAddr, "probes", o.probeAddr)
	return mgr.Start(ctx)
}

func main() {
	if err := run(ctrl.SetupSignalHandler(), os.Args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(2)
		}
		fmt.Fprintln(os.Stderr, "spikehunt-operator:", err)
		os.Exit(1)
	}
}
