package builder

import _ "embed"

// SeccompProfile is the builder's seccomp profile (JSON, the format both
// the kubelet's Localhost profiles and the Docker engine's
// --security-opt seccomp= read): RuntimeDefault plus what BuildKit and
// runc do in the builder's nested namespace (docs/container-builds.md,
// "What the builder may do beyond a restricted pod"). The docker
// executor hands it to the engine with each builder container; kube
// nodes get the same bytes from deploy/kubernetes/builds (the DaemonSet
// writes builder-seccomp.json). seccomp.json is a copy of that file,
// because go:embed reads no file outside this package's directory:
// `make builder-seccomp` writes both, and a test holds the two equal.
//
//go:embed seccomp.json
var SeccompProfile string
