package v1alpha1

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

func ptr[T any](v T) *T { return &v }

func dur(s string) *metav1.Duration {
	d, err := time.ParseDuration(s)
	if err != nil {
		panic(err)
	}
	return &metav1.Duration{Duration: d}
}

func validPolicy() *CapturePolicy {
	return &CapturePolicy{
		Spec: CapturePolicySpec{
			Service:  "checkout",
			Sampling: Sampling{Percent: ptr[int32](5)},
			Profile:  CaptureProfile{Backend: BackendPerf, Pre: dur("10s"), Post: dur("2s")},
			Triggers: &Triggers{
				Local:       &LocalTrigger{Latency: dur("1s")},
				FleetAlerts: &FleetAlertTrigger{PatternClasses: []PatternClass{PatternFleetRecurrent}, WidenBy: ptr[int32](2)},
			},
		},
	}
}

func validCapture() *Capture {
	return &Capture{
		Spec: CaptureSpec{
			NodeName:  "node-7",
			PolicyRef: PolicyReference{Name: "checkout"},
			ArmingID:  "checkout-node-7-e12",
			Epoch:     12,
			Reason:    ReasonBait,
			Profile:   CaptureProfile{Backend: BackendPerf, Pre: dur("10s"), Post: dur("2s")},
			Trigger:   &LocalTrigger{Service: "checkout", P99: dur("250ms")},
		},
	}
}

// rejected checks that err is the API server's refusal naming want.
func rejected(t *testing.T, err error, want string) {
	t.Helper()
	switch {
	case want == "" && err != nil:
		t.Fatalf("rejected: %v", err)
	case want == "":
	case err == nil:
		t.Fatalf("accepted; want a refusal mentioning %q", want)
	case !apierrors.IsInvalid(err):
		t.Fatalf("error %v is not Invalid; want a refusal mentioning %q", err, want)
	case !strings.Contains(err.Error(), want):
		t.Fatalf("error %q does not mention %q", err, want)
	}
}

func TestTheCRDsAreEstablishedWithTheirNamesAndColumns(t *testing.T) {
	_, c := apiServer(t)
	ctx := testContext(t)
	type served struct {
		Established, NamesAccepted bool
		ShortNames, Categories     []string
		Columns                    []string
		SelectableFields           []string
		StatusSubresource          bool
	}
	got := map[string]served{}
	for _, name := range []string{"capturepolicies.capture.spikehunt.io", "captures.capture.spikehunt.io"} {
		var crd apiextensionsv1.CustomResourceDefinition
		if err := c.Get(ctx, client.ObjectKey{Name: name}, &crd); err != nil {
			t.Fatalf("get CRD %s: %v", name, err)
		}
		var s served
		for _, cond := range crd.Status.Conditions {
			switch cond.Type {
			case apiextensionsv1.Established:
				s.Established = cond.Status == apiextensionsv1.ConditionTrue
			case apiextensionsv1.NamesAccepted:
				s.NamesAccepted = cond.Status == apiextensionsv1.ConditionTrue
			}
		}
		s.ShortNames, s.Categories = crd.Status.AcceptedNames.ShortNames, crd.Status.AcceptedNames.Categories
		if len(crd.Spec.Versions) != 1 {
			t.Fatalf("%s serves %d versions, want v1alpha1 only", name, len(crd.Spec.Versions))
		}
		v := crd.Spec.Versions[0]
		for _, col := range v.AdditionalPrinterColumns {
			if col.Priority == 0 {
				s.Columns = append(s.Columns, col.Name)
			}
		}
		for _, f := range v.SelectableFields {
			s.SelectableFields = append(s.SelectableFields, f.JSONPath)
		}
		s.StatusSubresource = v.Subresources != nil && v.Subresources.Status != nil
		got[name] = s
	}
	want := map[string]served{
		"capturepolicies.capture.spikehunt.io": {
			Established: true, NamesAccepted: true, ShortNames: []string{"cpol"}, Categories: []string{"spikehunt"},
			Columns: []string{"Service", "Sampled", "Epoch", "Age"}, StatusSubresource: true,
		},
		"captures.capture.spikehunt.io": {
			Established: true, NamesAccepted: true, ShortNames: []string{"cap"}, Categories: []string{"spikehunt"},
			Columns: []string{"Node", "Phase", "Backend", "Fired", "Age"}, SelectableFields: []string{".spec.nodeName"},
			StatusSubresource: true,
		},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("CRDs as served (-want +got):\n%s", diff)
	}
}

