// Package metrics holds what knotless-server's and knotless-run's
// Prometheus metrics (client_golang) share: a registry with the Go and
// process collectors and knotless_build_info, the /metrics handler, and
// the rules that keep label values bounded (Reason, State, Code).
//
// It must never make a label of a run id, a runner or repository name, a
// message or any other free text: each label takes values from a small
// fixed set.
package metrics
