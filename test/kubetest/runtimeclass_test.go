package kubetest_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	nodev1 "k8s.io/api/node/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"knotless.dev/knotless/test/kubetest"
)

// outcome records how a helper ended a test: Fatal and Skip stop the
// helper's goroutine as they stop a test's; everything else (Helper,
// Cleanup, Logf) goes to the real test.
type outcome struct {
	testing.TB
	mu            sync.Mutex
	failed, skips string
}

func (o *outcome) Fatal(args ...any)                 { o.end(&o.failed, fmt.Sprint(args...)) }
func (o *outcome) Fatalf(format string, args ...any) { o.end(&o.failed, fmt.Sprintf(format, args...)) }
func (o *outcome) Skip(args ...any)                  { o.end(&o.skips, fmt.Sprint(args...)) }
func (o *outcome) Skipf(format string, args ...any)  { o.end(&o.skips, fmt.Sprintf(format, args...)) }
func (o *outcome) end(field *string, msg string) {
	o.mu.Lock()
	*field = msg
	o.mu.Unlock()
	runtime.Goexit()
}

// run calls f with o in a goroutine of its own and waits for it.
func (o *outcome) run(f func(testing.TB)) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(o)
	}()
	<-done
}

// A RuntimeClass whose handler the node lacks: tests under it fail with
// KNOTLESS_TEST_CLUSTER_REQUIRED=1 (a broken sandbox must not pass for a
// skipped one), naming the kubelet's words, within seconds; they skip
// without it. A RuntimeClass the cluster does not have fails them with
// KNOTLESS_TEST_CLUSTER_REQUIRED=1 too (it used to skip, so the whole
// gVisor suite of make test could pass having run nothing) and skips
// without it, saying how to get it either way.
func TestRequireRuntimeClass_BrokenOrMissingFailsWhenRequiredSkipsOtherwise(t *testing.T) {
	c := kubetest.Connect(t)
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	name := "kt-broken-" + hex.EncodeToString(b)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := c.Client.NodeV1().RuntimeClasses().Create(ctx, &nodev1.RuntimeClass{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{kubetest.TestLabel: "kubetest"}},
		Handler:    "knotless-no-such-handler",
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.Client.NodeV1().RuntimeClasses().Delete(context.Background(), name, metav1.DeleteOptions{})
	})

	t.Setenv(kubetest.EnvRequired, "1")
	required := &outcome{TB: t}
	t0 := time.Now()
	required.run(func(tb testing.TB) { c.RequireRuntimeClass(tb, name) })
	if required.failed == "" || !strings.Contains(required.failed, `no runtime for \"knotless-no-such-handler\"`) {
		t.Errorf("required: failed %q, skipped %q; want a failure quoting the kubelet", required.failed, required.skips)
	}
	if took := time.Since(t0); took > time.Minute {
		t.Errorf("the probe took %s; the kubelet's event comes within seconds", took)
	}

	t.Setenv(kubetest.EnvRequired, "")
	optional := &outcome{TB: t}
	optional.run(func(tb testing.TB) { c.RequireRuntimeClass(tb, name) })
	if optional.failed != "" || !strings.Contains(optional.skips, "cannot run pods") {
		t.Errorf("not required: failed %q, skipped %q; want a skip saying why", optional.failed, optional.skips)
	}

	t.Setenv(kubetest.EnvRequired, "1")
	missing := &outcome{TB: t}
	missing.run(func(tb testing.TB) { c.RequireRuntimeClass(tb, "kt-no-such-class") })
	if missing.skips != "" || !strings.Contains(missing.failed, "no RuntimeClass kt-no-such-class") || !strings.Contains(missing.failed, "make cluster-down cluster-up") {
		t.Errorf("a missing RuntimeClass, required: failed %q, skipped %q; want a failure saying to restart the cluster", missing.failed, missing.skips)
	}

	t.Setenv(kubetest.EnvRequired, "")
	missingOptional := &outcome{TB: t}
	missingOptional.run(func(tb testing.TB) { c.RequireRuntimeClass(tb, "kt-no-such-class") })
	if missingOptional.failed != "" || !strings.Contains(missingOptional.skips, "no RuntimeClass kt-no-such-class") || !strings.Contains(missingOptional.skips, "make cluster-down cluster-up") {
		t.Errorf("a missing RuntimeClass, not required: failed %q, skipped %q; want a skip saying to restart the cluster", missingOptional.failed, missingOptional.skips)
	}
}