func TestTheSamplesAreAccepted(t *testing.T) {
	_, c := apiServer(t)
	ns := namespace(t, c)
	ctx := testContext(t)
	s, err := testScheme()
	if err != nil {
		t.Fatal(err)
	}
	// Strict: a sample with a field the types do not have fails here,
	// before the API server would silently drop it.
	decoder := serializer.NewCodecFactory(s, serializer.EnableStrict).UniversalDeserializer()
	files, err := filepath.Glob(filepath.Join("..", "..", "config", "samples", "capture_*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 2 {
		t.Fatalf("samples %v: want one CapturePolicy and one Capture", files)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			obj, _, err := decoder.Decode(data, nil, nil)
			if err != nil {
				t.Fatalf("decode %s: %v", f, err)
			}
			o := obj.(client.Object)
			o.SetNamespace(ns)
			if err := c.Create(ctx, o); err != nil {
				t.Fatalf("create %s: %v", f, err)
			}
		})
	}
}

func TestAMinimalPolicyGetsItsDefaults(t *testing.T) {
	_, c := apiServer(t)
	ns := namespace(t, c)
	ctx := testContext(t)
	p := &CapturePolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "minimal", Namespace: ns},
		Spec: CapturePolicySpec{
			Service:  "checkout",
			Sampling: Sampling{Count: ptr[int32](0)},
			Profile:  CaptureProfile{Backend: BackendFtrace},
			Triggers: &Triggers{FleetAlerts: &FleetAlertTrigger{}},
		},
	}
	if err := c.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	var got CapturePolicy
	if err := c.Get(ctx, client.ObjectKeyFromObject(p), &got); err != nil {
		t.Fatal(err)
	}
	want := CapturePolicySpec{
		Service: "checkout",
		Sampling: Sampling{Count: ptr[int32](0), HWClassLabel: DefaultHWClassLabel,
			RotationPeriod: dur("1h")},
		Profile:  CaptureProfile{Backend: BackendFtrace, Pre: dur("10s"), Post: dur("2s")},
		Triggers: &Triggers{FleetAlerts: &FleetAlertTrigger{WidenBy: ptr[int32](1)}},
		Budgets: Budgets{MaxConcurrentPerFleet: 20, PerNodeCooldown: dur("30m"),
			MaxPerPatternPerHour: 6},
		Retention: Retention{TTL: dur("168h")},
	}
	if diff := cmp.Diff(want, got.Spec); diff != "" {
		t.Errorf("spec as stored (-want +got):\n%s", diff)
	}
}

