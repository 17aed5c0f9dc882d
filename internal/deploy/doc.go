// Package deploy builds what a release holds and deploy/kubernetes/
// installs: knotless-run, knotless-agent (and the server and the CLI) for
// linux/amd64 and linux/arm64, static, stamped with the VERSION file's
// version and reproducible (-trimpath, no VCS stamp); the SHA-256 digests
// the manifests' init container checks them against; the release
// directory (make release: the programs, SHA256SUMS and the manifests
// rendered in one file with kustomize's library); and the optional runner
// image (a one-layer image archive, no registry).
//
// It is a build tool (scripts/deploy and the tests use it); no program
// Knotless ships imports it. It must never write anything but the files it
// is told to: the manifest it updates, the release directory's files and
// the archive it makes.
package deploy
