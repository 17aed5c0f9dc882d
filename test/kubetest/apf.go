package kubetest

import (
	"context"
	"testing"
	"time"

	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

// RejectingPriorityLevel makes an API Priority and Fairness priority level
// named knotless-throttle-NS with one share that rejects (429) what does
// not fit, and a FlowSchema sending the requests on pods of namespace ns
// by its ServiceAccount "runner" (a runner's identity) to it; both are
// removed when the test ends. It returns the level's UID (what the API
// server names in the X-Kubernetes-PF-PriorityLevel-UID header).
func (c *Cluster) RejectingPriorityLevel(t testing.TB, ns string) types.UID {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	name := "knotless-throttle-" + ns
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
					ServiceAccount: &flowcontrolv1.ServiceAccountSubject{Name: "runner", Namespace: ns}}},
				ResourceRules: []flowcontrolv1.ResourcePolicyRule{{
					Verbs: []string{"create", "get", "list", "watch", "delete", "patch"}, APIGroups: []string{""},
					Resources: []string{"pods"}, Namespaces: []string{ns}}},
			}},
		}}
	fc := c.Client.FlowcontrolV1()
	made, err := fc.PriorityLevelConfigurations().Create(ctx, plc, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = fc.PriorityLevelConfigurations().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	if _, err := fc.FlowSchemas().Create(ctx, fs, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = fc.FlowSchemas().Delete(context.Background(), name, metav1.DeleteOptions{}) })
	return made.UID
}
