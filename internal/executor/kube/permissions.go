package kube

import (
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Permission is one Kubernetes RBAC permission (a Role rule's apiGroups,
// resources, resourceNames and verbs, for one resource) of the kube
// runner in the namespace of its job pods.
type Permission struct {
	// APIGroup is the resource's API group; "" is the core group.
	APIGroup string
	// Resource is the resource's plural name, a subresource after a
	// slash ("pods/exec"), as a Role rule's resources name it.
	Resource string
	// ResourceName, when set, limits the permission to the object of
	// that name (a rule's resourceNames).
	ResourceName string
	// Verbs are the API verbs (get, list, watch, create, delete, patch).
	Verbs []string
	// Why says in a sentence which code uses it and what fails without.
	Why string
}

// Permissions is every permission the kube executor and the runner use
// in the namespace of their job pods, and so exactly what the runner's
// Role must grant there: deploy/kubernetes/base/role.yaml grants these
// plus OwnerPermission of its Deployment, and nothing else;
// deploy/kubernetes/builds/role.yaml grants these in the builds
// namespace (TestPermissions_* hold both files and the code's calls to
// it). Doctor checks each with a SelfSubjectAccessReview. The runner needs
// nothing on Secrets (its credential reaches its pod as a volume the
// kubelet mounts) and nothing cluster-wide. NotGranted lists the calls
// the code makes that the Role leaves out on purpose.
var Permissions = []Permission{
	{APIGroup: "", Resource: "pods", Verbs: []string{"create", "get", "list", "watch", "delete", "patch"},
		Why: "job pods: create one per run or warm pod (createPod; doctor's dry run), get one by name (Open, why, doctor's own pod), " +
			"list and watch this runner's (the label-selected informer of watch; List, findIn), delete them at the end (deletePod), " +
			"patch a claimed warm pod's labels and deadline (claimWarm) and an adopted pod's owner reference (adopt)"},
	{APIGroup: "", Resource: "pods/exec", Verbs: []string{"create", "get"},
		Why: "the step agent's delivery and stream (PodExec): create for SPDY and, since Kubernetes 1.35, WebSocket exec; get for older servers' WebSocket exec"},
	{APIGroup: "", Resource: "events", Verbs: []string{"list"},
		Why: "why a job pod ended when its status no longer says (eventFault: Evicted with what the kubelet measured, Preempted) " +
			"and why its sandbox cannot start (sandboxFault); without it such a run ends pod-lost, or waits for its timeout"},
	{APIGroup: "", Resource: "pods/log", Verbs: []string{"get"},
		Why: "the logs of a run's services, sidecars of the job pod (podServices.Log), added to the run's setup log; without it the setup log says the log could not be read"},
}

// NotGranted are calls the code makes that the runner's Role does not
// grant, on purpose: each either works for every authenticated user
// (the cluster's default ClusterRoles) or is optional, the code going on
// without it.
var NotGranted = []Permission{
	{APIGroup: "authorization.k8s.io", Resource: "selfsubjectaccessreviews", Verbs: []string{"create"},
		Why: "doctor's review of each permission; every authenticated user may (ClusterRole system:basic-user)"},
	{APIGroup: "networking.k8s.io", Resource: "networkpolicies", Verbs: []string{"list"},
		Why: "doctor's check that a NetworkPolicy selects job pods; forbidden, it leaves the check to its test pod (least privilege)"},
	{APIGroup: "node.k8s.io", Resource: "runtimeclasses", Verbs: []string{"get"},
		Why: "doctor's read of --runtime-class (cluster-scoped: a Role cannot grant it); forbidden, it leaves the check to its test pod"},
}

// OwnerPermission is the permission --owner adds to Permissions: get on
// the object o names, by name (ResolveOwner reads it once, at start, for
// its UID), e.g. {apps deployments knotless-runner [get]}. ok is false
// for no owner and for a pod, whose get Permissions holds already.
func OwnerPermission(o *metav1.OwnerReference) (p Permission, ok bool) {
	if o == nil || o.Kind == "Pod" {
		return Permission{}, false
	}
	group, _, found := strings.Cut(o.APIVersion, "/")
	if !found {
		group = ""
	}
	return Permission{APIGroup: group, Resource: strings.ToLower(o.Kind) + "s", ResourceName: o.Name, Verbs: []string{"get"},
		Why: "the job pods' owner (--owner): read once at start, for its UID (ResolveOwner; owner.go)"}, true
}
