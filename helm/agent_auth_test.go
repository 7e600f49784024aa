package helm_test

import (
	"path"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// agentIntakeAuth is the intake.auth section of the rendered agent config.
func agentIntakeAuth(t *testing.T, m manifest) (tokenFile string, allowOpen bool) {
	t.Helper()
	var cfg struct {
		Intake struct {
			Auth struct {
				TokenFile            string `json:"token_file"`
				AllowUnauthenticated bool   `json:"allow_unauthenticated"`
			} `json:"auth"`
		} `json:"intake"`
	}
	// The agent decodes it strictly (checkAgent runs it); here only this
	// section is read.
	if err := yaml.Unmarshal([]byte(configMapData(t, m, fullname()+"-agent")["config.yaml"]), &cfg); err != nil {
		t.Fatal(err)
	}
	return cfg.Intake.Auth.TokenFile, cfg.Intake.Auth.AllowUnauthenticated
}

func agentDaemonSet(t *testing.T, m manifest) workload {
	t.Helper()
	for _, w := range m.workloads(t) {
		if w.kind == "DaemonSet" && w.name == fullname()+"-agent" {
			return w
		}
	}
	t.Fatal("no agent DaemonSet rendered")
	return workload{}
}

// tokenSecretMounted is the Secret whose volume is mounted at the token
// file's folder in the agent container, or "".
func tokenSecretMounted(t *testing.T, ds workload, tokenFile string) string {
	t.Helper()
	c := ds.template.Spec.Containers[0]
	for _, vm := range c.VolumeMounts {
		if vm.MountPath != path.Dir(tokenFile) {
			continue
		}
		for _, v := range ds.template.Spec.Volumes {
			if v.Name == vm.Name && v.Secret != nil {
				return v.Secret.SecretName
			}
		}
	}
	return ""
}

// The agent listens on the node's IP, so by default it asks OTLP senders
// for the token the chart generates, and the UDP line port, which can
// carry none, is closed.
func TestTheAgentsIntakeAsksForATokenByDefault(t *testing.T) {
	m := render(t, "spikehunt", valuesCase{name: "default"})
	tokenFile, open := agentIntakeAuth(t, m)
	if open || tokenFile == "" {
		t.Fatalf("intake.auth: token_file %q, allow_unauthenticated %v; want a token file and no opening", tokenFile, open)
	}
	ds := agentDaemonSet(t, m)
	secret := tokenSecretMounted(t, ds, tokenFile)
	if secret != fullname()+"-intake-token" {
		t.Fatalf("the token file's folder %s mounts Secret %q, want %s-intake-token", path.Dir(tokenFile), secret, fullname())
	}
	if path.Base(tokenFile) != "token" {
		t.Errorf("token_file %s: the Secret's key is token", tokenFile)
	}
	if tok := secretData(t, m, secret)["token"]; len(tok) < 16 || strings.ContainsAny(tok, " \n") {
		t.Errorf("the generated token %q: want one word of at least 16 characters (the agent refuses shorter)", tok)
	}
	args := ds.template.Spec.Containers[0].Args
	if !slices.Contains(args, "--intake.line-udp=") {
		t.Errorf("agent args %q: want the UDP line port off (--intake.line-udp=)", args)
	}
	for _, p := range ds.template.Spec.Containers[0].Ports {
		if p.Protocol == "UDP" {
			t.Errorf("the agent declares UDP port %d with the UDP line port off", p.ContainerPort)
		}
	}
}

func TestTheAgentsIntakeAuthValues(t *testing.T) {
	t.Run("UDP without allowUnauthenticated is refused", func(t *testing.T) {
		_, err := tryRender(t, "spikehunt", valuesCase{name: "udp", sets: []string{"agent.intake.lineUdp.enabled=true"}})
		if err == nil || !strings.Contains(err.Error(), "a UDP datagram carries no credential") {
			t.Fatalf("render: %v, want it refused saying why", err)
		}
	})
	t.Run("allowUnauthenticated opens OTLP and UDP, and makes no token", func(t *testing.T) {
		m := render(t, "spikehunt", valuesCase{name: "open", sets: []string{
			"agent.intake.lineUdp.enabled=true", "agent.intake.auth.allowUnauthenticated=true"}})
		tokenFile, open := agentIntakeAuth(t, m)
		if !open || tokenFile != "" {
			t.Fatalf("intake.auth: token_file %q, allow_unauthenticated %v; want no token and the opening", tokenFile, open)
		}
		if m.find("Secret", fullname()+"-intake-token") != nil {
			t.Error("a token Secret is rendered that nothing reads")
		}
		if args := agentDaemonSet(t, m).template.Spec.Containers[0].Args; !slices.Contains(args, "--intake.line-udp=$(HOST_IP):7171") {
			t.Errorf("agent args %q: want the UDP line port on the node's IP", args)
		}
	})
	t.Run("existingSecret is mounted instead of a generated one", func(t *testing.T) {
		m := render(t, "spikehunt", valuesCase{name: "own-token", sets: []string{"agent.intake.auth.existingSecret=apps-agent-token"}})
		tokenFile, _ := agentIntakeAuth(t, m)
		if got := tokenSecretMounted(t, agentDaemonSet(t, m), tokenFile); got != "apps-agent-token" {
			t.Errorf("the token file's folder mounts Secret %q, want apps-agent-token", got)
		}
		if m.find("Secret", fullname()+"-intake-token") != nil {
			t.Error("a token Secret is generated beside the user's own")
		}
	})
}
