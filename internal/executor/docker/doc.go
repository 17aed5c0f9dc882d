// Package docker is the Docker executor: one hardened container per run,
// made through the Docker Engine API with the official Go SDK (API version
// negotiated, no `docker` CLI), with the step agent (knotless-agent,
// bind-mounted read-only from the runner's disk) as the container's PID 1.
// The whole run goes over one exec stream to the agent at a time
// (stream.go; the session is agentenv's, as on kube); the checkout is a
// bind mount of the runner's own directory, never copied. What is the
// docker executor's own is its agentenv.Driver (docker.go: how a container
// is made, found and listed; status.go: why it stopped).
//
// It must never put a secret in a container's or an exec's config, a label
// or a log (secrets travel inside the exec's STDIN stream only), never give
// a job container the docker socket, the host's network or a capability,
// and always remove what it made (containers by their labels, also after a
// crash).
package docker
