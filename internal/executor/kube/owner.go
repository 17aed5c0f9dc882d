package kube

import (
	"context"
	"fmt"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// Who owns the job pods (stated here only; the docs and other comments
// point here). Every job pod of the runner's namespace, warm pods too,
// gets Config.Owner as its one owner reference, by UID, neither a
// controller nor blocking the owner's deletion (ResolveOwner). Which
// object that is (Options.New):
//   - --owner KIND/NAME (KNOTLESS_OWNER): that object, read once at start;
//     a runner that cannot read it does not start. The shipped manifests
//     (deploy/kubernetes) give deployment/knotless-runner: the runner's
//     Deployment owns the job pods.
//   - no --owner, in a cluster: the runner's own pod ($POD_NAME, else the
//     host name; OwnPod), with a warning that replacing that pod loses
//     the runs; none when that pod cannot be read (also warned).
//   - no --owner, outside a cluster (a kubeconfig): none.
//   - pods of the builds namespace: none ever (an owner in another
//     namespace counts as absent: newBuilds).
// Whatever the owner, the runner deletes a run's pod when the run ends,
// and its next start sweeps the pods of runs it does not hold; a pod
// nobody deletes ends at its activeDeadlineSeconds. Recover re-points an
// adopted pod's owner reference that names another UID to Config.Owner
// (adopt: patch on pods).
//
// Why the Deployment: the garbage collector
// (https://kubernetes.io/docs/concepts/architecture/garbage-collection/:
// a dependent goes once every owner is gone, owners by UID, same
// namespace) deletes job pods owned by the runner's pod seconds after
// that pod is gone: on a rollout restart, an upgrade or an eviction,
// before a Recreate successor exists to adopt them. The Deployment
// outlives every replacement of the runner's pod and every restart of
// its container, and `kubectl delete -k` (or deleting the Deployment)
// takes the job pods with it. The runner needs get on that one object
// (OwnerPermission: a Role rule with resourceNames), nothing else.

// OwnerKinds are the kinds --owner takes, as KIND/NAME with the kind in
// lower case.
var OwnerKinds = []string{"deployment", "statefulset", "configmap", "pod"}

// ParseOwner reads --owner: KIND/NAME with KIND one of OwnerKinds (case
// folded; "deploy" and "sts" are kubectl's short names) and NAME a
// DNS-1123 subdomain. Empty is no owner.
func ParseOwner(s string) (kind, name string, err error) {
	if s == "" {
		return "", "", nil
	}
	k, n, ok := strings.Cut(s, "/")
	k = strings.ToLower(k)
	switch k {
	case "deploy", "deployments":
		k = "deployment"
	case "sts", "statefulsets":
		k = "statefulset"
	case "cm", "configmaps":
		k = "configmap"
	case "pods", "po":
		k = "pod"
	}
	known := false
	for _, o := range OwnerKinds {
		known = known || k == o
	}
	if !ok || !known || n == "" || len(validation.IsDNS1123Subdomain(n)) > 0 {
		return "", "", fmt.Errorf("--owner %q: want KIND/NAME, KIND one of %s (e.g. deployment/knotless-runner)", s, strings.Join(OwnerKinds, ", "))
	}
	return k, n, nil
}

// ResolveOwner reads the object --owner names (kind and name from
// ParseOwner) in namespace ns and returns an owner reference to it, by
// UID, for job pods: not a controller (no controller adopts or manages
// job pods) and blockOwnerDeletion false (so the runner needs no update
// on the owner's finalizers, and deleting the owner never waits for job
// pods). Errors: the object does not exist, or the runner may not get it
// (the message names the Role rule to add).
func ResolveOwner(ctx context.Context, client kubernetes.Interface, ns, kind, name string) (*metav1.OwnerReference, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var (
		meta       metav1.Object
		apiVersion string
		kindName   string
		group      string
		resource   string
		err        error
	)
	switch kind {
	case "deployment":
		apiVersion, kindName, group, resource = "apps/v1", "Deployment", "apps", "deployments"
		o, e := client.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
		meta, err = o, e
	case "statefulset":
		apiVersion, kindName, group, resource = "apps/v1", "StatefulSet", "apps", "statefulsets"
		o, e := client.AppsV1().StatefulSets(ns).Get(ctx, name, metav1.GetOptions{})
		meta, err = o, e
	case "configmap":
		apiVersion, kindName, group, resource = "v1", "ConfigMap", "", "configmaps"
		o, e := client.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
		meta, err = o, e
	case "pod":
		apiVersion, kindName, group, resource = "v1", "Pod", "", "pods"
		o, e := client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		meta, err = o, e
	default:
		return nil, fmt.Errorf("owner kind %q: want one of %s", kind, strings.Join(OwnerKinds, ", "))
	}
	switch {
	case apierrors.IsNotFound(err):
		return nil, fmt.Errorf("the job pods' owner %s/%s does not exist in namespace %s (check --owner)", kind, name, ns)
	case apierrors.IsForbidden(err):
		g := group
		if g == "" {
			g = `""`
		}
		return nil, fmt.Errorf("the runner may not read the job pods' owner %s/%s in namespace %s: give its Role the rule {apiGroups: [%s], resources: [%s], resourceNames: [%s], verbs: [get]}: %w",
			kind, name, ns, g, resource, name, err)
	case err != nil:
		return nil, fmt.Errorf("read the job pods' owner %s/%s in namespace %s: %w", kind, name, ns, err)
	}
	return &metav1.OwnerReference{APIVersion: apiVersion, Kind: kindName, Name: meta.GetName(), UID: meta.GetUID(),
		Controller: ptr.To(false), BlockOwnerDeletion: ptr.To(false)}, nil
}
