package kube

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	authzv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"

	"knotless.dev/knotless/internal/agent"
	"knotless.dev/knotless/internal/executor"
	"knotless.dev/knotless/internal/executor/agentenv"
	"knotless.dev/knotless/internal/units"
)

var _ executor.Doctor = (*Executor)(nil)

// roleFix is where the runner's Role lives in the shipped manifests.
const roleFix = "deploy/kubernetes/base/role.yaml"

// policyFix is what to do when job pods reach what they must not.
const policyFix = "apply the job-pod NetworkPolicy (deploy/kubernetes/base/networkpolicy.yaml) to namespace %s, and use a network plugin that enforces NetworkPolicies (Calico, Cilium, kube-network-policies; flannel alone does not)"

// access is one permission the runner needs (or must not have).
type access struct {
	verb, group, resource, sub, name string
}

func (a access) String() string {
	r := a.resource
	if a.sub != "" {
		r += "/" + a.sub
	}
	if a.name != "" {
		r += " " + a.name
	}
	return a.verb + " " + r
}

// needed is each permission of Permissions, one verb at a time, and
// OwnerPermission of the configured owner: exactly what the runner's Role
// must grant (permissions.go).
func (e *Executor) needed() []access {
	ps := Permissions
	if p, ok := OwnerPermission(e.cfg.Owner); ok {
		ps = append(ps[:len(ps):len(ps)], p)
	}
	var out []access
	for _, p := range ps {
		resource, sub, _ := strings.Cut(p.Resource, "/")
		for _, v := range p.Verbs {
			out = append(out, access{verb: v, group: p.APIGroup, resource: resource, sub: sub, name: p.ResourceName})
		}
	}
	return out
}

// Doctor checks, in order, each reported as it finishes: the client
// configuration and the API server; each permission the runner's Role
// must grant (needed: Permissions and the owner's, by
// SelfSubjectAccessReview), and that Secrets are not readable; that the
// namespace enforces Pod Security "restricted" (a server-side dry run of
// a pod that breaks it must be refused: this needs no right beyond pods
// create, and proves enforcement rather than a label); that a
// NetworkPolicy selects job pods for ingress and egress (when the
// credential may list them; the runner's Role need not: then the machine
// check decides); the job pods' RuntimeClass (--runtime-class: that it
// exists, when the credential may read it); the runner's own pod and the
// job pods' owner. With machine it starts a job pod like a run's (under
// the RuntimeClass: a node without its handler fails here, naming the
// handler and the fix; with it, the kernel the steps see is reported),
// runs a step with a test secret over the stream, checks its exit code,
// probes from inside the pod (DNS must work; the API server, the node,
// another pod must not answer) and removes the pod; where builds are
// allowed, it then starts a builds pod and asks its BuildKit for its
// workers (checkBuilder: the node's builder seccomp profile among what
// that needs).
func (e *Executor) Doctor(ctx context.Context, machine bool, report func(executor.Check)) {
	ok := func(name, detail string) { report(executor.Check{Name: name, OK: true, Detail: detail}) }
	fail := func(name, detail, fix string) {
		report(executor.Check{Name: name, OK: false, Detail: detail, Fix: fix})
	}

	v, err := e.client.Discovery().ServerVersion()
	if err != nil {
		fail("API server", fmt.Sprintf("%s: %v", e.rest.Host, err), "check --kubeconfig (or KUBECONFIG) and that this machine reaches the API server")
		return
	}
	ok("client configuration", fmt.Sprintf("API server %s (Kubernetes %s), namespace %s", e.rest.Host, v.GitVersion, e.ns))

	for _, a := range e.needed() {
		allowed, why, err := e.review(ctx, a)
		switch {
		case err != nil:
			fail("may "+a.String(), err.Error(), "check the API server and the credential")
		case !allowed:
			rule := fmt.Sprintf("{apiGroups: [%q], resources: [%s], verbs: [%s]}", a.group, strings.TrimPrefix(a.String(), a.verb+" "), a.verb)
			if a.name != "" {
				rule = fmt.Sprintf("{apiGroups: [%q], resources: [%s], resourceNames: [%s], verbs: [%s]}", a.group, a.resource, a.name, a.verb)
			}
			fail("may "+a.String(), "denied"+why, fmt.Sprintf("give the runner's Role in namespace %s the rule %s (%s)", e.ns, rule, roleFix))
		default:
			ok("may "+a.String(), "")
		}
	}
	for _, verb := range []string{"get", "list"} {
		a := access{verb: verb, resource: "secrets"}
		allowed, _, err := e.review(ctx, a)
		switch {
		case err != nil:
			fail("Secrets not readable ("+verb+")", err.Error(), "check the API server and the credential")
		case allowed:
			fail("Secrets not readable ("+verb+")", "the runner's credential may "+verb+" Secrets in namespace "+e.ns+", the runner's own credential among them",
				"remove every rule on secrets from the Roles and ClusterRoles bound to the runner's ServiceAccount: it needs none")
		default:
			ok("Secrets not readable ("+verb+")", "")
		}
	}

	e.checkPodSecurity(ctx, ok, fail)
	e.checkRuntimeClass(ctx, machine, ok, fail)
	e.checkNetworkPolicy(ctx, machine, ok, fail)
	e.checkIdentity(ctx, ok, fail)
	if machine {
		e.checkMachine(ctx, ok, fail)
		e.checkBuilder(ctx, ok, fail)
	}
}

