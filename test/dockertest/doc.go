// Package dockertest connects tests to a real Docker engine (the tests'
// own, started by scripts/dockerd.sh up, or any engine DOCKER_HOST names)
// and builds the job image the Docker executor's tests use, locally (no
// registry): the same busybox rootfs as the local cluster's job-base
// image (test/cluster/images.go), imported through the Engine API.
//
// It is a test-only helper: nothing outside _test.go files and other test
// helpers may import it. Connect skips a test when no engine answers,
// or fails it under KNOTLESS_TEST_DOCKER_REQUIRED=1 (make test sets it).
package dockertest