func TestCapturePolicyValidation(t *testing.T) {
	_, c := apiServer(t)
	ns := namespace(t, c)
	tests := []struct {
		name   string
		change func(*CapturePolicy)
		want   string // in the refusal; "" for accepted
	}{
		{"a valid policy is accepted", func(*CapturePolicy) {}, ""},
		{"a bpftrace policy naming an allow-listed script is accepted", func(p *CapturePolicy) {
			p.Spec.Profile.Backend, p.Spec.Profile.Script = BackendBpftrace, "tcp_retransmits.bt"
		}, ""},
		{"a count of nodes instead of a percent is accepted", func(p *CapturePolicy) {
			p.Spec.Sampling = Sampling{Count: ptr[int32](40)}
		}, ""},
		{"an unknown backend is rejected", func(p *CapturePolicy) {
			p.Spec.Profile.Backend = "dtrace"
		}, `spec.profile.backend: Unsupported value: "dtrace"`},
		{"a negative pre-window is rejected", func(p *CapturePolicy) {
			p.Spec.Profile.Pre = dur("-1s")
		}, "pre must be between 0s and 10m"},
		{"a negative post-window is rejected", func(p *CapturePolicy) {
			p.Spec.Profile.Post = dur("-500ms")
		}, "post must be between 0s and 10m"},
		{"a pre-window over ten minutes is rejected", func(p *CapturePolicy) {
			p.Spec.Profile.Pre = dur("11m")
		}, "pre must be between 0s and 10m"},
		{"sampling over 100 percent is rejected", func(p *CapturePolicy) {
			p.Spec.Sampling.Percent = ptr[int32](101)
		}, "spec.sampling.percent: Invalid value: 101: spec.sampling.percent in body should be less than or equal to 100"},
		{"sampling 0 percent is rejected", func(p *CapturePolicy) {
			p.Spec.Sampling.Percent = ptr[int32](0)
		}, "spec.sampling.percent in body should be greater than or equal to 1"},
		{"both a percent and a count are rejected", func(p *CapturePolicy) {
			p.Spec.Sampling.Count = ptr[int32](10)
		}, "set exactly one of sampling.percent and sampling.count"},
		{"neither a percent nor a count is rejected", func(p *CapturePolicy) {
			p.Spec.Sampling.Percent = nil
		}, "set exactly one of sampling.percent and sampling.count"},
		{"a script that is a path out of the folder is rejected", func(p *CapturePolicy) {
			p.Spec.Profile.Backend, p.Spec.Profile.Script = BackendBpftrace, "../x"
		}, "spec.profile.script in body should match"},
		{"a script name with '..' inside is rejected", func(p *CapturePolicy) {
			p.Spec.Profile.Backend, p.Spec.Profile.Script = BackendBpftrace, "x..bt"
		}, "script must not contain '..'"},
		{"an upper-case script name is rejected", func(p *CapturePolicy) {
			p.Spec.Profile.Backend, p.Spec.Profile.Script = BackendBpftrace, "TcpLife.bt"
		}, "spec.profile.script in body should match"},
		{"a script with a perf backend is rejected", func(p *CapturePolicy) {
			p.Spec.Profile.Script = "tcplife.bt"
		}, "script is only for the bpftrace backend"},
		{"the bpftrace backend without a script is rejected", func(p *CapturePolicy) {
			p.Spec.Profile.Backend = BackendBpftrace
		}, "the bpftrace backend needs script"},
		{"a profile name with a slash is rejected", func(p *CapturePolicy) {
			p.Spec.Profile.Profile = "x/y"
		}, "spec.profile.profile in body should match"},
		{"a ring under 64 KiB is rejected", func(p *CapturePolicy) {
			p.Spec.Profile.RingKB = ptr[int32](32)
		}, "spec.profile.ringKB in body should be greater than or equal to 64"},
		{"a ring over 1 GiB per CPU is rejected", func(p *CapturePolicy) {
			p.Spec.Profile.RingKB = ptr[int32](1<<20 + 1)
		}, "spec.profile.ringKB in body should be less than or equal to 1048576"},
		{"a nice level over 19 is rejected", func(p *CapturePolicy) {
			p.Spec.Profile.Overhead = &OverheadLimits{Nice: ptr[int32](20)}
		}, "spec.profile.overhead.nice in body should be less than or equal to 19"},
		{"an unknown IO class is rejected", func(p *CapturePolicy) {
			p.Spec.Profile.Overhead = &OverheadLimits{IOClass: "realtime"}
		}, `Unsupported value: "realtime"`},
		{"a rotation period under a minute is rejected", func(p *CapturePolicy) {
			p.Spec.Sampling.RotationPeriod = dur("30s")
		}, "rotationPeriod must be at least 1m"},
		{"a hardware-class label that is not a label key is rejected", func(p *CapturePolicy) {
			p.Spec.Sampling.HWClassLabel = "hw class!"
		}, "spec.sampling.hwClassLabel in body should match"},
		{"a local trigger without a threshold is rejected", func(p *CapturePolicy) {
			p.Spec.Triggers.Local = &LocalTrigger{Endpoint: "/pay"}
		}, "a local trigger needs latency or p99"},
		{"a negative trigger cooldown is rejected", func(p *CapturePolicy) {
			p.Spec.Triggers.Local.Cooldown = dur("-1m")
		}, "cooldown must not be negative"},
		{"a zero latency threshold is rejected", func(p *CapturePolicy) {
			p.Spec.Triggers.Local.Latency = dur("0s")
		}, "latency must be positive"},
		{"an unknown pattern class is rejected", func(p *CapturePolicy) {
			p.Spec.Triggers.FleetAlerts.PatternClasses = []PatternClass{"hw-class-skewed"}
		}, `Unsupported value: "hw-class-skewed"`},
		{"a negative widening is rejected", func(p *CapturePolicy) {
			p.Spec.Triggers.FleetAlerts.WidenBy = ptr[int32](-1)
		}, "spec.triggers.fleetAlerts.widenBy in body should be greater than or equal to 0"},
		{"a fleet budget of zero captures is rejected", func(p *CapturePolicy) {
			p.Spec.Budgets.MaxConcurrentPerFleet = -1
		}, "spec.budgets.maxConcurrentPerFleet in body should be greater than or equal to 1"},
		{"a negative per-node cooldown is rejected", func(p *CapturePolicy) {
			p.Spec.Budgets.PerNodeCooldown = dur("-5m")
		}, "perNodeCooldown must not be negative"},
		{"a retention under an hour is rejected", func(p *CapturePolicy) {
			p.Spec.Retention.TTL = dur("10m")
		}, "retention.ttl must be at least 1h"},
		{"an empty service is rejected", func(p *CapturePolicy) {
			p.Spec.Service = ""
		}, "spec.service in body should be at least 1 chars long"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := validPolicy()
			p.Name, p.Namespace = fmt.Sprintf("policy-%d", i), ns
			tt.change(p)
			rejected(t, c.Create(testContext(t), p), tt.want)
		})
	}
}

