package runner

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/goccy/go-yaml"
)

// SharedStepFile is the file a shared step's directory holds.
const SharedStepFile = "step.yml"

// SharedStep is a parsed step.yml: a reusable step referenced with `uses:`.
//
//	name: lint                  # optional
//	description: run the linter # optional
//	inputs:                     # optional; `with:` values, as KNOTLESS_INPUT_<NAME>
//	  level: {description: how strict, default: normal, required: false}
//	shell: bash -eo pipefail    # optional
//	env: {GOFLAGS: -mod=mod}    # optional
//	run: ./lint.sh "$KNOTLESS_INPUT_LEVEL"
type SharedStep struct {
	Name        string                 `yaml:"name"`
	Description string                 `yaml:"description"`
	Inputs      map[string]SharedInput `yaml:"inputs"`
	Shell       string                 `yaml:"shell"`
	Env         map[string]string      `yaml:"env"`
	Run         string                 `yaml:"run"`

	// Dir is the step's directory relative to the checkout, cleaned
	// ("lint/steps/x"); set by LoadSharedStep.
	Dir string `yaml:"-"`
}

// SharedInput declares one input of a shared step.
type SharedInput struct {
	Description string  `yaml:"description"`
	Default     *string `yaml:"default"`
	Required    bool    `yaml:"required"`
}

// LoadSharedStep reads the shared step `uses` names (a directory relative to
// the checkout, e.g. "./.knotless/steps/lint") from the checkout at root. It
// refuses paths that leave the checkout, also through symbolic links.
func LoadSharedStep(root, uses string) (*SharedStep, error) {
	rel := filepath.Clean(filepath.FromSlash(strings.TrimSpace(uses)))
	if uses == "" || filepath.IsAbs(rel) || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return nil, fmt.Errorf("uses: %q must be a directory inside the checkout, like ./.knotless/steps/NAME", uses)
	}
	realRoot, err := filepath.EvalSymlinks(root)
	if err != nil {
		return nil, fmt.Errorf("uses: %s: %w", uses, err)
	}
	file := filepath.Join(realRoot, rel, SharedStepFile)
	realFile, err := filepath.EvalSymlinks(file)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("uses: %s: no %s in that directory of the checkout", uses, SharedStepFile)
	}
	if err != nil {
		return nil, fmt.Errorf("uses: %s: %w", uses, err)
	}
	if r, err := filepath.Rel(realRoot, realFile); err != nil || r == ".." || strings.HasPrefix(r, ".."+string(filepath.Separator)) {
		return nil, fmt.Errorf("uses: %s: %s leads outside the checkout", uses, SharedStepFile)
	}
	data, err := os.ReadFile(realFile)
	if err != nil {
		return nil, fmt.Errorf("uses: %s: %w", uses, err)
	}
	var st SharedStep
	if err := yaml.UnmarshalWithOptions(data, &st, yaml.DisallowUnknownField()); err != nil {
		return nil, fmt.Errorf("uses: %s: %s: %s", uses, filepath.ToSlash(filepath.Join(rel, SharedStepFile)), yaml.FormatError(err, false, false))
	}
	if strings.TrimSpace(st.Run) == "" {
		return nil, fmt.Errorf("uses: %s: %s has no run: script", uses, SharedStepFile)
	}
	st.Dir = filepath.ToSlash(rel)
	return &st, nil
}

// InputEnv turns `with:` values into KNOTLESS_INPUT_<NAME> variables (NAME
// upper-cased, '-' and '.' as '_'), adding declared defaults and refusing
// unknown inputs (when the step declares any) and missing required ones.
func (st *SharedStep) InputEnv(with map[string]string) (map[string]string, error) {
	env := map[string]string{}
	var problems []string
	if len(st.Inputs) > 0 {
		for name := range with {
			if _, ok := st.Inputs[name]; !ok {
				problems = append(problems, fmt.Sprintf("unknown input %q", name))
			}
		}
	}
	for name, in := range st.Inputs {
		if _, ok := with[name]; ok {
			continue
		}
		switch {
		case in.Default != nil:
			env[InputEnvName(name)] = *in.Default
		case in.Required:
			problems = append(problems, fmt.Sprintf("input %q is required", name))
		}
	}
	for name, v := range with {
		env[InputEnvName(name)] = v
	}
	if len(problems) > 0 {
		sort.Strings(problems)
		return nil, fmt.Errorf("uses: %s: %s", st.Dir, strings.Join(problems, "; "))
	}
	return env, nil
}

// InputEnvName is the variable a `with:` input becomes.
func InputEnvName(name string) string {
	up := strings.ToUpper(name)
	up = strings.NewReplacer("-", "_", ".", "_", " ", "_").Replace(up)
	return "KNOTLESS_INPUT_" + up
}