// review asks the API server whether this credential may do a in the
// namespace.
func (e *Executor) review(ctx context.Context, a access) (bool, string, error) {
	rev, err := e.client.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authzv1.SelfSubjectAccessReview{
		Spec: authzv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authzv1.ResourceAttributes{
			Namespace: e.ns, Verb: a.verb, Group: a.group, Resource: a.resource, Subresource: a.sub, Name: a.name,
		}},
	}, metav1.CreateOptions{})
	if err != nil {
		return false, "", fmt.Errorf("SelfSubjectAccessReview: %w", err)
	}
	why := ""
	if rev.Status.Reason != "" {
		why = ": " + rev.Status.Reason
	}
	return rev.Status.Allowed, why, nil
}

// checkPodSecurity dry-runs a pod that Pod Security "restricted" refuses
// but "baseline" admits (no securityContext at all): refused by the
// PodSecurity admission is ok.
func (e *Executor) checkPodSecurity(ctx context.Context, ok func(string, string), fail func(string, string, string)) {
	const name = "namespace enforces Pod Security restricted"
	fix := fmt.Sprintf("kubectl label namespace %s pod-security.kubernetes.io/enforce=restricted pod-security.kubernetes.io/enforce-version=latest", e.ns)
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "knotless-doctor-", Labels: map[string]string{agentenv.LabelManagedBy: agentenv.ManagedBy, agentenv.LabelRunner: labelValue(e.cfg.Runner)}},
		Spec: corev1.PodSpec{
			RestartPolicy:                corev1.RestartPolicyNever,
			AutomountServiceAccountToken: ptr.To(false),
			Containers:                   []corev1.Container{{Name: Container, Image: "localhost/knotless/doctor-dry-run:0", Command: []string{"/bin/true"}}},
		},
	}
	_, err := e.client.CoreV1().Pods(e.ns).Create(ctx, p, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	switch {
	case err == nil:
		fail(name, "a pod that breaks \"restricted\" (root allowed, capabilities kept, no seccomp profile) was admitted (dry run)", fix)
	case apierrors.IsForbidden(err) && strings.Contains(err.Error(), `PodSecurity "restricted`):
		ok(name, "a pod that breaks it was refused (dry run)")
	case apierrors.IsForbidden(err) && strings.Contains(err.Error(), "PodSecurity"):
		fail(name, "a pod that breaks \"restricted\" was refused by a weaker level: "+firstLine(err.Error()), fix)
	default:
		fail(name, "the dry run of a pod failed otherwise: "+firstLine(err.Error()), "check that the runner may create pods (above); "+fix)
	}
}

