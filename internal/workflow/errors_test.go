package workflow

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// Each case lists every error Parse must report, as "LINE:COL: substring
// of the message", in order. Positions are exact: a message that points
// at the wrong place is a bug.
var errorCases = []struct {
	name string
	src  string
	want []string
}{
	{"EmptyFile", "", []string{"1:1: workflow file is empty"}},
	{"OnlyComments", "# nothing\n\n", []string{"1:1: workflow file is empty"}},
	{"TopLevelList", "- run: x\n", []string{"1:1: the workflow file must be a mapping (key: value); got a list"}},
	{"TopLevelScalar", "\n  hello\n", []string{"2:3: the workflow file must be a mapping (key: value); got a string"}},
	{"TwoDocuments", "steps: [{run: x}]\n---\nsteps: [{run: y}]\n", []string{"2:1: a second YAML document starts here"}},
	{"SyntaxUnclosedFlow", "steps: [{run: x}\n", []string{"1:8: invalid YAML: sequence end token ']' not found"}},
	{"SyntaxTabIndent", "steps:\n\t- run: x\n", []string{"2:1: cannot start any token (indent YAML with spaces, not tabs)"}},
	{"InvalidUTF8", "steps:\n  - run: é\xff\n", []string{"2:11: workflow file is not valid UTF-8"}},
	{"NULByte", "steps:\n  - run: a\x00\n", []string{"2:11: workflow file contains a NUL byte"}},
	{"UnknownTopKeySuggests", "name: x\nstpes:\n  - run: x\n", []string{
		"1:1: missing steps",
		`2:1: unknown key "stpes" in the workflow; did you mean "steps"? (expected one of: name, on, matrix, needs, runners, image, arch, container-builds, services, env, secrets, timeout, resources, checkout, caches, outputs, retry, concurrency, id-tokens, steps)`,
	}},
	{"ServiceErrors", "secrets: [PW]\nservices:\n  Bad_Name: {image: x}\n  job: {image: x}\n  db:\n    env: {A: b}\n    secrets: [PW, OTHER]\n    ports: [5432, 70000, x]\n    imag: y\nsteps: [{run: x}]\n", []string{
		`3:3: service name "Bad_Name": use 1-30 lower-case letters`,
		`4:3: service name job is the job's own container`,
		`5:3: service db has no image:`,
		`5:3: service db asks for secrets but gives no command:`,
		`7:19: secret OTHER is not listed in the workflow's secrets`,
		`8:19: service db ports: 70000 is not a port number (1-65535)`,
		`8:26: service db ports: want a port number (1-65535); got a string`,
		`9:5: unknown key "imag" in service db; did you mean "image"?`,
	}},
	{"ServicesNotAMapping", "services: [postgres]\nsteps: [{run: x}]\n", []string{`1:11: services must be a mapping`}},
	{"ArchUnknown", "arch: aarch64\nsteps: [{run: x}]\n", []string{`1:7: arch "aarch64": want one of amd64, arm64, 386, arm, ppc64le, s390x, riscv64 (the names Go and Kubernetes use: kubernetes.io/arch)`}},
	{"UnknownKeyNoSuggestion", "steps: [{run: x}]\nversion: 1\n", []string{`2:1: unknown key "version" in the workflow; expected one of: name,`}},
	{"UnknownStepKey", "steps:\n  - run: x\n    continue_on_error: true\n", []string{`3:5: unknown key "continue_on_error" in step 1; did you mean "continue-on-error"?`}},
	{"UnknownOnKey", "on:\n  puhs: {}\nsteps: [{run: x}]\n", []string{"1:1: on selects no event", `2:3: unknown key "puhs" in on; did you mean "push"?`}},
	{"UnknownPushKey", "on:\n  push:\n    branch: [main]\nsteps: [{run: x}]\n", []string{`3:5: unknown key "branch" in on.push; did you mean "branches"?`}},
	{"UnknownResourceKey", "resources: {cpu: 2}\nsteps: [{run: x}]\n", []string{`1:13: unknown key "cpu" in resources; did you mean "cpus"?`}},
	{"UnknownCacheKey", "caches:\n  - key: k\n    path: [a]\nsteps: [{run: x}]\n", []string{
		"2:5: cache 1 has no paths:",
		`3:5: unknown key "path" in cache 1; did you mean "paths"?`,
	}},
	{"CacheKeyHashFilesPatternOutsideCheckout", "caches:\n  - key: k-{{ hashFiles \"go.sum\" \"../x.lock\" }}\n    paths: [a]\nsteps: [{run: x}]\n", []string{
		`2:10: cache 1 key: hashFiles pattern "../x.lock" leaves the checkout`,
	}},
	{"CacheKeyHashFilesAbsolutePattern", "caches:\n  - key: \"{{ hashFiles \\\"/etc/passwd\\\" }}\"\n    paths: [a]\nsteps: [{run: x}]\n", []string{
		`2:10: cache 1 key: hashFiles pattern "/etc/passwd" is absolute`,
	}},
	{"CachePathsOutsideTheirRoot", "caches:\n  - key: k\n    paths: [/etc, ../up, ~/../x, ~root/y, ok, ~/.cache/go-build]\nsteps: [{run: x}]\n", []string{
		`3:13: cache 1 paths: "/etc" is absolute; cache paths are relative to the checkout, or start with ~/ for HOME`,
		`3:19: cache 1 paths: "../up" leaves the checkout`,
		`3:26: cache 1 paths: "~/../x" leaves HOME`,
		`3:34: cache 1 paths: "~root/y" names another user's home`,
	}},
	{"DuplicateKey", "steps: [{run: x}]\nname: a\nname: b\n", []string{`3:1: duplicate key "name" in the workflow file (first at 2:1)`}},
	{"DuplicateStepKey", "steps:\n  - run: a\n    run: b\n", []string{`3:5: duplicate key "run" in step 1 (first at 2:5)`}},
	{"StepsMissing", "\nname: x\n", []string{"2:1: missing steps"}},
	{"StepsEmptyList", "steps: []\n", []string{"1:8: steps is empty"}},
	{"StepsNull", "steps:\n", []string{"1:1: steps is empty"}},
	{"StepsNotAList", "steps: {run: x}\n", []string{"1:8: steps must be a list"}},
	{"StepNotAMapping", "steps:\n  - make test\n", []string{"2:5: step 1 must be a mapping (key: value); got a string"}},
	{"StepEmptyEntry", "steps:\n  - run: x\n  -\n", []string{"3:3: step 2 must be a mapping (key: value); got null"}},
	{"StepNeitherRunNorUses", "steps:\n  - run: a\n  - name: b\n    timeout: 1m\n", []string{"3:5: step 2 needs run (a script) or uses (a shared step)"}},
	{"StepBothRunAndUses", "steps:\n  - uses: ./s\n    run: a\n", []string{"3:5: step 1 has both run and uses"}},
	{"WithWithoutUses", "steps:\n  - run: a\n    with: {x: y}\n", []string{"3:5: step 1 with is only for shared steps (uses)"}},
	{"ShellWithUses", "steps:\n  - uses: ./s\n    shell: bash\n", []string{"3:5: step 1 shell is only for scripts (run)"}},
	{"RunEmpty", "steps:\n  - run: \"  \"\n", []string{"2:10: step 1 run is empty"}},
	{"RunNumber", "steps:\n  - run: 42\n", []string{`2:10: step 1 run must be a string; got a number, quote it: "42"`}},
	{"UsesNotLocal", "steps:\n  - uses: actions/checkout@v4\n", []string{`2:11: step 1 uses: "actions/checkout@v4" must be a directory of the repository starting with ./`}},
	{"UsesEscapes", "steps:\n  - uses: ./../x\n", []string{`2:11: step 1 uses: "./../x" leaves the repository`}},
	{"WithValueNumber", "steps:\n  - uses: ./s\n    with:\n      level: 3\n", []string{`4:14: step 1 with level must be a string; got a number, quote it: "3"`}},
	{"EnvValueNumber", "env:\n  CGO_ENABLED: 0\nsteps: [{run: x}]\n", []string{`2:16: env variable CGO_ENABLED must be a string; got a number, quote it: "0"`}},
	{"EnvValueBool", "env: {DEBUG: true}\nsteps: [{run: x}]\n", []string{`1:14: env variable DEBUG must be a string; got a boolean, quote it: "true"`}},
	{"EnvValueNull", "env:\n  EMPTY:\nsteps: [{run: x}]\n", []string{"2:3: env variable EMPTY has no value; expected a string"}},
	{"EnvValueMapping", "env:\n  X: {a: b}\nsteps: [{run: x}]\n", []string{"2:6: env variable X must be a string; got a mapping"}},
	{"EnvBadName", "env:\n  my-var: x\nsteps: [{run: x}]\n", []string{`2:3: "my-var" in env is not a valid variable name`}},
	{"EnvReservedName", "env:\n  KNOTLESS_REF: x\nsteps: [{run: x}]\n", []string{"2:3: KNOTLESS_REF in env is reserved"}},
	{"EnvNotAMapping", "env: [A=1]\nsteps: [{run: x}]\n", []string{"1:6: env must be a mapping (key: value); got a list"}},
	{"StepEnvNumber", "steps:\n  - run: x\n    env: {N: 1.5}\n", []string{`3:14: step 1 env variable N must be a string; got a number, quote it: "1.5"`}},
	{"SecretNotAtWorkflowLevel", "secrets: [A]\nsteps:\n  - run: x\n    secrets: [A, B]\n", []string{
		"4:18: secret B is not listed in the workflow's secrets; add it there too (secrets: [B])",
	}},
	{"SecretBadName", "secrets: [ok, 9lives]\nsteps: [{run: x}]\n", []string{`1:15: secret name "9lives" in secrets is not a valid variable name`}},
	{"SecretListedTwice", "secrets:\n  - A\n  - A\nsteps: [{run: x}]\n", []string{`3:5: secrets lists "A" twice (first at 2:5)`}},
	{"SecretAlsoEnv", "secrets: [TOKEN]\nenv:\n  TOKEN: x\nsteps: [{run: x}]\n", []string{"3:3: TOKEN is both a secret and an env variable of the workflow"}},
	{"StepSecretAlsoStepEnv", "secrets: [T]\nsteps:\n  - run: x\n    secrets: [T]\n    env: {T: y}\n", []string{"5:11: T is both a secret and an env variable of step 1"}},
	{"SecretsNotAList", "secrets: TOKEN\nsteps: [{run: x}]\n", []string{"1:10: secrets must be a list, like [CODECOV_TOKEN]; got a string"}},
	{"TimeoutNoUnit", "timeout: 30\nsteps: [{run: x}]\n", []string{"1:10: timeout 30 has no unit; write a Go duration like 30m or 30s"}},
	{"TimeoutBad", "timeout: 1d\nsteps: [{run: x}]\n", []string{`1:10: timeout: invalid duration "1d"`}},
	{"TimeoutZero", "timeout: 0s\nsteps: [{run: x}]\n", []string{`1:10: timeout: duration "0s" must be greater than zero`}},
	{"StepTimeoutNegative", "steps:\n  - run: x\n    timeout: -5m\n", []string{`3:14: step 1 timeout: duration "-5m" must be greater than zero`}},
	{"DetachString", "steps:\n  - run: x\n    detach: \"yes\"\n  - run: y\n", []string{"3:13: step 1 detach must be true or false; got a string"}},
	{"DetachOnLastStep", "steps:\n  - run: make\n  - run: ./db\n    detach: true\n", []string{"3:5: step 2 is detached but no step comes after it"}},
	{"ConcurrencyUnknownName", "concurrency: {group: \"ci-{{ branch }}\"}\nsteps: [{run: x}]\n", []string{`1:22: concurrency group: unknown name "branch" in {{ }}; use one of: ref, ref_name, workflow, event`}},
	{"ConcurrencyUnclosed", "concurrency: \"ci-{{ ref\"\nsteps: [{run: x}]\n", []string{"1:14: concurrency group: \"ci-{{ ref\" has {{ without }}"}},
	{"ConcurrencyNoGroup", "concurrency:\n  cancel-in-progress: true\nsteps: [{run: x}]\n", []string{"2:3: concurrency has no group"}},
	{"ConcurrencyCancelString", "concurrency:\n  group: ci\n  cancel-in-progress: \"yes\"\nsteps: [{run: x}]\n", []string{"3:23: concurrency cancel-in-progress must be true or false; got a string"}},
	{"ConcurrencyUnknownKey", "concurrency:\n  group: ci\n  cancel_in_progress: true\nsteps: [{run: x}]\n", []string{`3:3: unknown key "cancel_in_progress" in concurrency; did you mean "cancel-in-progress"?`}},
	{"ContinueOnErrorString", "steps:\n  - run: x\n    continue-on-error: \"yes\"\n", []string{"3:24: step 1 continue-on-error must be true or false; got a string"}},
	{"MemoryBad", "resources:\n  memory: 4GB\nsteps: [{run: x}]\n", []string{`2:11: resources.memory: unknown size suffix "GB"`}},
	{"DiskFractionalBytes", "resources:\n  disk: 1.5\nsteps: [{run: x}]\n", []string{`2:9: resources.disk: size "1.5" is not a whole number of bytes`}},
	{"CPUsBad", "resources:\n  cpus: \"2 cores\"\nsteps: [{run: x}]\n", []string{`2:9: resources.cpus: unknown CPU suffix " cores"`}},
	{"CPUsZero", "resources: {cpus: 0}\nsteps: [{run: x}]\n", []string{`1:19: resources.cpus: cpus "0" must be greater than zero`}},
	{"ResourcesNotAMapping", "resources: big\nsteps: [{run: x}]\n", []string{"1:12: resources must be a mapping"}},
	{"OnNull", "on:\nsteps: [{run: x}]\n", []string{"1:1: on has no value"}},
	{"OnEmpty", "on: {}\nsteps: [{run: x}]\n", []string{"1:1: on selects no event"}},
	{"OnList", "on: [push]\nsteps: [{run: x}]\n", []string{"1:5: on must be a mapping (key: value); got a list"}},
	{"ManualWithSettings", "on:\n  manual: {inputs: x}\nsteps: [{run: x}]\n", []string{"2:11: on.manual takes no settings"}},
	{"BranchesNotAList", "on:\n  push:\n    branches: main\nsteps: [{run: x}]\n", []string{`3:15: on.push.branches must be a list, like [main, "release/*"]; got a string`}},
	{"BranchBadGlob", "on:\n  push:\n    branches: [main, \"rel[ease\"]\nsteps: [{run: x}]\n", []string{"3:22: invalid glob in on.push.branches: pattern \"rel[ease\": missing ]"}},
	{"BranchWithRefsPrefix", "on:\n  push:\n    branches:\n      - refs/heads/main\nsteps: [{run: x}]\n", []string{`4:9: on.push.branches names refs without their prefix: write "main", not "refs/heads/main"`}},
	{"ScheduleOnlyIsAnEvent", "on:\n  schedule: [{cron: \"0 3 * * *\"}]\n  manual: false\nsteps: [{run: x}]\nname: \"\"\n", []string{"5:7: name is empty"}},
	{"ScheduleWrongIsStillAnEvent", "on:\n  schedule:\n    - cron: \"0 3 * *\"\nsteps: [{run: x}]\n", []string{
		`3:13: schedule 1 cron: "0 3 * *" is not a cron expression: it has 4 fields, not 5`,
	}},
	{"ScheduleEmptyList", "on:\n  schedule: []\nsteps: [{run: x}]\n", []string{"2:13: on.schedule lists no times"}},
	{"ScheduleNull", "on:\n  schedule:\nsteps: [{run: x}]\n", []string{"2:3: on.schedule lists no times"}},
	{"ScheduleNotAList", "on:\n  schedule: \"0 3 * * *\"\nsteps: [{run: x}]\n", []string{`2:13: on.schedule must be a list, like [{cron: "0 3 * * *"}]; got a string`}},
	{"ScheduleEntryAString", "on:\n  schedule:\n    - \"0 3 * * *\"\nsteps: [{run: x}]\n", []string{`3:7: schedule 1 must be a mapping with cron:; write - cron: "0 3 * * *"`}},
	{"ScheduleEntryEmpty", "on:\n  schedule:\n    -\nsteps: [{run: x}]\n", []string{"3:5: schedule 1 must be a mapping (key: value); got null"}},
	{"ScheduleNoCron", "on:\n  schedule:\n    - timezone: UTC\nsteps: [{run: x}]\n", []string{"3:7: schedule 1 has no cron:"}},
	{"ScheduleCronNumber", "on:\n  schedule:\n    - cron: 5\nsteps: [{run: x}]\n", []string{`3:13: schedule 1 cron must be a string; got a number, quote it: "5"`}},
	{"ScheduleCronEmpty", "on:\n  schedule:\n    - cron: \" \"\nsteps: [{run: x}]\n", []string{"3:13: schedule 1 cron is empty"}},
	{"ScheduleCronSixFields", "on:\n  schedule:\n    - cron: \"0 0 3 * * *\"\nsteps: [{run: x}]\n", []string{`3:13: schedule 1 cron: "0 0 3 * * *" is not a cron expression: it has 6 fields, not 5`}},
	{"ScheduleCronOutOfRange", "on:\n  schedule:\n    - cron: \"0 24 * * *\"\nsteps: [{run: x}]\n", []string{`3:13: schedule 1 cron: "0 24 * * *" is not a cron expression: the hour field "24" is out of range: hours are 0-23`}},
	{"ScheduleCronEvery", "on:\n  schedule:\n    - cron: \"@every 1h\"\nsteps: [{run: x}]\n", []string{`3:13: schedule 1 cron: "@every 1h" is not a cron expression: @every runs relative to when the server read it`}},
	{"ScheduleCronZonePrefix", "on:\n  schedule:\n    - {cron: \"CRON_TZ=Europe/Berlin 0 3 * * *\"}\n", []string{
		"1:1: missing steps",
		`3:14: schedule 1 cron: "CRON_TZ=Europe/Berlin 0 3 * * *" names its time zone inside the expression; write the zone as timezone: beside cron:`,
	}},
	{"ScheduleCronNeverDue", "on:\n  schedule:\n    - cron: \"0 0 30 2 *\"\nsteps: [{run: x}]\n", []string{`3:13: schedule 1 cron: "0 0 30 2 *" is never due in the next five years`}},
	{"ScheduleZoneUnknownBesideAWrongCron", "on:\n  schedule:\n    - cron: \"0 0 3 * * *\"\n      timezone: Europe/Berln\nsteps: [{run: x}]\n", []string{
		`3:13: schedule 1 cron: "0 0 3 * * *" is not a cron expression: it has 6 fields, not 5`,
		`4:17: schedule 1 timezone "Europe/Berln" is not an IANA time zone name`,
	}},
	{"ScheduleZoneLocal", "on:\n  schedule:\n    - cron: \"0 3 * * *\"\n      timezone: Local\nsteps: [{run: x}]\n", []string{"4:17: schedule 1 timezone Local depends on the server's host"}},
	{"ScheduleZoneWithSpace", "on:\n  schedule:\n    - cron: \"0 3 * * *\"\n      timezone: Europe Berlin\nsteps: [{run: x}]\n", []string{`4:17: schedule 1 timezone "Europe Berlin" contains white space`}},
	{"ScheduleBranchWithRefsPrefix", "on:\n  schedule:\n    - cron: \"0 3 * * *\"\n      branch: refs/heads/release\nsteps: [{run: x}]\n", []string{
		`4:15: schedule 1 branch names the branch without its prefix: write "release", not "refs/heads/release"`,
	}},
	{"ScheduleBranchAPattern", "on:\n  schedule:\n    - {cron: \"0 3 * * *\", branch: \"release/*\"}\nsteps: [{run: x}]\n", []string{
		`3:35: schedule 1 branch "release/*" is not a branch name (git check-ref-format`,
	}},
	{"ScheduleBranchInvalid", "on:\n  schedule:\n    - cron: \"0 3 * * *\"\n      branch: a..b\n    - cron: \"0 4 * * *\"\n      branch: x.lock\nsteps: [{run: x}]\n", []string{
		`4:15: schedule 1 branch "a..b" is not a branch name`,
		`6:15: schedule 2 branch "x.lock" is not a branch name`,
	}},
	{"ScheduleUnknownKey", "on:\n  schedule:\n    - cron: \"0 3 * * *\"\n      time-zone: UTC\nsteps: [{run: x}]\n", []string{
		`4:7: unknown key "time-zone" in schedule 1; did you mean "timezone"? (expected one of: cron, timezone, branch)`,
	}},
	{"ScheduleSameTwice", "on:\n  schedule:\n    - cron: \"0 3 * * *\"\n    - cron: \"0 4 * * *\"\n    - cron: \"0 3 * * *\"\n      timezone: UTC\nsteps: [{run: x}]\n", []string{
		"5:7: schedule 3 is the same as schedule 1 (at 3:7): the same cron, timezone and branch; remove one",
	}},
	{"ScheduleMatrixValue", "matrix: {h: [\"1\", \"2\"]}\non:\n  schedule:\n    - cron: \"0 {{ matrix.h }} * * *\"\nsteps: [{run: x}]\n", []string{
		"4:13: schedule 1 cron cannot use {{ matrix.h }}: on is the same for every run of a matrix",
	}},
	{"TagBadGlob", "on:\n  push:\n    tags: [\"v[]\"]\nsteps: [{run: x}]\n", []string{"3:12: invalid glob in on.push.tags"}},
	{"PullBranchNumber", "on:\n  pull:\n    branches: [1]\nsteps: [{run: x}]\n", []string{`3:16: an entry of on.pull.branches must be a string; got a number, quote it: "1"`}},
	{"CacheKeyBadTemplate", "caches:\n  - key: k-{{ hashFiles }\n    paths: [a]\nsteps: [{run: x}]\n", []string{"2:10: cache 1 key: invalid template"}},
	{"CacheKeyOtherAction", "caches:\n  - key: 'k-{{ .Env.X }}'\n    paths: [a]\nsteps: [{run: x}]\n", []string{"2:10: cache 1 key: {{.Env.X}} is not allowed"}},
	{"CacheNoKey", "caches:\n  - paths: [a]\nsteps: [{run: x}]\n", []string{"2:5: cache 1 has no key:"}},
	{"CachePathsEmpty", "caches:\n  - key: k\n    paths: []\nsteps: [{run: x}]\n", []string{"3:12: cache 1 paths is empty"}},
	{"OutputAbsolute", "outputs: [dist/, /etc/passwd]\nsteps: [{run: x}]\n", []string{`1:18: outputs: "/etc/passwd" is absolute`}},
	{"OutputEscapes", "outputs:\n  - ../x\nsteps: [{run: x}]\n", []string{`2:5: outputs: "../x" leaves the checkout`}},
	{"OutputEmptyEntry", "outputs: [a, \"\"]\nsteps: [{run: x}]\n", []string{"1:14: an entry of outputs is empty"}},
	{"CheckoutDepthNegative", "checkout: {depth: -1}\nsteps: [{run: x}]\n", []string{"1:19: checkout.depth must be a whole number of commits (0 = the whole history); got -1"}},
	{"CheckoutDepthString", "checkout:\n  depth: \"10\"\nsteps: [{run: x}]\n", []string{"2:10: checkout.depth must be a whole number of commits (0 = the whole history); got a string"}},
	{"CheckoutTagsString", "checkout:\n  tags: yes please\nsteps: [{run: x}]\n", []string{"2:9: checkout.tags must be true or false; got a string"}},
	{"CheckoutSubmodulesWord", "checkout:\n  submodules: deep\nsteps: [{run: x}]\n", []string{"2:15: checkout.submodules must be false, true or recursive; got a string"}},
	{"CheckoutUnknownKey", "checkout:\n  fetch-depth: 1\nsteps: [{run: x}]\n", []string{`2:3: unknown key "fetch-depth" in checkout; expected one of: depth, tags, submodules`}},
	{"RunnersWithComma", "runners: [\"a,b\"]\nsteps: [{run: x}]\n", []string{`1:11: "a,b" in runners contains white space or a comma`}},
	{"ImageWithSpace", "image: golang 1.26\nsteps: [{run: x}]\n", []string{`1:8: image "golang 1.26" contains white space`}},
	{"NameEmpty", "name: \"\"\nsteps: [{run: x}]\n", []string{"1:7: name is empty"}},
	{"NameMultiline", "name: |\n  a\n  b\nsteps: [{run: x}]\n", []string{"1:7: name must be one line of text"}},
	{"UnknownAlias", "steps:\n  - run: *nope\n", []string{"2:10: alias *nope names no anchor defined before it"}},
	{"AliasInsideItself", "a: &x [*x]\nsteps: [{run: x}]\n", []string{"1:8: alias *x is inside the node it refers to"}},
	{"CustomTag", "name: !secret x\nsteps: [{run: x}]\n", []string{"1:7: unsupported tag !secret"}},
	{"NonStringKey", "steps: [{run: x}]\n[a]: b\n", []string{"2:4: invalid YAML:"}},
	{"IDTokenNotDefinedInTheWorkflow", "id-tokens: {DEPLOY: {aud: https://kube.example}}\nsteps:\n  - run: x\n    id-tokens: [DEPLOI]\n", []string{
		"4:17: id token DEPLOI is not defined in the workflow's id-tokens; add it there",
	}},
	{"IDTokenAudienceWithSpace", "id-tokens:\n  T:\n    aud: \"kube prod\"\nsteps: [{run: x}]\n", []string{`3:10: id token T aud: audience "kube prod" contains white space`}},
	{"IDTokenAudienceColonButNoURI", "id-tokens:\n  T: {aud: [ok, \"x:\"]}\nsteps: [{run: x}]\n", []string{`2:17: id token T aud: audience "x:" holds a colon but is no URI`}},
	{"IDTokenAudienceEmptyList", "id-tokens:\n  T: {aud: []}\nsteps: [{run: x}]\n", []string{"2:12: id token T aud is empty"}},
	{"IDTokenLifetimeLongerThanTheRun", "timeout: 5m\nid-tokens:\n  T: {lifetime: 10m}\nsteps: [{run: x}]\n", []string{
		"3:17: id token T lifetime 10m0s is longer than the run's timeout of 5m0s",
	}},
	{"IDTokenLifetimeTooShort", "id-tokens:\n  T:\n    lifetime: 30s\nsteps: [{run: x}]\n", []string{"3:15: id token T lifetime 30s is shorter than 1m0s"}},
	{"IDTokenLifetimeNoUnit", "id-tokens:\n  T:\n    lifetime: 600\nsteps: [{run: x}]\n", []string{"3:15: id token T lifetime 600 has no unit"}},
	{"IDTokenUnknownKey", "id-tokens:\n  T: {audd: x}\nsteps: [{run: x}]\n", []string{`2:7: unknown key "audd" in id token T; did you mean "aud"?`}},
	{"IDTokenNameNotAVariable", "id-tokens:\n  deploy-token: {}\nsteps: [{run: x}]\n", []string{`2:3: id token name "deploy-token" is not a valid variable name`}},
	{"IDTokenNameIsAlsoASecret", "secrets: [T]\nid-tokens: {T: {}}\nsteps: [{run: x}]\n", []string{"2:13: T is both an id token and a secret of the workflow"}},
	{"IDTokenNameIsAlsoAStepVariable", "id-tokens: {T: {}}\nsteps:\n  - run: x\n    id-tokens: [T]\n    env: {T: v}\n", []string{"5:11: T is both an id token and an env variable of step 1"}},
	{"ErrorInsideAnchorNamesEachUse", "base: &b {run: 1}\nsteps: [*b, *b]\n", []string{
		`1:1: unknown key "base" in the workflow`,
		`1:16: step 1 run must be a string`,
		`1:16: step 2 run must be a string`,
	}},
}