func TestADurationThatDoesNotParseIsRejected(t *testing.T) {
	_, c := apiServer(t)
	ns := namespace(t, c)
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": GroupVersion.String(),
		"kind":       "CapturePolicy",
		"metadata":   map[string]any{"name": "soon", "namespace": ns},
		"spec": map[string]any{
			"service":  "checkout",
			"sampling": map[string]any{"percent": int64(5)},
			"profile":  map[string]any{"backend": "perf", "pre": "soon"},
		},
	}}
	// The API server cannot read "soon" as a duration for the rule, and
	// refuses the object with the rule's message.
	rejected(t, c.Create(testContext(t), u), "spec.profile.pre: Invalid value")
}

func TestCaptureValidation(t *testing.T) {
	_, c := apiServer(t)
	ns := namespace(t, c)
	tests := []struct {
		name   string
		change func(*Capture)
		want   string
	}{
		{"a valid capture is accepted", func(*Capture) {}, ""},
		{"a capture armed by an alert with its alert and pattern is accepted", func(c *Capture) {
			c.Spec.Reason, c.Spec.AlertID, c.Spec.PatternID = ReasonAlert, "grafana:8f14e45fceea167a", "e4da3b7fbbce2345"
		}, ""},
		{"a capture fired only remotely, without a trigger, is accepted", func(c *Capture) {
			c.Spec.Trigger = nil
		}, ""},
		{"a capture without a node is rejected", func(c *Capture) {
			c.Spec.NodeName = ""
		}, "spec.nodeName in body should be at least 1 chars long"},
		{"an unknown backend is rejected", func(c *Capture) {
			c.Spec.Profile.Backend = "systemtap"
		}, `spec.profile.backend: Unsupported value: "systemtap"`},
		{"a negative pre-window is rejected", func(c *Capture) {
			c.Spec.Profile.Pre = dur("-10s")
		}, "pre must be between 0s and 10m"},
		{"a negative post-window is rejected", func(c *Capture) {
			c.Spec.Profile.Post = dur("-1ns")
		}, "post must be between 0s and 10m"},
		{"a script that is a path out of the folder is rejected", func(c *Capture) {
			c.Spec.Profile.Backend, c.Spec.Profile.Script = BackendBpftrace, "../x"
		}, "spec.profile.script in body should match"},
		{"an upper-case script name is rejected", func(c *Capture) {
			c.Spec.Profile.Backend, c.Spec.Profile.Script = BackendBpftrace, "Biolatency"
		}, "spec.profile.script in body should match"},
		{"a script without the bpftrace backend is rejected", func(c *Capture) {
			c.Spec.Profile.Backend, c.Spec.Profile.Script = BackendFtrace, "biolatency.bt"
		}, "script is only for the bpftrace backend"},
		{"an arming id that could climb out of a folder is rejected", func(c *Capture) {
			c.Spec.ArmingID = "a..b"
		}, "armingID must not contain '..'"},
		{"an unknown reason is rejected", func(c *Capture) {
			c.Spec.Reason = "hunch"
		}, `spec.reason: Unsupported value: "hunch"`},
		{"a capture armed by an alert without its alert id is rejected", func(c *Capture) {
			c.Spec.Reason = ReasonAlert
		}, "a capture armed by an alert needs alertID"},
		{"bait with an alert id is rejected", func(c *Capture) {
			c.Spec.AlertID = "grafana:1"
		}, "alertID is only for captures armed by an alert"},
		{"a trigger without its service is rejected", func(c *Capture) {
			c.Spec.Trigger.Service = ""
		}, "a Capture's trigger names its service"},
		{"a negative epoch is rejected", func(c *Capture) {
			c.Spec.Epoch = -1
		}, "spec.epoch in body should be greater than or equal to 0"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			capture := validCapture()
			capture.Name, capture.Namespace = fmt.Sprintf("capture-%d", i), ns
			tt.change(capture)
			rejected(t, c.Create(testContext(t), capture), tt.want)
		})
	}
}

