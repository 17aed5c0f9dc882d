package deploy

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"
)

// serverManifests is the directory of the server's manifests.
const serverManifests = "../../deploy/kubernetes/server"

func readManifest(t *testing.T, name string, into any) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(serverManifests, name))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(b, into); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
}

// The server's manifests: a Deployment of several replicas probed at
// /readyz and /healthz on the port the Service targets, reading the
// database URL from a Secret and sharing one ReadWriteMany volume, and a
// PodDisruptionBudget that selects its pods and leaves more than one.
func TestServerManifest_ReplicasProbesServiceAndDisruptionBudget(t *testing.T) {
	var kust struct {
		Resources []string `json:"resources"`
	}
	b, err := os.ReadFile(filepath.Join(serverManifests, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &kust); err != nil {
		t.Fatal(err)
	}
	for _, r := range kust.Resources {
		if _, err := os.Stat(filepath.Join(serverManifests, r)); err != nil {
			t.Errorf("kustomization lists %s: %v", r, err)
		}
	}
	var d appsv1.Deployment
	readManifest(t, "deployment.yaml", &d)
	var svc corev1.Service
	readManifest(t, "service.yaml", &svc)
	var pdb policyv1.PodDisruptionBudget
	readManifest(t, "pdb.yaml", &pdb)
	var pvc corev1.PersistentVolumeClaim
	readManifest(t, "pvc.yaml", &pvc)

	if d.Spec.Replicas == nil || *d.Spec.Replicas < 2 {
		t.Fatalf("replicas %v, want several", d.Spec.Replicas)
	}
	podLabels := labels.Set(d.Spec.Template.Labels)
	if !labels.SelectorFromSet(svc.Spec.Selector).Matches(podLabels) {
		t.Errorf("the Service's selector %v misses the pods %v", svc.Spec.Selector, podLabels)
	}
	sel := labels.SelectorFromSet(pdb.Spec.Selector.MatchLabels)
	if !sel.Matches(podLabels) {
		t.Errorf("the PodDisruptionBudget's selector %v misses the pods %v", pdb.Spec.Selector.MatchLabels, podLabels)
	}
	if pdb.Spec.MinAvailable == nil || pdb.Spec.MinAvailable.IntValue() < 1 || pdb.Spec.MinAvailable.IntValue() >= int(*d.Spec.Replicas) {
		t.Errorf("minAvailable %v of %d replicas: want at least one, and room for a drain", pdb.Spec.MinAvailable, *d.Spec.Replicas)
	}
	c := d.Spec.Template.Spec.Containers[0]
	if c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet == nil || c.ReadinessProbe.HTTPGet.Path != "/readyz" {
		t.Errorf("readiness probe %+v, want GET /readyz", c.ReadinessProbe)
	}
	if c.LivenessProbe == nil || c.LivenessProbe.HTTPGet == nil || c.LivenessProbe.HTTPGet.Path != "/healthz" {
		t.Errorf("liveness probe %+v, want GET /healthz", c.LivenessProbe)
	}
	if svc.Spec.Ports[0].TargetPort.String() != c.Ports[0].Name {
		t.Errorf("the Service targets %s, the container's port is %s", svc.Spec.Ports[0].TargetPort.String(), c.Ports[0].Name)
	}
	secret := false
	for _, e := range c.EnvFrom {
		if e.SecretRef != nil {
			secret = true
		}
	}
	if !secret {
		t.Error("the database URL (a password) must come from a Secret")
	}
	if len(pvc.Spec.AccessModes) != 1 || pvc.Spec.AccessModes[0] != corev1.ReadWriteMany {
		t.Errorf("data volume access modes %v, want ReadWriteMany: every replica writes logs and repositories", pvc.Spec.AccessModes)
	}
	env, err := os.ReadFile(filepath.Join(serverManifests, "server.env"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(env), "KNOTLESS_DATABASE") {
		t.Error("server.env (a ConfigMap) names KNOTLESS_DATABASE: the URL holds a password; it belongs in the Secret")
	}
}
