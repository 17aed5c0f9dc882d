// Package deploy builds what deploy/kubernetes/ installs: knotless-run and
// knotless-agent built reproducibly (static, -trimpath, no VCS stamp), the
// SHA-256 digests the manifests' init container checks them against, and
// the optional runner image (a one-layer image archive, no registry).
//
// It is a build tool (scripts/deploy and the tests use it); no program
// Knotless ships imports it. It must never write anything but the files it is
// told to: the manifest it updates and the archive it makes.
package deploy
