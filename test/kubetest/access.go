package kubetest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"

	"knotless.dev/knotless/internal/executor/kube"
)

const (
	// NamespacePrefix starts the generated name of every namespace
	// RestrictedNamespace makes, so leftovers are easy to find.
	NamespacePrefix = "kt-"
	// TestLabel marks objects this package creates (value "kubetest").
	TestLabel = "knotless.dev/test"

	// tokenLifetime is the lifetime requested for ServiceAccount tokens.
	tokenLifetime = time.Hour
	// setupTimeout bounds each setup wait (ServiceAccount, RBAC, deletion).
	setupTimeout = 2 * time.Minute
)

// PodRunnerRules is the Role a runner needs to run job pods in one
// namespace: one rule per permission of kube.Permissions (the table that
// says which code uses each), so that the tests' runners hold what the
// shipped Role grants and nothing more. It returns a new slice.
func PodRunnerRules() []rbacv1.PolicyRule {
	var rules []rbacv1.PolicyRule
	for _, p := range kube.Permissions {
		rules = append(rules, rbacv1.PolicyRule{APIGroups: []string{p.APIGroup}, Resources: []string{p.Resource}, Verbs: slices.Clone(p.Verbs)})
	}
	return rules
}

// ServiceAccountUser is the user name the API server (and its audit log)
// gives a ServiceAccount's tokens: system:serviceaccount:NAMESPACE:NAME.
func ServiceAccountUser(namespace, name string) string {
	return "system:serviceaccount:" + namespace + ":" + name
}

// RestrictedNamespace creates a namespace with a generated name (prefix
// "kt-") labelled for Pod Security "restricted" (enforce, audit and warn, at
// version "latest"), waits until its "default" ServiceAccount exists (the
// API server refuses pods before that), and returns its name. The namespace
// is deleted with background propagation when the test ends; the cleanup
// waits (bounded) until it is gone and fails the test if it is not.
func (c *Cluster) RestrictedNamespace(t testing.TB) string {
	t.Helper()
	return c.namespace(t, "restricted")
}

// BaselineNamespace is RestrictedNamespace at Pod Security "baseline":
// the builds namespace of container builds.
func (c *Cluster) BaselineNamespace(t testing.TB) string {
	t.Helper()
	return c.namespace(t, "baseline")
}

func (c *Cluster) namespace(t testing.TB, level string) string {
	t.Helper()
	ctx := stepContext(t, setupTimeout)
	ns, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName: NamespacePrefix,
			Labels: map[string]string{
				"pod-security.kubernetes.io/enforce":         level,
				"pod-security.kubernetes.io/enforce-version": "latest",
				"pod-security.kubernetes.io/audit":           level,
				"pod-security.kubernetes.io/audit-version":   "latest",
				"pod-security.kubernetes.io/warn":            level,
				"pod-security.kubernetes.io/warn-version":    "latest",
				TestLabel: "kubetest",
			},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create %s namespace: %v", level, err)
	}
	name := ns.Name
	t.Cleanup(func() { c.deleteNamespace(t, name) })

	err = wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		_, err := c.Client.CoreV1().ServiceAccounts(name).Get(ctx, "default", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return err == nil, err
	})
	if err != nil {
		t.Fatalf("wait for ServiceAccount %s/default (made by the controller-manager): %v", name, err)
	}
	return name
}

// deleteNamespace deletes the namespace's pods with a short grace period
// (so the namespace controller does not wait out 30 s for each), then the
// namespace, and waits until it is gone.
func (c *Cluster) deleteNamespace(t testing.TB, name string) {
	// t.Context() is already cancelled while cleanups run.
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	background := metav1.DeletePropagationBackground
	err := c.Client.CoreV1().Pods(name).DeleteCollection(ctx,
		metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](1), PropagationPolicy: &background},
		metav1.ListOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		t.Logf("delete pods of namespace %s: %v", name, err)
	}
	err = c.Client.CoreV1().Namespaces().Delete(ctx, name, metav1.DeleteOptions{PropagationPolicy: &background})
	if apierrors.IsNotFound(err) {
		return
	}
	if err != nil {
		t.Errorf("delete namespace %s: %v", name, err)
		return
	}
	var last *corev1.Namespace
	err = wait.PollUntilContextCancel(ctx, 500*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		ns, err := c.Client.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		last = ns
		return false, nil
	})
	if err != nil {
		status := "never read"
		if last != nil {
			status = fmt.Sprintf("phase %s, conditions %v", last.Status.Phase, last.Status.Conditions)
		}
		t.Errorf("namespace %s still present %s after deletion (last seen: %s)", name, setupTimeout, status)
	}
}

