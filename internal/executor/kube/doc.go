// Package kube is the kube executor: each run in a fresh, hardened pod of
// one namespace (podFor), with the step agent as its PID 1, delivered over
// the first exec (deliver.go) and reached over one pods/exec stream at a
// time (stream.go); steps run detached in the pod, so a runner that
// restarts re-attaches (Recover) at the next byte. The session and the
// skeletons of Prepare, Recover and Sweep are agentenv's; the kube
// executor's own is its agentenv.Driver (driver.go: how a pod is made,
// found and listed; status.go: why it stopped).
//
// Restarts lose no run: job pods are owned (garbage collection) not by
// the runner's pod but by the object --owner names, in the shipped
// manifests the runner's Deployment (owner.go states who owns them in
// every case, and why). The successor, with the same credential,
// recovers each pod the server says it holds by the pod's labels and
// UID, and re-points an owner reference that names another owner.
// Doctor (doctor.go) checks a namespace for all of this.
//
// It must never put a secret in a pod spec, a label, an annotation, an
// event or a command line (secrets travel on the exec's STDIN), never give
// a job pod a ServiceAccount token or a host path, and never read Secrets.
// The Kubernetes permissions it uses, each with the code that uses it,
// are one table, Permissions (permissions.go): the runner's Role grants
// exactly those, doctor checks them, and tests hold the shipped Roles and
// the package's API calls to it.
package kube
