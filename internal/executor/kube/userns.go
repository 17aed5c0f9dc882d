package kube

import (
	"cmp"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"knotless.dev/knotless/internal/agent"
	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/executor"
)

// The --user-namespace modes: whether job pods ask for a user namespace
// of their own (the pod's hostUsers: false,
// https://kubernetes.io/docs/concepts/workloads/pods/user-namespaces/).
const (
	// UserNamespaceAuto asks for one on every job pod and proves it from
	// inside (the agent's /proc/self/uid_map); where a node's runtime
	// refuses it (gVisor's runsc does) the pod is made again without one
	// and later pods of that RuntimeClass ask for none; where a runtime
	// ignores it (containerd before 2.0) the run goes on as the pod's
	// non-root user. The setup log says which it got. The default: it
	// never makes a run fail that ran before, and it takes the user
	// namespace wherever the nodes give it.
	UserNamespaceAuto = "auto"
	// UserNamespaceRequired ends a run errored, before any step, when its
	// pod did not get one, naming the node and the reason.
	UserNamespaceRequired = "required"
	// UserNamespaceOff never asks: the pods run with the node's uids.
	UserNamespaceOff = "off"
)

// ParseUserNamespace checks a --user-namespace value: auto, required or
// off ("" is auto). Errors name the three.
func ParseUserNamespace(s string) (string, error) {
	switch s {
	case "":
		return UserNamespaceAuto, nil
	case UserNamespaceAuto, UserNamespaceRequired, UserNamespaceOff:
		return s, nil
	}
	return "", fmt.Errorf("--user-namespace %q: give auto (ask for one, go on without it where a node cannot), required (a run without one ends errored) or off", s)
}

// usernsRefusal matches what a kubelet or container runtime says when it
// cannot make a pod's user namespace: runsc's `error setting namespace of
// type user`, a kubelet whose runtime handler lacks the feature (`does not
// support user namespaces`), an id-mapped mount the kernel or file system
// refuses.
var usernsRefusal = regexp.MustCompile(`(?i)namespace of type user|user ?namespaces?|userns|id-?mapped|idmap`)

// asksUserNamespace reports whether pod asks for a user namespace
// (spec.hostUsers false).
func asksUserNamespace(pod *corev1.Pod) bool {
	return pod != nil && pod.Spec.HostUsers != nil && !*pod.Spec.HostUsers
}

// usernsRefused reports whether err is a sandbox fault of a pod that
// asked for a user namespace and did not get one (sandboxEventFault).
func usernsRefused(pod *corev1.Pod, err error) bool {
	var f *executor.Fault
	return asksUserNamespace(pod) && errors.As(err, &f) && usernsRefusal.MatchString(f.Message)
}

// wantsUserNamespace reports whether a new job pod asks for a user
// namespace: never under off; under auto, not where a pod of this
// RuntimeClass has been refused one (the reason is returned).
func (e *Executor) wantsUserNamespace() (bool, string) {
	switch e.cfg.UserNamespace {
	case UserNamespaceOff:
		return false, "--user-namespace off"
	case UserNamespaceRequired:
		return true, ""
	}
	if why, refused := e.usernsRefused.Load(e.cfg.RuntimeClass); refused {
		return false, why.(string)
	}
	return true, ""
}

// userNamespaceChecked reads what the agent's hello says of its user
// namespace, writes it to the run's setup log and remembers it for Facts,
// and returns the fault that ends the run before any step: a pod that
// asked for a user namespace and runs with the node's uids under
// --user-namespace required, or whose user is root (--run-as image with
// an image that runs as root, admitted only because the pod asked for
// one). asked says whether the pod asked; why, when it did not, is the
// reason (wantsUserNamespace).
func (e *Executor) userNamespaceChecked(spec executor.Spec, pod, node string, asked bool, why string, hello agent.AgentHello) *executor.Fault {
	remapped := agent.UIDMapRemapped(hello.UIDMap)
	desc := agent.DescribeUIDMap(hello.UIDMap)
	if hello.UIDMap == "" {
		desc = "unknown (the agent could not read /proc/self/uid_map)"
	}
	e.usernsNodes.Store(node, desc)
	switch {
	case remapped:
		limit := "no process limit (--pids 0)"
		if hello.Nproc > 0 {
			limit = fmt.Sprintf("at most %d processes and threads of the job's user (--pids, RLIMIT_NPROC of the pod's own uids)", hello.Nproc)
		}
		e.logf(spec, "user namespace: %s on node %s: the pod's root is not the node's; %s", desc, node, limit)
		return nil
	case asked && e.cfg.UserNamespace == UserNamespaceRequired:
		return &executor.Fault{Reason: api.ReasonExecutor, Message: fmt.Sprintf(
			"--user-namespace required: the job pod %s on node %s asked for a user namespace (hostUsers: false) and runs with %s: the node's container runtime ignores the field (containerd before 2.0 does); run such pods on nodes with containerd 2 or CRI-O 1.25 and Linux 6.3 or later (--node-selector), or give --user-namespace auto",
			pod, node, desc)}
	case hello.UID == 0:
		return &executor.Fault{Reason: api.ReasonExecutor, Message: fmt.Sprintf(
			"the job image runs as root (--run-as image), which Knotless allows only in a user namespace of the pod's own, and the pod %s on node %s runs with %s: its container runtime ignores hostUsers: false; no step ran. Give --run-as UID:GID, or run on nodes whose runtime gives user namespaces",
			pod, node, desc)}
	case asked:
		e.logf(spec, "user namespace: none: the pod asked for one and runs with %s on node %s (its container runtime ignores hostUsers: false); the steps run as uid %d, non-root; no process limit (--pids needs a user namespace)", desc, node, hello.UID)
	default:
		e.logf(spec, "user namespace: none (%s): the pod runs with the node's uids, as uid %d, non-root; no process limit (--pids needs a user namespace)", why, hello.UID)
	}
	return nil
}

// userNamespaceFact is the runner's fact about user namespaces: the mode,
// the RuntimeClasses refused one, and what each node's last job pod got.
func (e *Executor) userNamespaceFact() string {
	s := e.cfg.UserNamespace
	if why, ok := e.usernsRefused.Load(e.cfg.RuntimeClass); ok {
		s += "; none for RuntimeClass " + cmp.Or(e.cfg.RuntimeClass, "(default)") + ": " + why.(string)
	}
	var nodes []string
	e.usernsNodes.Range(func(k, v any) bool {
		nodes = append(nodes, fmt.Sprintf("node %s: %s", k, v))
		return true
	})
	slices.Sort(nodes)
	if len(nodes) > 0 {
		s += "; " + strings.Join(nodes, "; ")
	}
	return s
}