// runtimeClassCheck is the name of the check of --runtime-class.
func (e *Executor) runtimeClassCheck() string {
	if e.cfg.RuntimeClass == "" {
		return "runtime class"
	}
	return "runtime class " + e.cfg.RuntimeClass
}

// checkRuntimeClass names the RuntimeClass job pods ask for and reads it
// (its handler); a class that does not exist fails (the API server refuses
// every job pod); one the credential may not read (cluster-scoped: the
// runner's Role cannot grant it) is left to the test pod.
func (e *Executor) checkRuntimeClass(ctx context.Context, machine bool, ok func(string, string), fail func(string, string, string)) {
	name := e.runtimeClassCheck()
	rc := e.cfg.RuntimeClass
	if rc == "" {
		ok(name, "none: job pods run in the nodes' default runtime (runc on most clusters: containers share the node's kernel); --runtime-class gvisor or kata runs them in a sandbox (docs/kubernetes.md, \"Stronger isolation\")")
		return
	}
	later := "the test pod below checks that the node has its handler"
	if !machine {
		later = "run without --skip-machine to check that the nodes have its handler"
	}
	obj, err := e.client.NodeV1().RuntimeClasses().Get(ctx, rc, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		fail(name, fmt.Sprintf("the cluster has no RuntimeClass %s: the API server refuses every job pod", rc),
			fmt.Sprintf("create it (apiVersion node.k8s.io/v1, kind RuntimeClass, name %s, handler: the runtime's handler in the nodes' container runtime, e.g. runsc for gVisor, kata for Kata Containers), or fix --runtime-class", rc))
	case apierrors.IsForbidden(err):
		ok(name, fmt.Sprintf("job pods ask for RuntimeClass %s; not read: the runner's credential may not get RuntimeClasses (cluster-scoped; least privilege): %s", rc, later))
	case err != nil:
		fail(name, "read RuntimeClass "+rc+": "+err.Error(), "check the API server")
	default:
		detail := fmt.Sprintf("job pods ask for RuntimeClass %s (handler %s", rc, obj.Handler)
		if obj.Overhead != nil {
			for res, q := range obj.Overhead.PodFixed {
				detail += fmt.Sprintf(", pod overhead %s %s", res, q.String())
			}
		}
		ok(name, detail+"): "+later)
	}
}

// jobLabels are the labels of a job pod of this runner (the run's label
// as a placeholder), to test NetworkPolicy selectors against.
func (e *Executor) jobLabels() labels.Set {
	return labels.Set{agentenv.LabelManagedBy: agentenv.ManagedBy, agentenv.LabelRunner: labelValue(e.cfg.Runner), agentenv.LabelRun: "doctor"}
}

// checkNetworkPolicy lists the namespace's NetworkPolicies and checks that
// the ones selecting job pods restrict both ingress and egress.
func (e *Executor) checkNetworkPolicy(ctx context.Context, machine bool, ok func(string, string), fail func(string, string, string)) {
	const name = "a NetworkPolicy selects job pods"
	fix := fmt.Sprintf(policyFix, e.ns)
	list, err := e.client.NetworkingV1().NetworkPolicies(e.ns).List(ctx, metav1.ListOptions{})
	if apierrors.IsForbidden(err) {
		if machine {
			ok(name, "not listed: the runner's Role has no right on NetworkPolicies (least privilege); the test pod below checks that one is enforced")
		} else {
			ok(name, "not listed: the runner's Role has no right on NetworkPolicies (least privilege); run without --skip-machine to check enforcement from a test pod")
		}
		return
	}
	if err != nil {
		fail(name, "list NetworkPolicies: "+err.Error(), "check the API server")
		return
	}
	var names []string
	var ingress, egress bool
	set := e.jobLabels()
	for _, np := range list.Items {
		sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
		if err != nil || !sel.Matches(set) {
			continue
		}
		names = append(names, np.Name)
		for _, t := range policyTypes(np) {
			ingress = ingress || t == networkingv1.PolicyTypeIngress
			egress = egress || t == networkingv1.PolicyTypeEgress
		}
	}
	switch {
	case len(names) == 0:
		fail(name, fmt.Sprintf("none of the %d NetworkPolicies of namespace %s selects job pods (labels %s)", len(list.Items), e.ns, set), fix)
	case !ingress || !egress:
		fail(name, fmt.Sprintf("%s select job pods but restrict ingress %v, egress %v", strings.Join(names, ", "), ingress, egress), fix)
	default:
		ok(name, strings.Join(names, ", ")+" (ingress and egress)")
	}
}

