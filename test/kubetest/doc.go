// Package kubetest connects tests to the local single-node Kubernetes cluster
// that test/cluster brings up (make cluster-up), and holds the cluster's own
// smoke suite and benchmarks.
//
// It is a test-only helper: nothing outside _test.go files and other test
// helpers may import it. Connect returns an admin (system:masters) client for
// setup and checking only. Tests of the runner must talk to the cluster
// through a ServiceAccount kubeconfig made by ServiceAccountKubeconfig, never
// through the admin one, so that they see exactly the permissions a runner
// deployed with that Role would have.
//
// Everything a test creates lives in a namespace from RestrictedNamespace
// (Pod Security "restricted", prefix "kt-"), which is deleted when the test
// ends, so tests can run in parallel and leave nothing behind. Every wait is
// bounded and says, when it gives up, what it waited for and the last pod
// status and events it saw.
package kubetest