func TestParse_ErrorsNameTheirLineAndColumn(t *testing.T) {
	for _, tc := range errorCases {
		t.Run(tc.name, func(t *testing.T) {
			w, err := Parse("w.yml", []byte(tc.src))
			if err == nil {
				t.Fatalf("no error; parsed %+v", w)
			}
			if w != nil {
				t.Errorf("Parse returned a Workflow together with an error")
			}
			var list ErrorList
			if !errors.As(err, &list) {
				t.Fatalf("error is %T, want ErrorList", err)
			}
			var got []string
			for _, e := range list {
				if e.Path != "w.yml" {
					t.Errorf("Path = %q", e.Path)
				}
				got = append(got, fmt.Sprintf("%d:%d: %s", e.Line, e.Col, e.Msg))
			}
			if len(got) != len(tc.want) {
				t.Fatalf("got %d errors, want %d:\n%s", len(got), len(tc.want), strings.Join(got, "\n"))
			}
			for i := range got {
				want := tc.want[i]
				at, msg, _ := strings.Cut(want, ": ")
				if !strings.HasPrefix(got[i], at+": ") || !strings.Contains(got[i], msg) {
					t.Errorf("error %d = %q\nwant at %s containing %q", i, got[i], at, msg)
				}
			}
		})
	}
}