// ServiceAccountKubeconfig creates in namespace the ServiceAccount name, a
// Role name with rules, and a RoleBinding name granting the Role to the
// ServiceAccount; requests a bound token for it through the TokenRequest
// API (lifetime 1 h); and writes a kubeconfig holding only the API server
// address, the cluster CA and that token into t.TempDir(). It returns the
// file's path and the REST config loaded from it, once the API server's
// authorizer grants every verb and resource in rules (RBAC caches
// propagate asynchronously). The objects go with the namespace.
func (c *Cluster) ServiceAccountKubeconfig(t testing.TB, namespace, name string, rules []rbacv1.PolicyRule) (string, *rest.Config) {
	t.Helper()
	ctx := stepContext(t, setupTimeout)
	labels := map[string]string{TestLabel: "kubetest"}
	meta := metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: labels}

	if _, err := c.Client.CoreV1().ServiceAccounts(namespace).Create(ctx, &corev1.ServiceAccount{
		ObjectMeta:                   meta,
		AutomountServiceAccountToken: ptr.To(false),
	}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create ServiceAccount %s/%s: %v", namespace, name, err)
	}
	c.bindRole(ctx, t, namespace, name, namespace, rules)
	tok, err := c.Client.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, name, &authnv1.TokenRequest{
		Spec: authnv1.TokenRequestSpec{ExpirationSeconds: ptr.To(int64(tokenLifetime / time.Second))},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("request token for ServiceAccount %s/%s: %v", namespace, name, err)
	}

	ca := c.Config.CAData
	if len(ca) == 0 && c.Config.CAFile != "" {
		if ca, err = os.ReadFile(c.Config.CAFile); err != nil {
			t.Fatalf("read cluster CA: %v", err)
		}
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["knotless-test"] = &clientcmdapi.Cluster{Server: c.Config.Host, CertificateAuthorityData: ca}
	kc.AuthInfos[name] = &clientcmdapi.AuthInfo{Token: tok.Status.Token}
	kc.Contexts[name] = &clientcmdapi.Context{Cluster: "knotless-test", AuthInfo: name, Namespace: namespace}
	kc.CurrentContext = name
	path := filepath.Join(t.TempDir(), name+".kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatalf("write kubeconfig for ServiceAccount %s/%s: %v", namespace, name, err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		t.Fatalf("load kubeconfig %s: %v", path, err)
	}
	tuneConfig(cfg)
	if err := waitAllowed(ctx, cfg, namespace, rules); err != nil {
		t.Fatalf("ServiceAccount %s/%s: %v", namespace, name, err)
	}
	return path, cfg
}

// GrantRole gives the ServiceAccount saNamespace/saName a Role with rules
// in namespace (a Role and a RoleBinding named saName there), and waits
// until cfg (that ServiceAccount's configuration) is allowed all of them.
func (c *Cluster) GrantRole(t testing.TB, saNamespace, saName, namespace string, rules []rbacv1.PolicyRule, cfg *rest.Config) {
	t.Helper()
	ctx := stepContext(t, setupTimeout)
	c.bindRole(ctx, t, saNamespace, saName, namespace, rules)
	if err := waitAllowed(ctx, cfg, namespace, rules); err != nil {
		t.Fatalf("ServiceAccount %s/%s in %s: %v", saNamespace, saName, namespace, err)
	}
}

// bindRole makes a Role with rules and a RoleBinding of it to the
// ServiceAccount saNamespace/saName, both named saName, in namespace.
func (c *Cluster) bindRole(ctx context.Context, t testing.TB, saNamespace, saName, namespace string, rules []rbacv1.PolicyRule) {
	t.Helper()
	meta := metav1.ObjectMeta{Name: saName, Namespace: namespace, Labels: map[string]string{TestLabel: "kubetest"}}
	if _, err := c.Client.RbacV1().Roles(namespace).Create(ctx, &rbacv1.Role{ObjectMeta: meta, Rules: rules}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create Role %s/%s: %v", namespace, saName, err)
	}
	if _, err := c.Client.RbacV1().RoleBindings(namespace).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: meta,
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: saName, Namespace: saNamespace}},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: saName},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create RoleBinding %s/%s: %v", namespace, saName, err)
	}
}

// waitAllowed polls SelfSubjectAccessReviews as cfg's user until every
// (verb, resource) of rules is allowed in namespace.
func waitAllowed(ctx context.Context, cfg *rest.Config, namespace string, rules []rbacv1.PolicyRule) error {
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("make client: %w", err)
	}
	for _, r := range rules {
		if len(r.Resources) == 0 {
			continue // non-resource URLs cannot be granted by a Role
		}
		group := ""
		if len(r.APIGroups) > 0 {
			group = r.APIGroups[0]
		}
		name := ""
		if len(r.ResourceNames) > 0 {
			name = r.ResourceNames[0]
		}
		for _, res := range r.Resources {
			resource, sub, _ := strings.Cut(res, "/")
			for _, verb := range r.Verbs {
				attrs := &authzv1.ResourceAttributes{Namespace: namespace, Verb: verb, Group: group,
					Resource: resource, Subresource: sub, Name: name}
				var last string
				err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
					rev, err := client.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx,
						&authzv1.SelfSubjectAccessReview{Spec: authzv1.SelfSubjectAccessReviewSpec{ResourceAttributes: attrs}},
						metav1.CreateOptions{})
					if err != nil {
						last = err.Error()
						return false, nil
					}
					last = fmt.Sprintf("allowed=%v denied=%v reason=%q", rev.Status.Allowed, rev.Status.Denied, rev.Status.Reason)
					return rev.Status.Allowed, nil
				})
				if err != nil {
					return fmt.Errorf("wait until RBAC allows %s %s (last review: %s): %w", verb, res, last, err)
				}
			}
		}
	}
	return nil
}
