package runner

import (
	"strconv"
	"strings"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/workflow"
)

// localeDefaults are the variables every step starts from, beneath the
// runner's --env-pass and --env and the workflow's env (all of which may
// set them): text in UTF-8 and times in UTC, whatever the runner's host
// or the image says, as on hosted CI runners.
var localeDefaults = map[string]string{"LANG": "C.UTF-8", "TZ": "UTC"}

// runEnv is the one place that builds the variables Knotless gives every
// step of the run (docs/workflow.md, "What every step sees"): CI,
// KNOTLESS and the KNOTLESS_* names, for the workflow wf and the
// checkout's path workdir in the environment. The runner operator's --env
// comes before them and the workflow's and step's env after (they win);
// HOME and TMPDIR are the executor's (the step agent adds them).
// Variables that do not apply (KNOTLESS_BRANCH on a tag run, the URLs of
// a run without server) are left out rather than set empty.
func (j *Job) runEnv(wf *workflow.Workflow, workdir string) map[string]string {
	env := map[string]string{
		"CI":                 "true",
		"KNOTLESS":           "true",
		"KNOTLESS_REPO":      j.Repo,
		"KNOTLESS_REF":       j.Ref,
		"KNOTLESS_SHA":       j.SHA,
		"KNOTLESS_PIPELINE":  strconv.FormatInt(j.Pipeline, 10),
		"KNOTLESS_RUN":       strconv.FormatInt(j.Run, 10),
		"KNOTLESS_WORKFLOW":  wf.Name,
		"KNOTLESS_WORKSPACE": workdir,
		"KNOTLESS_EXPORT":    strings.TrimRight(workdir, "/") + "/" + workflow.ExportFile,
		"KNOTLESS_ATTEMPT":   strconv.Itoa(max(j.Attempt, 1)),
	}
	if len(wf.Needs) > 0 {
		env["KNOTLESS_NEEDS"] = strings.TrimRight(workdir, "/") + "/" + workflow.NeedsDir
	}
	name, typ := api.RefName(j.Ref)
	set := func(k, v string) {
		if v != "" {
			env[k] = v
		}
	}
	set("KNOTLESS_REF_NAME", name)
	set("KNOTLESS_REF_TYPE", typ)
	switch typ {
	case api.RefBranch:
		env["KNOTLESS_BRANCH"] = name
	case api.RefTag:
		env["KNOTLESS_TAG"] = name
	}
	set("KNOTLESS_EVENT", j.Event)
	set("KNOTLESS_BEFORE_SHA", j.BeforeSHA)
	set("KNOTLESS_ACTOR", j.Actor)
	set("KNOTLESS_RUNNER", j.RunnerName)
	if j.ServerURL != "" {
		env["KNOTLESS_SERVER_URL"] = j.ServerURL
		env["KNOTLESS_RUN_URL"] = j.ServerURL + api.RunPath(j.Run)
	}
	return env
}