// policyTypes are np's policy types, defaulted as the API server does.
func policyTypes(np networkingv1.NetworkPolicy) []networkingv1.PolicyType {
	if len(np.Spec.PolicyTypes) > 0 {
		return np.Spec.PolicyTypes
	}
	t := []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}
	if len(np.Spec.Egress) > 0 {
		t = append(t, networkingv1.PolicyTypeEgress)
	}
	return t
}

// checkIdentity reports the runner's own pod (in a cluster) and the job
// pods' owner: in a cluster it must outlive the runner's pod.
func (e *Executor) checkIdentity(ctx context.Context, ok func(string, string), fail func(string, string, string)) {
	if !e.cfg.InCluster {
		ok("own pod", "not in a pod (a kubeconfig): none")
	} else {
		name := os.Getenv("POD_NAME")
		if name == "" {
			name, _ = os.Hostname()
		}
		p, err := e.client.CoreV1().Pods(e.ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			fail("own pod", fmt.Sprintf("read pod %s/%s: %v", e.ns, name, err),
				"set POD_NAME from the downward API (env valueFrom fieldRef metadata.name) and run the runner in the namespace of its job pods")
		} else {
			ok("own pod", fmt.Sprintf("%s (uid %s) on node %s", p.Name, p.UID, p.Spec.NodeName))
		}
	}
	o := e.cfg.Owner
	switch {
	case o == nil && e.cfg.InCluster:
		fail("job pods' owner", "none: deleting the runner leaves its job pods until their deadline",
			"run knotless-run with --owner deployment/NAME (its Deployment) and give its Role get on it")
	case o == nil:
		ok("job pods' owner", "none (not in a cluster): the runner's next start sweeps the pods of runs it does not hold")
	case o.Kind == "Pod":
		fail("job pods' owner", "the runner's pod "+o.Name+": replacing it (rollout restart, upgrade, eviction) deletes the runs' job pods",
			"run knotless-run with --owner deployment/NAME (its Deployment) and give its Role get on it (docs/kubernetes.md, restarts)")
	default:
		ok("job pods' owner", fmt.Sprintf("%s/%s (uid %s): job pods outlive the runner's pod and go with it", o.Kind, o.Name, o.UID))
	}
}

