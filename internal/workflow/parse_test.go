package workflow

import (
	"errors"
	"fmt"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"
)

func mustParse(t *testing.T, path, src string) *Workflow {
	t.Helper()
	w, err := Parse(path, []byte(src))
	if err != nil {
		t.Fatalf("Parse(%s): %v", path, err)
	}
	return w
}

func TestParse_DesignExampleGivesExpectedWorkflow(t *testing.T) {
	src, err := os.ReadFile("testdata/design-example.yml")
	if err != nil {
		t.Fatal(err)
	}
	got := mustParse(t, ".knotless/workflows/test.yml", string(src))
	want := &Workflow{
		Path: ".knotless/workflows/test.yml",
		Name: "test",
		Base: "test",
		On: Triggers{
			Push:   &PushTrigger{Branches: []string{"main", "release/*"}, Tags: []string{"v*"}},
			Pull:   &PullTrigger{Branches: []string{"main"}},
			Manual: true,
		},
		Runners:   []string{"k8s-ci"},
		Image:     "golang:1.26",
		Env:       map[string]string{"CGO_ENABLED": "0"},
		Secrets:   []string{"CODECOV_TOKEN"},
		Timeout:   30 * time.Minute,
		Resources: Resources{CPUs: "2", MemoryBytes: 4 << 30, DiskBytes: 10 << 30},
		Checkout:  DefaultCheckout,
		Caches: []Cache{{
			Key:         `gomod-{{ hashFiles "go.sum" }}`,
			RestoreKeys: []string{"gomod-"},
			Paths:       []string{"~/go/pkg/mod"},
		}},
		Outputs: []string{"dist/", "coverage.out"},
		Steps: []Step{
			{Name: "build", Run: "go build ./..."},
			{
				Name:    "test",
				Run:     "go test ./... -coverprofile=coverage.out\n",
				Env:     map[string]string{"GOFLAGS": "-count=1"},
				Secrets: []string{"CODECOV_TOKEN"},
				Timeout: 10 * time.Minute,
			},
			{
				Name: "./.knotless/steps/lint",
				Uses: "./.knotless/steps/lint",
				With: map[string]string{"level": "strict"},
			},
		},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got\n%#v\nwant\n%#v", got, want)
	}
}

func TestParse_MinimalWorkflowGetsDefaults(t *testing.T) {
	w := mustParse(t, "repo/.knotless/workflows/ci.yaml", "steps:\n  - run: make test\n")
	if w.Name != "ci" {
		t.Errorf("Name = %q, want ci (file name without extension)", w.Name)
	}
	if w.Timeout != DefaultTimeout {
		t.Errorf("Timeout = %v, want %v", w.Timeout, DefaultTimeout)
	}
	if w.On.Push == nil || w.On.Push.Branches != nil || w.On.Push.Tags != nil || !w.On.Manual || w.On.Pull != nil {
		t.Errorf("On = %+v (push %+v), want push to every branch + manual", w.On, w.On.Push)
	}
	if len(w.Steps) != 1 || w.Steps[0].Name != "step 1" || w.Steps[0].Run != "make test" {
		t.Errorf("Steps = %+v", w.Steps)
	}
	if got := w.Steps[0].ShellCommand(); !reflect.DeepEqual(got, []string{"/bin/sh", "-e"}) {
		t.Errorf("ShellCommand = %q", got)
	}
}

func TestParse_ShellSplitOnSpaces(t *testing.T) {
	w := mustParse(t, "w.yml", "steps:\n  - run: echo hi\n    shell: bash  -eo   pipefail\n")
	if got := w.Steps[0].ShellCommand(); !reflect.DeepEqual(got, []string{"bash", "-eo", "pipefail"}) {
		t.Errorf("ShellCommand = %q", got)
	}
	if w.Steps[0].Shell != "bash -eo pipefail" {
		t.Errorf("Shell = %q", w.Steps[0].Shell)
	}
}

func TestParse_OnVariants(t *testing.T) {
	tests := []struct {
		on   string
		want Triggers
	}{
		{"on: {push: }", Triggers{Push: &PushTrigger{}}},
		{"on: {manual: {}}", Triggers{Manual: true}},
		{"on: {manual: true, push: {tags: [v*]}}", Triggers{Manual: true, Push: &PushTrigger{Tags: []string{"v*"}}}},
		{"on: {push: {branches: [], tags: [v*]}}", Triggers{Push: &PushTrigger{Branches: []string{}, Tags: []string{"v*"}}}},
		{"on: {pull: }", Triggers{Pull: &PullTrigger{}}},
		{"on:\n  pull:\n    branches: [main]\n  manual:", Triggers{Pull: &PullTrigger{Branches: []string{"main"}}, Manual: true}},
	}
	for _, tc := range tests {
		w := mustParse(t, "w.yml", tc.on+"\nsteps: [{run: x}]\n")
		if !reflect.DeepEqual(w.On, tc.want) {
			t.Errorf("%q: On = %s, want %s", tc.on, showTriggers(w.On), showTriggers(tc.want))
		}
	}
}