func TestACapturesSpecCannotChange(t *testing.T) {
	_, c := apiServer(t)
	ns := namespace(t, c)
	tests := []struct {
		name   string
		change func(*Capture)
		want   string
	}{
		{"a new label is accepted", func(c *Capture) { c.Labels = map[string]string{"team": "payments"} }, ""},
		{"moving it to another node is rejected", func(c *Capture) { c.Spec.NodeName = "node-8" }, "nodeName is immutable"},
		{"another arming id is rejected", func(c *Capture) { c.Spec.ArmingID = "other" }, "armingID is immutable"},
		{"another epoch is rejected", func(c *Capture) { c.Spec.Epoch++ }, "epoch is immutable"},
		{"another policy is rejected", func(c *Capture) { c.Spec.PolicyRef.Name = "other" }, "policyRef is immutable"},
		{"another profile is rejected", func(c *Capture) { c.Spec.Profile.Pre = dur("20s") }, "profile is immutable"},
		{"another trigger is rejected", func(c *Capture) { c.Spec.Trigger.P99 = dur("1s") }, "trigger is immutable"},
		{"dropping the trigger is rejected", func(c *Capture) { c.Spec.Trigger = nil }, "trigger is immutable"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := testContext(t)
			capture := validCapture()
			capture.Name, capture.Namespace = fmt.Sprintf("immutable-%d", i), ns
			if err := c.Create(ctx, capture); err != nil {
				t.Fatal(err)
			}
			tt.change(capture)
			rejected(t, c.Update(ctx, capture), tt.want)
		})
	}
}

func TestCapturePhasesOnlyMoveForward(t *testing.T) {
	_, c := apiServer(t)
	ns := namespace(t, c)
	tests := []struct {
		from, to CapturePhase
		want     string
	}{
		{PhasePending, PhaseArmed, ""},
		{PhaseArmed, PhaseFired, ""},
		{PhaseFired, PhaseUploaded, ""},
		{PhaseUploaded, PhaseIndexed, ""},
		{PhaseArmed, PhaseFailed, ""},
		{PhaseUploaded, PhaseFailed, ""},
		{PhasePending, PhaseExpired, ""},
		{PhaseArmed, PhaseExpired, ""},
		{PhaseFired, PhaseArmed, "phase moves only forward"},
		{PhaseUploaded, PhaseFired, "phase moves only forward"},
		{PhaseIndexed, PhaseUploaded, "phases Indexed, Failed and Expired are final"},
		{PhaseFailed, PhaseArmed, "phases Indexed, Failed and Expired are final"},
		{PhaseExpired, PhaseFailed, "phases Indexed, Failed and Expired are final"},
		{PhaseFired, PhaseExpired, "only a capture that has not fired expires"},
		{PhaseUploaded, PhaseExpired, "only a capture that has not fired expires"},
		{PhaseArmed, "Sleeping", `Unsupported value: "Sleeping"`},
	}
	for i, tt := range tests {
		verdict := "is allowed"
		if tt.want != "" {
			verdict = "is refused"
		}
		t.Run(fmt.Sprintf("%s to %s %s", tt.from, tt.to, verdict), func(t *testing.T) {
			ctx := testContext(t)
			capture := validCapture()
			capture.Name, capture.Namespace = fmt.Sprintf("phase-%d", i), ns
			if err := c.Create(ctx, capture); err != nil {
				t.Fatal(err)
			}
			capture.Status.Phase = tt.from
			if err := c.Status().Update(ctx, capture); err != nil {
				t.Fatalf("set phase %s: %v", tt.from, err)
			}
			capture.Status.Phase = tt.to
			rejected(t, c.Status().Update(ctx, capture), tt.want)
		})
	}
}

