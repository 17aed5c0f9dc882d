package kube

import (
	"context"
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"knotless.dev/knotless/internal/executor"
	"knotless.dev/knotless/internal/executor/agentenv"
)

var _ executor.Finder = (*Executor)(nil)

// Find returns the handle of the running job pod of environment id made
// by this runner (labels LabelManagedBy, LabelRunner and LabelRun), for
// Recover: its namespace, name and UID; the checkout is not on this host,
// so Recover takes the pod only when the checkout arrived in it whole.
// A pod being deleted or ended is not found. A builds run's pod is
// looked for in the builds namespace too. Errors: the pods cannot be
// listed.
func (e *Executor) Find(ctx context.Context, id string) (executor.Handle, bool, error) {
	h, ok, err := e.findIn(ctx, id)
	if ok || err != nil || e.builds == nil {
		return h, ok, err
	}
	return e.builds.findIn(ctx, id) // a builds run's pod
}

// findIn is Find in this Executor's own namespace.
func (e *Executor) findIn(ctx context.Context, id string) (executor.Handle, bool, error) {
	sel := labels.SelectorFromSet(labels.Set{agentenv.LabelManagedBy: agentenv.ManagedBy, agentenv.LabelRunner: labelValue(e.cfg.Runner), agentenv.LabelRun: labelValue(id)})
	var list *corev1.PodList
	err := throttled(ctx, func() error {
		var err error
		list, err = e.client.CoreV1().Pods(e.ns).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
		return err
	})
	if err != nil {
		return executor.Handle{}, false, fmt.Errorf("find the job pod of %s: %w", id, err)
	}
	for _, p := range list.Items {
		if p.DeletionTimestamp != nil || !running(&p) {
			continue
		}
		data, err := json.Marshal(handleData{Namespace: e.ns, Pod: p.Name, UID: p.UID})
		if err != nil {
			return executor.Handle{}, false, err
		}
		return executor.Handle{Executor: Name, ID: id, Data: data}, true, nil
	}
	return executor.Handle{}, false, nil
}