func showTriggers(t Triggers) string {
	return fmt.Sprintf("{push %+v pull %+v manual %v}", t.Push, t.Pull, t.Manual)
}

func TestParse_AnchorsAliasesAndMergeKeys(t *testing.T) {
	src := `env: &common
  GOFLAGS: -mod=readonly
  CGO_ENABLED: "0"
steps:
  - &go
    run: go build ./...
    timeout: 5m
  - <<: *go
    run: go vet ./...
    env:
      <<: *common
      CGO_ENABLED: "1"
`
	w := mustParse(t, "w.yml", src)
	if len(w.Steps) != 2 || w.Steps[1].Run != "go vet ./..." || w.Steps[1].Timeout != 5*time.Minute {
		t.Fatalf("steps = %+v", w.Steps)
	}
	want := map[string]string{"GOFLAGS": "-mod=readonly", "CGO_ENABLED": "1"}
	if !reflect.DeepEqual(w.Steps[1].Env, want) {
		t.Errorf("merged env = %v, want %v", w.Steps[1].Env, want)
	}
}

func TestParse_StrTagMakesNumberAString(t *testing.T) {
	w := mustParse(t, "w.yml", "env: {V: !!str 1.10}\nsteps: [{run: x}]\n")
	if w.Env["V"] != "1.10" {
		t.Errorf("V = %q, want 1.10 as written", w.Env["V"])
	}
}

func TestParse_BOMIsIgnored(t *testing.T) {
	mustParse(t, "w.yml", "\ufeffsteps: [{run: x}]\n")
}

func TestParse_ReturnsErrorListOfErrors(t *testing.T) {
	_, err := Parse("dir/w.yml", []byte("steps: [{run: x, foo: 1}]\nbar: 2\n"))
	var list ErrorList
	if !errors.As(err, &list) || len(list) != 2 {
		t.Fatalf("err = %#v, want ErrorList of 2", err)
	}
	if got := err.Error(); !strings.HasPrefix(got, "dir/w.yml:1:18: unknown key \"foo\" in step 1") ||
		!strings.Contains(got, "\ndir/w.yml:2:1: unknown key \"bar\" in the workflow") {
		t.Errorf("Error() = %q", got)
	}
	if l := LintFile("dir/w.yml", []byte("steps: [{run: x}]\n")); l != nil {
		t.Errorf("LintFile on a valid file = %v, want nil", l)
	}
}

func TestParse_AliasBombIsRefusedQuickly(t *testing.T) {
	var b strings.Builder
	b.WriteString("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n")
	for i := 1; i < 12; i++ {
		fmt.Fprintf(&b, "a%d: &a%d [", i, i)
		for j := 0; j < 10; j++ {
			if j > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "*a%d", i-1)
		}
		b.WriteString("]\n")
	}
	b.WriteString("steps: [{run: x}]\n")
	start := time.Now()
	_, err := Parse("w.yml", []byte(b.String()))
	if err == nil || !strings.Contains(err.Error(), "aliases expand to more than") {
		t.Fatalf("err = %v", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("took %v", d)
	}
}

func TestParse_TooLargeFileIsRefused(t *testing.T) {
	src := "steps: [{run: x}]\n#" + strings.Repeat("x", MaxFileSize)
	_, err := Parse("w.yml", []byte(src))
	if err == nil || !strings.Contains(err.Error(), "w.yml:1:1: workflow file is") {
		t.Fatalf("err = %v", err)
	}
}

func TestRenderCacheKey(t *testing.T) {
	var calls [][]string
	got, err := RenderCacheKey(`gomod-{{ hashFiles "go.sum" "x/go.sum" }}-v1`, func(p ...string) (string, error) {
		calls = append(calls, p)
		return "abc", nil
	})
	if err != nil || got != "gomod-abc-v1" {
		t.Fatalf("got %q, %v", got, err)
	}
	if !reflect.DeepEqual(calls, [][]string{{"go.sum", "x/go.sum"}}) {
		t.Errorf("hashFiles calls = %q", calls)
	}
	boom := errors.New("boom")
	if _, err := RenderCacheKey(`k-{{ hashFiles "a" }}`, func(...string) (string, error) { return "", boom }); !errors.Is(err, boom) {
		t.Errorf("err = %v, want wrapping boom", err)
	}
	if _, err := RenderCacheKey(`k-{{ .Env }}`, func(...string) (string, error) { return "", nil }); err == nil {
		t.Errorf("a key with {{ .Env }} rendered")
	}
}

