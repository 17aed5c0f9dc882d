// Package cluster is the harness that builds, starts and stops a real
// single-node Kubernetes cluster on this machine for Knotless's tests and for
// people trying Knotless: kube-apiserver, etcd, kube-controller-manager,
// kube-scheduler, kubelet, kube-proxy (one multi-call binary built from
// k8s.io/kubernetes v1.37.2), containerd 2 and runc built from their Go
// modules, gVisor's runsc for RuntimeClass gvisor, the bridge CNI
// plugin, kube-network-policies enforcing NetworkPolicies, and CoreDNS.
//
// Everything it writes lives in the state directory (default
// /var/lib/knotless-test-cluster) or the binary cache (default
// /var/cache/knotless-test-cluster); it starts processes by path and stops
// them by the pids it recorded. It never pulls an image: images are built
// locally (see Image) and imported into containerd.
//
// It must never be imported by the product's module: it lives in its own
// module so knotless.dev/knotless never depends on k8s.io/kubernetes.
package cluster