func TestCaptureStatusValidation(t *testing.T) {
	_, c := apiServer(t)
	ns := namespace(t, c)
	fired := time.Date(2026, 3, 14, 9, 26, 53, 589793000, time.UTC)
	micro := func(t time.Time) *metav1.MicroTime { return &metav1.MicroTime{Time: t} }
	tests := []struct {
		name   string
		status CaptureStatus
		want   string
	}{
		{"an indexed capture with its artifact and spikes is accepted", CaptureStatus{
			Phase: PhaseIndexed, FiredAt: micro(fired), FiredBy: FiredByP99,
			WindowStart: micro(fired.Add(-10 * time.Second)), WindowEnd: micro(fired.Add(2 * time.Second)),
			Artifact: &Artifact{URI: "s3://captures/captures/checkout-node-7-e12.json", Bytes: 1 << 20, LostEvents: 3,
				Checksum: strings.Repeat("ab", 32)},
			SpikeIDs: []string{"1f2e3d4c5b6a7988"},
		}, ""},
		{"a window that ends before it starts is rejected", CaptureStatus{
			Phase: PhaseFired, WindowStart: micro(fired), WindowEnd: micro(fired.Add(-time.Microsecond)),
		}, "windowStart must not be after windowEnd"},
		{"a checksum that is not a sha256 is rejected", CaptureStatus{
			Phase: PhaseUploaded, Artifact: &Artifact{URI: "s3://b/c.json", Checksum: "md5:abc"},
		}, "status.artifact.checksum: Invalid value: \"md5:abc\""},
		{"negative lost events are rejected", CaptureStatus{
			Phase: PhaseUploaded, Artifact: &Artifact{URI: "s3://b/c.json", LostEvents: -1, Checksum: strings.Repeat("0", 64)},
		}, "status.artifact.lostEvents: Invalid value: -1"},
		{"an unknown fire cause is rejected", CaptureStatus{Phase: PhaseFired, FiredBy: "luck"}, `Unsupported value: "luck"`},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := testContext(t)
			capture := validCapture()
			capture.Name, capture.Namespace = fmt.Sprintf("status-%d", i), ns
			if err := c.Create(ctx, capture); err != nil {
				t.Fatal(err)
			}
			capture.Status = tt.status
			err := c.Status().Update(ctx, capture)
			rejected(t, err, tt.want)
			if err != nil {
				return
			}
			var got Capture
			if err := c.Get(ctx, client.ObjectKeyFromObject(capture), &got); err != nil {
				t.Fatal(err)
			}
			// The window is kept to the microsecond: spikes link by overlap.
			if diff := cmp.Diff(tt.status, got.Status); diff != "" {
				t.Errorf("status as stored (-want +got):\n%s", diff)
			}
		})
	}
}

func TestAnAgentListsOnlyItsNodesCaptures(t *testing.T) {
	_, c := apiServer(t)
	ns := namespace(t, c)
	ctx := testContext(t)
	for i, node := range []string{"node-a", "node-b", "node-a", "node-c"} {
		capture := validCapture()
		capture.Name, capture.Namespace = fmt.Sprintf("field-%d", i), ns
		capture.Spec.NodeName, capture.Spec.ArmingID = node, fmt.Sprintf("arming-%d", i)
		if err := c.Create(ctx, capture); err != nil {
			t.Fatal(err)
		}
	}
	var list CaptureList
	if err := c.List(ctx, &list, client.InNamespace(ns), client.MatchingFields{"spec.nodeName": "node-a"}); err != nil {
		t.Fatalf("list with the field selector spec.nodeName=node-a: %v", err)
	}
	var got []string
	for _, item := range list.Items {
		got = append(got, item.Name+"@"+item.Spec.NodeName)
	}
	if diff := cmp.Diff([]string{"field-0@node-a", "field-2@node-a"}, got); diff != "" {
		t.Errorf("captures listed for node-a (-want +got):\n%s", diff)
	}
}