// The YAML parser is slow on some shapes (quadratic in the entries of one
// mapping, worse in flow nesting); these inputs used to take seconds to
// minutes and must now be refused at once.
func TestParse_HostileShapesAreRefusedQuickly(t *testing.T) {
	var keys strings.Builder
	for i := 0; keys.Len() < MaxFileSize-16; i++ {
		fmt.Fprintf(&keys, "%x:\n", i)
	}
	tests := map[string]struct{ src, want string }{
		"DeepFlowNesting": {strings.Repeat("[", 60000), "1:33: [ ] and { } nest deeper than 32 levels"},
		"ManyKeys":        {keys.String(), "2501:4: workflow file has more than 2500 keys and list entries"},
		"ManyDashes":      {strings.Repeat("- ", 60000), "1:5001: workflow file has more than 2500 keys"},
		"ManyTokens":      {strings.Repeat("&a ", 40000), "1:45001: workflow file has more than 30000 YAML tokens"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			start := time.Now()
			_, err := Parse("w.yml", []byte(tc.src))
			if err == nil || !strings.Contains(err.Error(), "w.yml:"+tc.want) {
				t.Fatalf("err = %.300v\nwant w.yml:%s", err, tc.want)
			}
			if d := time.Since(start); d > 2*time.Second {
				t.Errorf("took %v", d)
			}
		})
	}
}

func TestParse_CheckoutDefaultsAndSettings(t *testing.T) {
	w, err := Parse("w.yml", []byte("steps: [{run: x}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if w.Checkout != DefaultCheckout || !w.Checkout.Tags || w.Checkout.Depth != 0 || w.Checkout.Submodules != SubmodulesNone {
		t.Errorf("default checkout = %+v", w.Checkout)
	}
	for src, want := range map[string]Checkout{
		"checkout: {depth: 1, tags: false}": {Depth: 1},
		"checkout: {submodules: true}":      {Tags: true, Submodules: SubmodulesTop},
		"checkout: {submodules: recursive}": {Tags: true, Submodules: SubmodulesRecursive},
		"checkout: {submodules: false}":     {Tags: true},
		"checkout:":                         DefaultCheckout,
		"checkout: {depth: 50, tags: true}": {Depth: 50, Tags: true},
	} {
		w, err := Parse("w.yml", []byte(src+"\nsteps: [{run: x}]\n"))
		if err != nil {
			t.Errorf("%s: %v", src, err)
			continue
		}
		if w.Checkout != want {
			t.Errorf("%s: checkout = %+v, want %+v", src, w.Checkout, want)
		}
	}
}

// `id-tokens:` defines tokens with their audience (one or several, or none
// for the server's URL) and lifetime (default DefaultIDTokenLifetime); a
// step gets the ones it lists, and IDTokenNames lists those any step asks
// for.
func TestParse_IDTokensWithDefaultsAndTheStepsThatAskForThem(t *testing.T) {
	w, err := Parse("w.yml", []byte(`timeout: 2h
id-tokens:
  DEPLOY_TOKEN:
    aud: https://kube.example
    lifetime: 1h30m
  SIGN: {aud: [sigstore, "https://vault.example:8200"]}
  PLAIN: {}
  BARE:
steps:
  - run: deploy
    id-tokens: [DEPLOY_TOKEN, SIGN]
  - run: test
  - uses: ./.knotless/steps/x
    id-tokens: [PLAIN]
`))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]IDToken{
		"DEPLOY_TOKEN": {Audience: []string{"https://kube.example"}, Lifetime: 90 * time.Minute},
		"SIGN":         {Audience: []string{"sigstore", "https://vault.example:8200"}, Lifetime: DefaultIDTokenLifetime},
		"PLAIN":        {Lifetime: DefaultIDTokenLifetime},
		"BARE":         {Lifetime: DefaultIDTokenLifetime},
	}
	if !reflect.DeepEqual(w.IDTokens, want) {
		t.Errorf("IDTokens = %+v, want %+v", w.IDTokens, want)
	}
	if got := w.Steps[0].IDTokens; !reflect.DeepEqual(got, []string{"DEPLOY_TOKEN", "SIGN"}) {
		t.Errorf("step 1 id-tokens %v", got)
	}
	if w.Steps[1].IDTokens != nil {
		t.Errorf("step 2 asked for nothing, has %v", w.Steps[1].IDTokens)
	}
	if got := w.IDTokenNames(); !reflect.DeepEqual(got, []string{"DEPLOY_TOKEN", "SIGN", "PLAIN"}) {
		t.Errorf("IDTokenNames %v", got)
	}
}

// TestParse_ContainerBuildsIsABoolean pins `container-builds:` (issue 34):
// true asks for a builder, it is false when omitted, and anything but a
// boolean is an error at its line and column.
func TestParse_ContainerBuildsIsABoolean(t *testing.T) {
	w, err := Parse(".knotless/workflows/img.yml", []byte("container-builds: true\nsteps:\n  - run: buildctl --version\n"))
	if err != nil || !w.ContainerBuilds {
		t.Fatalf("container-builds: true: %+v %v", w, err)
	}
	if w, err := Parse(".knotless/workflows/img.yml", []byte("steps:\n  - run: make\n")); err != nil || w.ContainerBuilds {
		t.Errorf("omitted: %v %v, want false", w.ContainerBuilds, err)
	}
	_, err = Parse(".knotless/workflows/img.yml", []byte("container-builds: yes please\nsteps:\n  - run: make\n"))
	if err == nil || !strings.Contains(err.Error(), ".knotless/workflows/img.yml:1:19: container-builds must be true or false") {
		t.Errorf("a string: %v", err)
	}
}
