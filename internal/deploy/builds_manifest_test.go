package deploy

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"
)

// TestBuildsManifests_ProfileAndNamespaceAreWhatTheGuideSays pins
// deploy/kubernetes/builds against docs/container-builds.md's table
// (issue 34): the seccomp profile refuses by default (never Unconfined),
// allows beyond the runtime's default exactly mount, umount2, unshare,
// setns, pivot_root and sethostname, lets clone make user and mount
// namespaces but no other kind, answers keyctl with ENOSYS; the builds
// namespace enforces baseline; the runner's Role there has the rules of
// its own namespace's Role but the Deployment's.
func TestBuildsManifests_ProfileAndNamespaceAreWhatTheGuideSays(t *testing.T) {
	dir := filepath.Join("..", "..", "deploy", "kubernetes", "builds")
	raw, err := os.ReadFile(filepath.Join(dir, "builder-seccomp.json"))
	if err != nil {
		t.Fatal(err)
	}
	var p struct {
		DefaultAction string `json:"defaultAction"`
		Syscalls      []struct {
			Names    []string `json:"names"`
			Action   string   `json:"action"`
			ErrnoRet *int     `json:"errnoRet"`
			Args     []struct {
				Index int    `json:"index"`
				Value uint64 `json:"value"`
				Op    string `json:"op"`
			} `json:"args"`
		} `json:"syscalls"`
	}
	if err := json.Unmarshal(raw, &p); err != nil {
		t.Fatal(err)
	}
	if p.DefaultAction != "SCMP_ACT_ERRNO" {
		t.Errorf("defaultAction %s, want SCMP_ACT_ERRNO", p.DefaultAction)
	}
	extra := []string{"mount", "umount2", "unshare", "setns", "pivot_root", "sethostname"}
	const (
		newUser, newNS                                   = 0x10000000, 0x00020000
		newCgroup, newUTS, newIPC, newPID, newNet uint64 = 0x02000000, 0x04000000, 0x08000000, 0x20000000, 0x40000000
	)
	var sawExtra, sawClone, sawKeyctl bool
	for _, s := range p.Syscalls {
		switch {
		case slices.Equal(s.Names, extra):
			sawExtra = s.Action == "SCMP_ACT_ALLOW" && len(s.Args) == 0
		case slices.Equal(s.Names, []string{"clone"}) && len(s.Args) == 1:
			mask := s.Args[0].Value
			sawClone = s.Args[0].Op == "SCMP_CMP_MASKED_EQ" && mask == newCgroup|newUTS|newIPC|newPID|newNet && mask&(newUser|newNS) == 0
		case slices.Equal(s.Names, []string{"keyctl"}):
			sawKeyctl = s.Action == "SCMP_ACT_ERRNO" && s.ErrnoRet != nil && *s.ErrnoRet == 38
		default:
			for _, n := range extra {
				if slices.Contains(s.Names, n) && s.Action == "SCMP_ACT_ALLOW" {
					t.Errorf("%s allowed by another rule too: %+v", n, s)
				}
			}
		}
	}
	if !sawExtra || !sawClone || !sawKeyctl {
		t.Errorf("profile: the extra syscalls %v, clone of user and mount namespaces only %v, keyctl ENOSYS %v", sawExtra, sawClone, sawKeyctl)
	}

	ns, err := os.ReadFile(filepath.Join(dir, "namespace.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(ns), "name: knotless-builds\n  labels:\n    pod-security.kubernetes.io/enforce: baseline\n") {
		t.Errorf("namespace.yaml does not make knotless-builds enforce baseline:\n%s", ns)
	}
	roles := func(path string) []rbacv1.PolicyRule {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		doc, _, _ := strings.Cut(string(b), "\n---\n")
		var r rbacv1.Role
		if err := yaml.Unmarshal([]byte(doc), &r); err != nil {
			t.Fatal(err)
		}
		return r.Rules
	}
	base := roles(filepath.Join(dir, "..", "base", "role.yaml"))
	base = slices.DeleteFunc(base, func(r rbacv1.PolicyRule) bool { return slices.Contains(r.Resources, "deployments") })
	if got := roles(filepath.Join(dir, "role.yaml")); !slices.EqualFunc(got, base, func(a, b rbacv1.PolicyRule) bool {
		return slices.Equal(a.APIGroups, b.APIGroups) && slices.Equal(a.Resources, b.Resources) && slices.Equal(a.Verbs, b.Verbs)
	}) {
		t.Errorf("the builds namespace's Role %+v, want the runner's own but the Deployment's: %+v", got, base)
	}
}
