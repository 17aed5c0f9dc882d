package e2e

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strings"
	"testing"
	"time"

	"knotless.dev/knotless/internal/deploy"
	"knotless.dev/knotless/test/kubetest"
)

// guideBlock is one fenced shell block of a guide.
type guideBlock struct {
	line   int // of the opening fence, 1-based
	tested bool
	text   string
}

// guideBlocks returns the ```sh blocks of a Markdown file; a block right
// after a line "<!-- test -->" is tested.
func guideBlocks(t testing.TB, path string) []guideBlock {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var blocks []guideBlock
	var cur *guideBlock
	marked := false
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case cur != nil && strings.TrimSpace(line) == "```":
			blocks = append(blocks, *cur)
			cur = nil
		case cur != nil:
			cur.text += line + "\n"
		case strings.HasPrefix(line, "```sh"):
			cur = &guideBlock{line: n, tested: marked}
			marked = false
		case strings.TrimSpace(line) == "<!-- test -->":
			marked = true
		case strings.TrimSpace(line) != "":
			marked = false
		}
	}
	return blocks
}

var exportName = regexp.MustCompile(`(?m)^export ([A-Z_]+)=`)

// checkAsked fails t unless the variables a guide asks the reader to set
// are exactly those the test sets.
func checkAsked(t testing.TB, asked []string, vars map[string]string) {
	t.Helper()
	var set []string
	for k := range vars {
		set = append(set, k)
	}
	sort.Strings(asked)
	sort.Strings(set)
	if strings.Join(asked, " ") != strings.Join(set, " ") {
		t.Fatalf("the guide asks the reader to set %v; this test sets %v", asked, set)
	}
}

// Every command of docs/kubernetes.md marked for testing runs, in order and
// as written, in one shell against the local cluster: register, deploy,
// change the job machine, remove. The variables the guide asks the reader
// to set are set to the test's values (the same names, checked). The
// release is made as `make release` makes it (deploy.MakeRelease, outside
// the work tree: the guide's `make release` would rebuild every program
// into the checkout's dist/) and served, as the guide says, by the
// server's --release-dir.
func TestDocs_KubernetesGuideRunsAsWritten(t *testing.T) {
	c := kubetest.Connect(t)
	guide := filepath.Join(moduleRoot, "docs", "kubernetes.md")
	blocks := guideBlocks(t, guide)

	w, rel, url := releaseWorld(t, c)
	manifest, err := os.ReadFile(filepath.Join(moduleRoot, deploy.Manifest))
	if err != nil {
		t.Fatal(err)
	}
	if s := deploy.Stale(manifest, rel.Digests); s != "" {
		t.Fatalf("the guide deploys the manifest as it is, and its digests are stale: run `make deploy-digests`\n%s", s)
	}
	ns := "kt-guide-" + randomHex(4)
	vars := map[string]string{
		"KNOTLESS_SERVER":       w.url,
		"REPO":                  w.repo,
		"KNOTLESS_SOURCE":       moduleRoot,
		"KNOTLESS_DOWNLOAD_URL": url,
		"BASE_IMAGE":            RunnerBaseImage,
		"JOB_IMAGE":             kubetest.JobBaseImage,
		"NAMESPACE":             ns,
	}
	var script strings.Builder
	script.WriteString("set -euxo pipefail\n")
	var asked []string
	for _, b := range blocks {
		if !b.tested {
			if strings.Contains(b.text, "export KNOTLESS_SERVER=") {
				for _, m := range exportName.FindAllStringSubmatch(b.text, -1) {
					asked = append(asked, m[1])
				}
			}
			continue
		}
		fmt.Fprintf(&script, ": '### docs/kubernetes.md:%d'\n%s", b.line, b.text)
	}
	checkAsked(t, asked, vars)

	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		_, _ = c.Kubectl(ctx, "", "delete", "namespace", ns, "--ignore-not-found", "--timeout=150s")
	})
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", script.String())
	cmd.Dir = t.TempDir()
	cmd.Env = append(baseEnv(w.home),
		"PATH="+binDir+string(os.PathListSeparator)+filepath.Dir(c.KubectlPath())+string(os.PathListSeparator)+os.Getenv("PATH"),
		"KUBECONFIG="+filepath.Join(c.StateDir, "admin.kubeconfig"),
		"XDG_CONFIG_HOME="+filepath.Join(w.home, ".config"), "KNOTLESS_TOKEN="+w.token)
	for k, v := range vars {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the guide's commands failed: %v\n%s", err, out)
	}
	for _, want := range []string{
		"knotless-install: this pod's architecture: linux/" + runtime.GOARCH,
		"knotless-install: " + deploy.FileName("knotless-run", runtime.GOARCH) + " ok",
		"knotless-install: knotless-agent-linux-amd64 ok", "knotless-install: knotless-agent-linux-arm64 ok",
		"Removed runner k8s-ci",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the guide's commands did not print %q:\n%s", want, out)
		}
	}
}
