package e2e

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/deploy"
	"knotless.dev/knotless/internal/oidc"
	"knotless.dev/knotless/internal/testwait"
	"knotless.dev/knotless/test/kubetest"
)

// KubectlJobImage is a job image with busybox's sh and the test
// cluster's kubectl, for steps that deploy (built and imported by
// ensureKubectlImage).
const KubectlJobImage = "localhost/knotless/job-kubectl:1"

// ensureKubectlImage imports KubectlJobImage unless the cluster has it.
func ensureKubectlImage(t testing.TB, c *kubetest.Cluster) {
	t.Helper()
	if c.HasImage(t, KubectlJobImage) {
		return
	}
	files, err := deploy.BaseFiles()
	if err != nil {
		t.Fatal(err)
	}
	kubectl, err := filepath.EvalSymlinks(c.KubectlPath())
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, deploy.File{Path: "/usr/local/bin/kubectl", Mode: 0o755, Source: kubectl})
	archive := filepath.Join(t.TempDir(), "job-kubectl.tar")
	if err := deploy.WriteArchive(archive, deploy.Image{Ref: KubectlJobImage, Files: files, User: "1000:1000",
		Entrypoint: []string{"/bin/sh"}, Env: []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/tmp"}}); err != nil {
		t.Fatal(err)
	}
	c.ImportImage(t, archive)
}