// checkMachine starts a job pod, runs a step with a secret in it, probes
// the network from inside and removes the pod.
func (e *Executor) checkMachine(ctx context.Context, ok func(string, string), fail func(string, string, string)) {
	if e.cfg.Image == "" {
		fail("test job pod", "no job image", "give --image IMAGE (an image your workflows use)")
		return
	}
	id := "doctor-" + randomHex(4)
	ws, err := os.MkdirTemp("", "knotless-doctor-")
	if err != nil {
		fail("test job pod", err.Error(), "check the temporary directory")
		return
	}
	defer os.RemoveAll(ws)
	var setup bytes.Buffer
	t0 := time.Now()
	pctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	sess, err := e.Prepare(pctx, executor.Spec{ID: id, Workspace: ws, Timeout: 5 * time.Minute, Log: &setup})
	if err != nil {
		msg := firstLine(err.Error())
		if detail, fix, found := strings.Cut(msg, fixSep); found && e.cfg.RuntimeClass != "" {
			fail(e.runtimeClassCheck()+" runs job pods", detail, fix)
			fail("test job pod", "did not start: its node cannot run RuntimeClass "+e.cfg.RuntimeClass+" (above)", "see the check above")
			return
		}
		fail("test job pod", msg, "see the line above it; kubectl -n "+e.ns+" describe pod for the events of a Pending pod")
		return
	}
	pod := PodOf(sess)
	under := ""
	if e.cfg.RuntimeClass != "" {
		under = ", RuntimeClass " + e.cfg.RuntimeClass
	}
	ok("test job pod", fmt.Sprintf("%s running with the step agent in %s (image %s%s)", pod, time.Since(t0).Round(10*time.Millisecond), e.cfg.Image, under))
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		if err := sess.Cleanup(cctx); err != nil {
			fail("test job pod removed", err.Error(), "kubectl -n "+e.ns+" delete pod "+pod)
			return
		}
		ok("test job pod removed", pod)
	}()

	secret := randomHex(16)
	var out bytes.Buffer
	res, err := sess.Exec(pctx, executor.Step{ID: "1", Name: "doctor", Secrets: map[string]string{"KNOTLESS_DOCTOR_SECRET": secret},
		Script: `printf '%s' "$KNOTLESS_DOCTOR_SECRET" | wc -c; exit 7`}, &out)
	switch {
	case err != nil:
		fail("step with a secret over the stream", err.Error(), "see the runner's log (--log-level debug)")
		return
	case strings.TrimSpace(out.String()) != fmt.Sprint(len(secret)):
		fail("step with a secret over the stream", fmt.Sprintf("the step saw a secret of %q bytes, want %d", strings.TrimSpace(out.String()), len(secret)), "the job image needs /bin/sh, printf and wc")
	default:
		ok("step with a secret over the stream", fmt.Sprintf("%d bytes arrived", len(secret)))
	}
	if res.ExitCode != 7 || res.Reason != "" {
		fail("exit code", fmt.Sprintf("the step exited 7, reported %d (reason %q)", res.ExitCode, res.Reason), "report this as a bug")
	} else {
		ok("exit code", "7 as the step exited")
	}
	e.checkKernel(pctx, sess, ok, fail)
	e.checkUserNamespace(pctx, sess, pod, ok, fail)
	e.checkDisk(pctx, sess, ok)
	e.checkWarm(ok)
	e.checkEnforcement(pctx, sess, pod, ok, fail)
}

// checkKernel reports, under --runtime-class, the kernel release the
// steps see (`uname -r`): a sandbox's own (gVisor says 4.19.0-gvisor or
// the like, Kata its VM's kernel), not the node's.
func (e *Executor) checkKernel(ctx context.Context, sess executor.Session, ok func(string, string), fail func(string, string, string)) {
	if e.cfg.RuntimeClass == "" {
		return
	}
	name := e.runtimeClassCheck() + " runs job pods"
	var out bytes.Buffer
	res, err := sess.Exec(ctx, executor.Step{ID: "4", Name: "doctor kernel", Script: "uname -r"}, &out)
	if err != nil || res.ExitCode != 0 {
		fail(name, fmt.Sprintf("uname -r in the test pod: exit %d %v %s", res.ExitCode, err, strings.TrimSpace(out.String())), "the job image needs uname")
		return
	}
	ok(name, "the steps see kernel "+strings.TrimSpace(out.String()))
}

