package e2e

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"knotless.dev/knotless/test/kubetest"
)

// buildsDockerfile is the repository's own Dockerfile in the guide's test:
// two stages, ARG, RUN and COPY --from, FROM scratch with a static busybox
// (no image can be pulled here); the image has busybox's applets in /bin
// and a /greeting its build wrote.
const buildsDockerfile = `FROM scratch AS build
ARG GREETING=hello
COPY busybox /bin/busybox
RUN ["/bin/busybox", "sh", "-c", "/bin/busybox --install -s /bin && echo \"$GREETING from the image built by run 1\" > /greeting"]
FROM scratch
COPY --from=build /bin /bin
COPY --from=build /greeting /greeting
`

var digestLine = regexp.MustCompile(`image (\S+)@(sha256:[0-9a-f]{64}) \(from the needed runs' exports`)

// docs/container-builds.md's "Run the image you built", through a server
// and a kube runner whose operator allowed builds, as a user follows it:
// the page's two workflow files (its yaml blocks marked test: file) and a
// Dockerfile of the repository's are pushed by the page's commands; run 1
// builds in a builder, pushes to a registry with basic auth and exports the
// image's digest; run 2 needs it and runs in that image, pulled by digest
// with the runner's pull secret. The only changes to the page's files: the
// registry's address (the test's distribution registry) and
// registry.insecure=true (its certificate is its own).
func TestDocs_ContainerBuildsGuideRunsAsWritten(t *testing.T) {
	t.Parallel()
	k := newKubeRunner(t)
	c := k.c
	bns := c.BaselineNamespace(t)
	c.GrantRole(t, k.ns, "runner", bns, kubetest.PodRunnerRules(), k.rest)
	builder := c.BuilderImage(t)
	reg := c.Registry(t)
	pull := c.PullSecret(t, k.ns, reg)

	w := newWorld(t, 30*time.Second)
	rid := w.registerRunner("builds-1")
	runner := w.startRunner(rid, append(k.args, "--builds-namespace", bns, "--builder-image", builder, "--pull-secret", pull,
		"--cpus", "200m", "--memory", "512Mi", "--disk", "1Gi")...)

	// The repository: the page's workflows, the Dockerfile, busybox.
	files := 0
	for _, b := range docBlocks(t, "docs/container-builds.md") {
		path, ok := strings.CutPrefix(b.marker, "test: file ")
		if !ok {
			continue
		}
		text := strings.ReplaceAll(b.text, "registry.example.com/team", reg.Addr+"/team")
		text = strings.ReplaceAll(text, "push=true", "push=true,registry.insecure=true")
		writeFile(t, filepath.Join(w.src, path), text)
		files++
	}
	if files != 2 {
		t.Fatalf("docs/container-builds.md has %d blocks marked test: file, want the two workflows", files)
	}
	bb, err := os.ReadFile("/bin/busybox")
	if err != nil {
		t.Fatalf("the Dockerfile's busybox: %v (install busybox-static)", err)
	}
	writeFile(t, filepath.Join(w.src, "busybox"), string(bb))
	if err := os.Chmod(filepath.Join(w.src, "busybox"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(w.src, "Dockerfile"), buildsDockerfile)
	w.git("remote", "add", "origin", w.url+"/"+w.repo+".git")
	// The reader's own Docker config, which holds the registry's login.
	writeFile(t, filepath.Join(w.home, ".docker", "config.json"), string(reg.DockerConfig(reg.Password)))

	logs := t.TempDir()
	script := guideScript(t, logs, map[string]string{}, "docs/container-builds.md")
	env := append(w.gitEnv(), "PATH="+binDir+string(os.PathListSeparator)+os.Getenv("PATH"), "REPO="+w.repo, "KNOTLESS_SERVER="+w.url, "KNOTLESS_TOKEN="+w.token)
	out := runGuide(t, w.src, logs, script, env, nil, 8*time.Minute)

	r1, r2 := w.run(1), w.run(2)
	if r1.Workflow != "image" || r2.Workflow != "test" {
		t.Fatalf("runs 1 and 2 are %q and %q, want image and test\n%s", r1.Workflow, r2.Workflow, out)
	}
	m := digestLine.FindStringSubmatch(out)
	if m == nil || m[1] != reg.Addr+"/team/app" {
		t.Fatalf("run 2's setup log does not say which image it took from run 1's DIGEST:\n%s\nrunner:\n%s", out, runner.output())
	}
	if !strings.Contains(out, "exports: DIGEST") || !strings.Contains(out, "hello from the image built by run 1") {
		t.Errorf("run 1 exported no DIGEST, or run 2 did not run in the image it built:\n%s", out)
	}
}
