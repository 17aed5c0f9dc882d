package e2e

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"knotless.dev/knotless/internal/api"
)

// rejectedBy reads, from the API server's metrics, how many requests API
// Priority and Fairness rejected for flow schema name.
func (k *kubeRunner) rejectedBy(t testing.TB, name string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	raw, err := k.c.Client.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`(?m)^apiserver_flowcontrol_rejected_requests_total\{[^}]*flow_schema="` + regexp.QuoteMeta(name) + `"[^}]*\} ([0-9.e+]+)$`)
	n := 0
	for _, m := range re.FindAllStringSubmatch(string(raw), -1) {
		f, _ := strconv.ParseFloat(m[1], 64)
		n += int(f)
	}
	return n
}

// TestE2E_KubeRunnerThrottledByAPIPriorityAndFairnessEndsEveryRunWithItsTrueResult:
// a FlowSchema gives the runner's identity (its non-exec requests on
// pods: create, get, list, watch, delete, patch) a priority level of one
// share that rejects what does not fit (429), and a runner with
// --capacity 8 runs eight runs at once: every run ends with its true
// result (seven succeed, one fails with its exit code), none for the
// throttling; the API server's metrics show it did reject the runner's
// requests (else the test proves nothing).
func TestE2E_KubeRunnerThrottledByAPIPriorityAndFairnessEndsEveryRunWithItsTrueResult(t *testing.T) {
	t.Parallel()
	k := newKubeRunner(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	name := "knotless-throttle-" + k.ns
	plc := &flowcontrolv1.PriorityLevelConfiguration{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: flowcontrolv1.PriorityLevelConfigurationSpec{Type: flowcontrolv1.PriorityLevelEnablementLimited,
			Limited: &flowcontrolv1.LimitedPriorityLevelConfiguration{
				NominalConcurrencyShares: ptr.To[int32](1), LendablePercent: ptr.To[int32](0), BorrowingLimitPercent: ptr.To[int32](0),
				LimitResponse: flowcontrolv1.LimitResponse{Type: flowcontrolv1.LimitResponseTypeReject},
			}}}
	fs := &flowcontrolv1.FlowSchema{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: flowcontrolv1.FlowSchemaSpec{
			PriorityLevelConfiguration: flowcontrolv1.PriorityLevelConfigurationReference{Name: name},
			MatchingPrecedence:         100,
			Rules: []flowcontrolv1.PolicyRulesWithSubjects{{
				Subjects: []flowcontrolv1.Subject{{Kind: flowcontrolv1.SubjectKindServiceAccount,
					ServiceAccount: &flowcontrolv1.ServiceAccountSubject{Name: "runner", Namespace: k.ns}}},
				ResourceRules: []flowcontrolv1.ResourcePolicyRule{{
					Verbs: []string{"create", "get", "list", "watch", "delete", "patch"}, APIGroups: []string{""},
					Resources: []string{"pods"}, Namespaces: []string{k.ns}}},
			}},
		}}
	fc := k.c.Client.FlowcontrolV1()
	if _, err := fc.PriorityLevelConfigurations().Create(ctx, plc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = fc.PriorityLevelConfigurations().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	if _, err := fc.FlowSchemas().Create(ctx, fs, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = fc.FlowSchemas().Delete(context.Background(), name, metav1.DeleteOptions{}) })

	w := newWorld(t, 30*time.Second)
	args := append(append([]string{}, k.args...), "--capacity", "8", "--cpus", "50m", "--memory", "64Mi")
	runner := w.startRunner(w.registerRunner("apf"), args...)
	files := map[string]string{}
	for i := 1; i <= 8; i++ {
		exit := 0
		if i == 8 {
			exit = 3
		}
		files[fmt.Sprintf(".knotless/workflows/w%d.yml", i)] = fmt.Sprintf("on: {push: {}}\nsteps:\n  - run: echo one %d; sleep 1\n  - run: echo two; exit %d\n", i, exit)
	}
	before := k.rejectedBy(t, name)
	runs := w.push(files, 8)
	for _, r := range runs {
		final := w.waitFinal(r.ID, 8*time.Minute)
		want, reason := api.StateSucceeded, ""
		if strings.HasSuffix(final.WorkflowPath, "w8.yml") {
			want, reason = api.StateFailed, api.ReasonExitCode
		}
		if final.State != want || final.Reason != reason {
			t.Errorf("%s: %s, want %s %s; runner log:\n%s", final.WorkflowPath, describe(final), want, reason, runner.output())
		}
	}
	rejected := k.rejectedBy(t, name) - before
	t.Logf("API Priority and Fairness rejected %d of the runner's requests", rejected)
	if rejected == 0 {
		t.Error("the FlowSchema never throttled the runner: the test proves nothing")
	}
}
