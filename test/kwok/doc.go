// Package kwok runs a simulated Kubernetes cluster for the scale benchmark
// (bench/scale, `make bench-scale`): a throwaway control plane of its own
// (etcd, kube-apiserver, kube-scheduler from the local cluster's
// multi-call binary, test/cluster, on loopback ports picked at start, in
// one temporary directory), kwok (sigs.k8s.io/kwok, built into the same
// binary) faking its nodes and the pods bound to them, and PodHost playing the
// container runtime: a pod's first command and its execs run on this
// machine in a root of the pod's own, so the real step agent serves each
// pod.
//
// It must never touch the shared local cluster (test/cluster): its fake
// nodes would take the other tests' pods. It needs root (mount
// namespaces, chroot).
package kwok