// tokenHeader is how every token the server signs with key kid begins:
// its JWS header, base64url (golang-jwt writes alg, kid, typ in that
// order). Finding it anywhere means a token leaked there.
func tokenHeader(kid string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"RS256","kid":"`+kid+`","typ":"JWT"}`)) + "."
}

// currentKid is the kid the server in dataDir signs with now.
func currentKid(t testing.TB, dataDir string) string {
	t.Helper()
	kr, err := oidc.OpenKeyring(dataDir)
	if err != nil {
		t.Fatal(err)
	}
	set, err := kr.Keys()
	if err != nil {
		t.Fatal(err)
	}
	return set.Current().ID
}

// Every command of docs/oidc.md runs, in order and as written, against
// the local cluster, whose API server trusts the server (an https issuer
// behind a TLS front) with the guide's own issuer entry: a run of main
// applies a ConfigMap to the namespace its Role allows with the step's
// token alone, through server, runner (kube executor) and CLI; the same
// workflow on another branch is refused 403. Then: the audit log shows the
// request under the run's identity (user, group, run id), and the token is
// nowhere it must not be: not in the audit log (job pods' specs and
// events included), the runner's state and work directories, the step
// logs, the server's and the runner's logs.
func TestDocs_OIDCGuideRunsAsWritten(t *testing.T) {
	k := newKubeRunner(t)
	ensureKubectlImage(t, k.c)
	if out, err := k.c.Kubectl(context.Background(), "", "-n", k.ns, "apply", "-f",
		filepath.Join(moduleRoot, "deploy", "kubernetes", "base", "networkpolicy.yaml")); err != nil {
		t.Fatalf("apply the job-pod NetworkPolicy: %v\n%s", err, out)
	}
	w, front := oidcWorld(t, 30*time.Second)
	rid := w.registerRunner("oidc-guide")
	runner := w.startRunner(rid, append(k.args, "--memory", "256Mi")...)
	ns := "kt-oidc-" + randomHex(4)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		_, _ = k.c.Kubectl(ctx, "", "delete", "namespace", ns, "--ignore-not-found", "--timeout=150s")
	})
	vars := map[string]string{
		"KNOTLESS_SERVER":  w.url,
		"KNOTLESS_DATA":    w.data,
		"SERVER_CA_FILE":   front.caFile,
		"REPO":             w.repo,
		"NAMESPACE":        ns,
		"RUNNER_NAMESPACE": k.ns,
		"KUBE_SERVER":      "https://kubernetes.default.svc",
		"KUBE_CA_FILE":     filepath.Join(k.c.StateDir, "pki", "ca.crt"),
		"KUBECTL_IMAGE":    KubectlJobImage,
	}
	var first, rest strings.Builder
	var asked, wantSet []string
	cur := &first
	for _, b := range docBlocks(t, "docs/oidc.md") {
		if b.marker == "test: values" {
			for _, m := range exportName.FindAllStringSubmatch(b.text, -1) {
				asked = append(asked, m[1])
			}
		}
		if b.lang != "sh" || b.marker != "test" {
			continue
		}
		fmt.Fprintf(cur, ": '### docs/oidc.md:%d'\n%s", b.line, b.text)
		if strings.Contains(b.text, "> knotless-issuer.yaml") {
			cur = &rest // the API server is configured between the two
		}
	}
	for name := range vars {
		wantSet = append(wantSet, name)
	}
	sort.Strings(asked)
	sort.Strings(wantSet)
	if strings.Join(asked, " ") != strings.Join(wantSet, " ") {
		t.Fatalf("docs/oidc.md asks the reader to set %v; this test sets %v", asked, wantSet)
	}
	env := append(w.gitEnv(),
		"PATH="+binDir+string(os.PathListSeparator)+filepath.Dir(k.c.KubectlPath())+string(os.PathListSeparator)+os.Getenv("PATH"),
		"KUBECONFIG="+filepath.Join(k.c.StateDir, "admin.kubeconfig"),
		"XDG_CONFIG_HOME="+filepath.Join(w.home, ".config"), "KNOTLESS_TOKEN="+w.token)
	for name, v := range vars {
		env = append(env, name+"="+v)
	}
	runScript := func(script string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "bash", "-c", "set -euxo pipefail\n"+script)
		cmd.Dir, cmd.Env = w.src, env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("the guide failed: %v\n%s\nrunner log:\n%s", err, out, runner.output())
		}
		return string(out)
	}
	runScript(first.String())
	entry, err := os.ReadFile(filepath.Join(w.src, "knotless-issuer.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	_ = os.Remove(filepath.Join(w.src, "knotless-issuer.yaml"))
	k.c.TrustIssuer(t, w.url, string(entry))
	out := runScript(rest.String())

	main := w.git("rev-parse", "HEAD")
	if !strings.Contains(out, main) {
		t.Errorf("the guide's last kubectl did not print the commit %s:\n%s", main, out)
	}
	runs := w.runs(0)
	var onMain, onTry api.Run
	for _, r := range runs {
		switch r.Ref {
		case "refs/heads/main":
			onMain = r
		case "refs/heads/try":
			onTry = r
		}
	}
	if onMain.State != api.StateSucceeded || onTry.State != api.StateFailed {
		t.Fatalf("runs: main %s, try %s; want succeeded and failed", describe(onMain), describe(onTry))
	}
	tryLog := w.stepLog(onTry.ID, 1)
	if !strings.Contains(tryLog, "Forbidden") || !strings.Contains(tryLog, "knotless:repo:admin/app:ref:refs/heads/try") {
		t.Errorf("the run of another branch was not refused 403 as its own user:\n%s", tryLog)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ev, err := kubetest.SearchAuditLog(ctx, k.c.AuditLogPath, func(ev kubetest.AuditEvent) bool {
		return ev.ObjectRef != nil && ev.ObjectRef.Resource == "configmaps" && ev.ObjectRef.Namespace == ns &&
			ev.ObjectRef.Name == "deployed" && ev.Verb != "get" && ev.ResponseStatus != nil && ev.ResponseStatus.Code < 300
	})
	if err != nil {
		t.Fatalf("no audit event of the ConfigMap's change: %v", err)
	}
	if ev.User.Username != "knotless:repo:admin/app:ref:refs/heads/main" || !containsString(ev.User.Groups, "knotless:admin/app") ||
		strings.Join(ev.User.Extra["knotless.dev/run-id"], ",") != strconv.FormatInt(onMain.ID, 10) {
		t.Errorf("the audit log shows the change under %+v, want the run's identity (run %d)", ev.User, onMain.ID)
	}

	// Nowhere it must not be. Every token of the server's key begins with
	// the same header; the rotation at the guide's end made a new key.
	runner.signal(t, syscall.SIGTERM)
	runner.wait(t, time.Minute)
	kr, err := oidc.OpenKeyring(w.data)
	if err != nil {
		t.Fatal(err)
	}
	set, _ := kr.Keys()
	var leaks []string
	for _, key := range set.All() {
		leaks = append(leaks, tokenHeader(key.ID))
	}
	// The whole audit log, its rotated files too (the harness rotates it
	// at 200 MB: the live file alone may not hold this test's events), and
	// the ConfigMap's change found above must be among what was read.
	leaked, sawChange := map[string]bool{}, false
	lines, err := kubetest.ScanAuditLog(k.c.AuditLogPath, func(line []byte) {
		for _, l := range leaks {
			if bytes.Contains(line, []byte(l)) {
				leaked[l] = true
			}
		}
		sawChange = sawChange || bytes.Contains(line, []byte(`"auditID":"`+ev.AuditID+`"`))
	})
	if err != nil {
		t.Fatal(err)
	}
	if !sawChange {
		t.Fatalf("the scan of %d audit log lines did not read the ConfigMap's change (audit ID %s): it scanned the wrong log", lines, ev.AuditID)
	}
	for _, l := range leaks {
		if leaked[l] {
			t.Errorf("the audit log (request and response bodies: pods, events, configmaps) holds a token")
		}
		for _, p := range []*proc{w.server, runner} {
			if strings.Contains(p.output(), l) {
				t.Errorf("the log of %s holds a token", p.name)
			}
		}
		for _, id := range []int64{onMain.ID, onTry.ID} {
			if log := w.stepLog(id, 1); strings.Contains(log, l) {
				t.Errorf("the step log of run %d holds a token", id)
			}
		}
	}
	grepTree(t, rid.work, leaks...)
	grepTree(t, w.data, leaks...)
	events, err := k.c.Client.CoreV1().Events(k.ns).List(ctx, metav1.ListOptions{})
	if err == nil {
		for _, e := range events.Items {
			for _, l := range leaks {
				if strings.Contains(e.Message, l) {
					t.Errorf("event %s holds a token", e.Name)
				}
			}
		}
	}
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// The API server that trusts the server refuses, with the Role of main
// bound, every token that is not the main run's of the right audience
// while it is valid: another audience (401), an expired one (401), one
// started by an account that cannot push (401, the claim rule), one of
// another repository (403), and one signed by a key rotated out after its
// grace (401, once the API server fetched the keys again: it does when a
// token names a key it does not know). A valid token of main is accepted
// (the positive control). Tokens are signed here with the server's own
// key file, as the server signs them.
func TestOIDC_KubeAPIServerRefusesOtherAudienceExpiredUntrustedOtherRepoAndRotatedOutTokens(t *testing.T) {
	c := kubetest.Connect(t)
	w, front := oidcWorld(t, 30*time.Second)
	ns := c.RestrictedNamespace(t)
	const user = "knotless:repo:admin/app:ref:refs/heads/main"
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if _, err := c.Client.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "deployer"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "create", "update", "patch"}}}},
		metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Client.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "deploy-from-main"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "deployer"},
		Subjects: []rbacv1.Subject{{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: user}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	c.TrustIssuer(t, w.url, fmt.Sprintf(`- issuer:
    url: %s
    audiences: [https://kube.example]
    certificateAuthority: |
%s  claimValidationRules:
  - expression: claims.actor_can_push == true
    message: runs started by an account that cannot push to the repository get no access
  claimMappings:
    username: {claim: sub, prefix: "knotless:"}
    groups: {claim: repository, prefix: "knotless:"}
`, w.url, indent(string(front.caPEM), "      ")))

	kr, err := oidc.OpenKeyring(w.data)
	if err != nil {
		t.Fatal(err)
	}
	iss := &oidc.Issuer{URL: w.url, Keys: kr}
	mainClaims := func(iat time.Time) oidc.Claims {
		return oidc.Claims{Issuer: w.url, Subject: oidc.Subject("admin/app", "refs/heads/main", "push"), Audience: oidc.Audience{"https://kube.example"},
			IssuedAt: iat.Unix(), NotBefore: iat.Add(-oidc.ClockSkew).Unix(), ExpiresAt: iat.Add(10 * time.Minute).Unix(),
			ID: randomHex(8), Repository: "admin/app", RepositoryID: "1", RepositoryOwner: "admin", Ref: "refs/heads/main",
			RefType: "branch", Event: "push", Actor: "admin", ActorCanPush: true, RunID: "1", PipelineID: "1", Runner: "r"}
	}
	sign := func(cl oidc.Claims) string {
		tok, _, err := iss.Sign(cl, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	caData, err := os.ReadFile(filepath.Join(c.StateDir, "pki", "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	apply := func(tok string) error {
		cs, err := kubernetes.NewForConfig(&rest.Config{Host: c.Config.Host, BearerToken: tok, TLSClientConfig: rest.TLSClientConfig{CAData: caData}})
		if err != nil {
			t.Fatal(err)
		}
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "deployed-" + randomHex(4)}, Data: map[string]string{"k": "v"}}
		_, err = cs.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{})
		return err
	}
	now := time.Now()
	if err := apply(sign(mainClaims(now))); err != nil {
		t.Fatalf("a valid token of main is refused (the positive control): %v", err)
	}
	otherAud := mainClaims(now)
	otherAud.Audience = oidc.Audience{"https://vault.example"}
	expired := mainClaims(now.Add(-30 * time.Minute))
	untrusted := mainClaims(now)
	untrusted.ActorCanPush = false
	otherRepo := mainClaims(now)
	otherRepo.Subject, otherRepo.Repository, otherRepo.RepositoryID = oidc.Subject("admin/other", "refs/heads/main", "push"), "admin/other", "2"
	for _, tc := range []struct {
		name string
		cl   oidc.Claims
		want func(error) bool
	}{
		{"another audience", otherAud, apierrors.IsUnauthorized},
		{"expired", expired, apierrors.IsUnauthorized},
		{"started by an account that cannot push", untrusted, apierrors.IsUnauthorized},
		{"another repository", otherRepo, apierrors.IsForbidden},
	} {
		if err := apply(sign(tc.cl)); !tc.want(err) {
			t.Errorf("a token of %s: %v, want it refused (401 or 403 as named)", tc.name, err)
		}
	}

	// Rotation: a token of the old key works (the API server has the key),
	// the rotation keeps it published 5 s; once it is gone and the API
	// server met the new key (and so fetched the keys again), the old
	// key's token, still unexpired, is refused.
	old := sign(mainClaims(time.Now()))
	if err := apply(old); err != nil {
		t.Fatalf("a token of the current key is refused before the rotation: %v", err)
	}
	oldKid := currentKid(t, w.data)
	if out, err := exec.Command(serverBin(), "oidc-keys", "rotate", "--data", w.data, "--grace", "5s").CombinedOutput(); err != nil {
		t.Fatalf("oidc-keys rotate: %v\n%s", err, out)
	}
	testwait.Until(t, time.Minute, "the old key to leave the JWKS", func() (bool, string) {
		resp, err := front.client.Get(w.url + oidc.JWKSPath)
		if err != nil {
			return false, err.Error()
		}
		defer resp.Body.Close()
		var b bytes.Buffer
		_, _ = b.ReadFrom(resp.Body)
		return !strings.Contains(b.String(), oldKid), b.String()
	})
	// The API server fetches the keys again when it meets the new key's
	// kid, or at the latest once the keys' cache time (max-age 60 s) has
	// passed: it does not always do the first
	// (kubernetes/kubernetes#139769), and the full CI run once saw it
	// refuse the new key right after the rotation.
	var lastErr error
	testwait.Until(t, 2*time.Minute, "the API server to accept a token of the new key", func() (bool, string) {
		lastErr = apply(sign(mainClaims(time.Now())))
		if lastErr != nil {
			return false, lastErr.Error()
		}
		return true, ""
	})
	if err := apply(old); !apierrors.IsUnauthorized(err) {
		t.Errorf("a token of the key rotated out after its grace: %v, want 401", err)
	}
}