// TestParse_ServicesReadAsWritten: every key of a service reaches
// Service, in the file's order, with the defaults for what is left out.
func TestParse_ServicesReadAsWritten(t *testing.T) {
	src := `secrets: [PW]
services:
  db:
    image: localhost/pg:1
    env: {PGPORT: "5432"}
    command: [pg-service, --fast]
    secrets: [PW]
    ports: [5432]
    ready: pg_isready -h 127.0.0.1
    ready-timeout: 90s
    resources: {cpus: 500m, memory: 256Mi, disk: 1Gi}
  cache:
    image: redis:7
steps: [{run: x}]
`
	w, err := Parse("ci.yml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	if len(w.Services) != 2 || w.Services[0].Name != "db" || w.Services[1].Name != "cache" {
		t.Fatalf("services %+v", w.Services)
	}
	db, cache := w.Services[0], w.Services[1]
	if db.Image != "localhost/pg:1" || db.Env["PGPORT"] != "5432" || strings.Join(db.Command, " ") != "pg-service --fast" ||
		len(db.Secrets) != 1 || db.Secrets[0] != "PW" || len(db.Ports) != 1 || db.Ports[0] != 5432 ||
		db.Ready != "pg_isready -h 127.0.0.1" || db.ReadyTimeout.String() != "1m30s" ||
		db.Resources.CPUs != "500m" || db.Resources.MemoryBytes != 256<<20 || db.Resources.DiskBytes != 1<<30 {
		t.Errorf("db %+v", db)
	}
	if cache.Image != "redis:7" || cache.Command != nil || cache.ReadyTimeout != DefaultReadyTimeout || cache.Ready != "" || len(cache.Ports) != 0 {
		t.Errorf("cache %+v", cache)
	}
}