// checkUserNamespace reads the test pod's /proc/self/uid_map from a step
// and says whether job pods get a user namespace of their own
// (--user-namespace): under required a pod without one fails (Prepare
// has refused it already), under auto and off it is said as it is.
func (e *Executor) checkUserNamespace(ctx context.Context, sess executor.Session, pod string, ok func(string, string), fail func(string, string, string)) {
	const name = "user namespace"
	var out bytes.Buffer
	res, err := sess.Exec(ctx, executor.Step{ID: "5", Name: "doctor user namespace", Script: "cat /proc/self/uid_map"}, &out)
	if err != nil || res.ExitCode != 0 {
		fail(name, fmt.Sprintf("cat /proc/self/uid_map in the test pod: exit %d %v %s", res.ExitCode, err, strings.TrimSpace(out.String())), "the job image needs cat")
		return
	}
	text := strings.TrimSpace(out.String())
	desc := agent.DescribeUIDMap(text)
	_, why := e.wantsUserNamespace()
	switch {
	case agent.UIDMapRemapped(text):
		ok(name, fmt.Sprintf("the test pod %s runs in one of its own: %s (--user-namespace %s); --pids %d holds in it", pod, desc, e.cfg.UserNamespace, e.cfg.Pids))
	case e.cfg.UserNamespace == UserNamespaceRequired:
		fail(name, fmt.Sprintf("the test pod %s runs with %s", pod, desc), "run job pods on nodes with containerd 2 or CRI-O 1.25, runc 1.2 and Linux 6.3 or later (--node-selector), or give --user-namespace auto")
	default:
		if why == "" {
			why = "its node's container runtime ignores hostUsers: false"
		}
		ok(name, fmt.Sprintf("none: the test pod %s runs with %s (%s); job pods run as their non-root uid of the node, --run-as image refuses images that run as root, and --pids has no effect", pod, desc, why))
	}
}

// checkWarm says what the warm pool holds (--warm-pods): informative.
func (e *Executor) checkWarm(ok func(string, string)) {
	if e.cfg.WarmPods == 0 {
		ok("warm pods", "none (--warm-pods 0): every run starts a pod of its own")
		return
	}
	def, _ := e.caps.Resolve(executor.Spec{})
	ok("warm pods", fmt.Sprintf("up to %d kept started (image %s, cpu %s, memory %s, ephemeral storage %s each; replaced after %s), within --capacity beside the runs; they hold their requests of the namespace's quota while they wait",
		e.cfg.WarmPods, e.cfg.Image, executor.FormatCPUs(def.MilliCPUs), units.FormatSize(def.Memory), units.FormatSize(def.Disk), e.cfg.WarmMaxAge))
}

// checkDisk says what bounds a job's disk on the test pod's node: the
// emptyDirs lie on the node's filesystem (df of the workspace), and
// Kubernetes holds a pod to its ephemeral-storage limit only by evicting
// it once the kubelet notices (it looks about every 10 s): a step that
// writes fast can put gigabytes more on the node first. Informative: it
// never fails.
func (e *Executor) checkDisk(ctx context.Context, sess executor.Session, ok func(string, string)) {
	var out bytes.Buffer
	_, err := sess.Exec(ctx, executor.Step{ID: "3", Name: "doctor disk", Script: "df -Pk " + Workspace + " | tail -n 1"}, &out)
	f := strings.Fields(out.String())
	detail := fmt.Sprintf("each job pod may use --disk %s (requests = limits); the kubelet enforces it by eviction only, about every 10 s, so a fast writer can put more on the node first: give /var/lib/kubelet a disk of its own, or nodes whose file system has project quotas (docs/kubernetes.md, \"How much disk a job can use\")", units.FormatSize(e.cfg.Disk))
	if err == nil && len(f) >= 6 {
		total, _ := strconv.ParseInt(f[1], 10, 64)
		free, _ := strconv.ParseInt(f[3], 10, 64)
		detail = fmt.Sprintf("the job pod's emptyDirs are on the node's %s (%s, %s free); ", f[0], units.FormatSize(roundGi(total<<10)), units.FormatSize(roundGi(free<<10))) + detail
	}
	ok("job disk", detail)
}

// roundGi rounds a size down to a whole GiB when it is larger than one.
func roundGi(n int64) int64 {
	if n > 1<<30 {
		return n / (1 << 30) * (1 << 30)
	}
	return n
}

// checkEnforcement probes, from inside the job pod (knotless-agent probe:
// no tool of the image needed), that cluster DNS answers and that the API
// server (its Service and the client configuration's address when that is
// private), the pod's node (the kubelet's port) and another pod of the
// namespace do not.
func (e *Executor) checkEnforcement(ctx context.Context, sess executor.Session, pod string, ok func(string, string), fail func(string, string, string)) {
	p, err := e.client.CoreV1().Pods(e.ns).Get(ctx, pod, metav1.GetOptions{})
	if err != nil {
		fail("network checks", err.Error(), "check the API server")
		return
	}
	type target struct{ what, probe string }
	targets := []target{{"the API server's Service", "tcp:kubernetes.default.svc:443"}}
	if u, err := url.Parse(e.rest.Host); err == nil {
		if ip := net.ParseIP(u.Hostname()); ip != nil && ip.IsPrivate() {
			port := u.Port()
			if port == "" {
				port = "443"
			}
			targets = append(targets, target{"the API server at " + u.Host, "tcp:" + net.JoinHostPort(ip.String(), port)})
		}
	}
	if p.Status.HostIP != "" {
		targets = append(targets, target{"the node " + p.Status.HostIP + " (a private address; kubelet port)", "tcp:" + net.JoinHostPort(p.Status.HostIP, "10250")})
	}
	if other := e.otherPod(ctx, p); other != "" {
		targets = append(targets, target{"another pod " + other, "tcp:" + net.JoinHostPort(other, "80")})
	}
	args := []string{AgentPath, "probe", "--timeout", "3s", "dns:kubernetes.default.svc"}
	for _, t := range targets {
		args = append(args, t.probe)
	}
	var out bytes.Buffer
	_, err = sess.Exec(ctx, executor.Step{ID: "2", Name: "doctor network", Script: strings.Join(args, " ")}, &out)
	if err != nil {
		fail("network checks", err.Error(), "see the runner's log (--log-level debug)")
		return
	}
	lines := map[string]string{}
	for _, l := range strings.Split(out.String(), "\n") {
		f := strings.Fields(l)
		if len(f) >= 3 {
			lines[f[0]+":"+f[1]] = strings.Join(f[2:], " ")
		}
	}
	dns := lines["dns:kubernetes.default.svc"]
	if strings.HasPrefix(dns, "ok ") {
		ok("DNS works in a job pod", "kubernetes.default.svc is "+strings.TrimPrefix(dns, "ok "))
	} else {
		fail("DNS works in a job pod", "kubernetes.default.svc: "+dns+strings.TrimSpace(out.String()),
			"let job pods reach the cluster DNS (kube-dns pods, and 169.254.20.10 for NodeLocal DNSCache) on port 53 UDP and TCP in the job-pod NetworkPolicy")
	}
	fix := fmt.Sprintf(policyFix, e.ns)
	for _, t := range targets {
		key := strings.Replace(t.probe, ":", " ", 1)
		kind, addr, _ := strings.Cut(key, " ")
		got := lines[kind+":"+addr]
		name := t.what + " unreachable from a job pod"
		switch {
		case strings.HasPrefix(got, "blocked"):
			ok(name, strings.TrimSpace(strings.TrimPrefix(got, "blocked")))
		case strings.HasPrefix(got, "reachable"):
			fail(name, "a job pod reached "+addr+" ("+strings.TrimPrefix(got, "reachable ")+")", fix)
		default:
			fail(name, "no answer from the probe: "+got, "see the runner's log (--log-level debug)")
		}
	}
}

// otherPod is the IP of a running pod of the namespace other than p (the
// runner's own, when it runs there), or "".
func (e *Executor) otherPod(ctx context.Context, p *corev1.Pod) string {
	list, err := e.client.CoreV1().Pods(e.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return ""
	}
	for _, o := range list.Items {
		if o.UID != p.UID && o.Status.PodIP != "" && !o.Spec.HostNetwork && o.Status.Phase == corev1.PodRunning {
			return o.Status.PodIP
		}
	}
	return ""
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(s, "\n")
	return l
}
