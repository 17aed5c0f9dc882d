package runnercli

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"knotless.dev/knotless/internal/cache"
	"knotless.dev/knotless/internal/envflag"
	"knotless.dev/knotless/internal/executor"
	"knotless.dev/knotless/internal/objstore"
	"knotless.dev/knotless/internal/runner"
)

// runOptions are `knotless-run run`'s flags and what it does with them
// (kubectl's pattern: newRun only binds the flags; validate and run are
// callable without cobra).
type runOptions struct {
	g               *globals
	statePath, work string
	exf             *executorFlags
	cfg             runner.Config
	logLimit        int64
	cacheSize       int64
	cacheStore      string
	cacheRegion     string
	cacheDirect     bool
	cacheUnusedDays int
	cacheRepoSize   int64
	envs            *envValue
	envPass         *envPassValue
	handover        bool
	metricsListen   string
}

const runLong = `run long-polls the server for runs this runner qualifies for and executes up to
--capacity of them at once: it fetches the commit into a bare mirror under DIR
(only what is missing), checks it out into a clean workspace, executes the steps
with the executor, and ships masked logs, step states and the result. Logs and
results are spooled under DIR first, so nothing is lost while the server is
unreachable; a later start delivers what an earlier process left.

Started before its approval, the runner waits and retries.

Runs outlive the runner process: each run's steps are executed by a step agent
(knotless-agent) that goes on while knotless-run restarts. A new knotless-run
on the same --state and --work takes the runs over where they are: the running
step goes on uninterrupted, its log resumes at the next byte, later steps run.

On SIGTERM (what a service manager or Kubernetes sends to restart or upgrade
it) the runner hands its runs over (--handover, the default): it stops claiming,
tells the server, and exits 0 at once, leaving the runs to the next process on
this work directory; the server waits its handover grace (5 minutes by default)
before it ends them runner-lost. On SIGINT (Ctrl-C), or on SIGTERM with
--handover=false, it stops claiming, lets running runs finish for up to
--stop-wait, then cancels them (reason runner-stopped), delivers its spools
and exits 0; a second signal cancels running runs at once.

Two processes never run jobs with one identity: a new process with the same
state file supersedes the old one, which stops at once (exit 1).

Work directory layout:
  DIR/mirrors/OWNER/NAME.git   bare mirror per repository
  DIR/workspaces/OWNER/NAME/WORKFLOW/SLOT
                               checkout of a run: the same path for every run
                               of a repository's workflow (SLOT 0; 1, 2, ...
                               for runs of it at once), emptied before and
                               after each run
  DIR/runs/<run>/              a run's outputs while they are packed
  DIR/spool/<run>/             logs and results not yet delivered
  DIR/caches/                  the cache store of the workflows' caches:
                               (bounded by --cache-size, least recently used
                               evicted first; per repository; with
                               --cache-store, a copy of what the bucket holds)
  DIR/shell/run-<run>/         the shell executor's files of a run: its step
                               agent's socket, log and state, and the steps'
                               HOME and TMPDIR (removed after it)

With --executor shell, steps run as this process's user: a runner started as
root runs them as root unless --user NAME names an unprivileged user to run
them as (its groups, a HOME of its own, the workspace handed to it).

Every run gets a fresh HOME and TMPDIR, made by the executor, so tool caches
in HOME start cold unless the workflow's caches: restores them (saved after
a successful run, restored by key before the first step); --env points
tools at a cache the runs share, e.g. GOCACHE (or XDG_CACHE_HOME); with the
stable checkout path, Go's build and test cache then hit across runs.

--cache-store URL shares the caches with every runner that names the same
bucket: a second runner, or one that replaced another, hits what an earlier
one saved. URL is https://HOST[:PORT]/BUCKET[/PREFIX] (http:// on a private
network) or s3://BUCKET[/PREFIX] for Amazon S3 (with --cache-store-region).
Credentials never go on the command line: they come from the standard places,
in this order: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and
AWS_SESSION_TOKEN) in the environment; the shared credentials file
(AWS_SHARED_CREDENTIALS_FILE or ~/.aws/credentials, profile AWS_PROFILE); a
Kubernetes projected service-account token for a role
(AWS_WEB_IDENTITY_TOKEN_FILE and AWS_ROLE_ARN); the ECS or EC2 instance role.
A store that is down, slow, full or refuses the credentials never fails a
run: the setup log says so in the cache's line and the run goes on with this
runner's disk. Caches unused for --cache-unused-days are removed, and each
repository's beyond --cache-repo-size (least recently used first), on this
disk and in the bucket (any runner sweeps, at most hourly).

Steps get a clean environment: none of the runner's own variables reach them
(not even HTTPS_PROXY), only PATH, HOME, LANG=C.UTF-8, TZ=UTC, the KNOTLESS_*
variables and what --env, --env-pass and the workflow give. --env-pass NAME
passes this process's value of NAME (a proxy, say); --env NAME=VALUE sets one.
Later wins: LANG/TZ defaults, --env-pass, --env, KNOTLESS_* variables, the
workflow's env, the step's env, the step's secrets.

If the server no longer knows the runner (it was removed), run logs what
to do, cancels its running runs and exits 1.`

const runExample = `  knotless-run run --state /etc/knotless/runner.json --executor shell --work /var/lib/knotless-run
  knotless-run run --state runner.json --work work --capacity 2 --stop-wait 2m
  knotless-run run --state runner.json --work work --executor docker --image golang:1.26 --cpus 2 --memory 4Gi --disk-floor 10Gi
  knotless-run run --state runner.json --work work \
      --env GOCACHE=/var/cache/knotless/go-build --env GOMODCACHE=/var/cache/knotless/gomod
  knotless-run run --state runner.json --work work --env-pass HTTPS_PROXY --env-pass NO_PROXY
  AWS_ACCESS_KEY_ID=... AWS_SECRET_ACCESS_KEY=... \
      knotless-run run --state runner.json --work work --cache-store https://s3.example.com/ci-caches/knotless`

func newRun(g *globals) *cobra.Command {
	o := &runOptions{g: g, logLimit: int64(runner.DefaultLogLimit), cacheSize: int64(cache.DefaultSize), envs: &envValue{}, envPass: &envPassValue{}}
	cmd := &cobra.Command{
		Use:     "run --state FILE --work DIR [--executor shell]",
		Short:   "Claim runs from the server and execute them",
		Long:    runLong,
		Example: runExample,
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.validate(); err != nil {
				return err
			}
			return o.run()
		},
	}
	o.bind(cmd)
	return cmd
}

// bind binds the command's flags (and their KNOTLESS_* variables) to o.
func (o *runOptions) bind(cmd *cobra.Command) {
	f := cmd.Flags()
	o.exf = addExecutorFlags(f, "where runs execute")
	f.StringVar(&o.statePath, "state", "", "state file written by login")
	f.StringVar(&o.work, "work", "", "work directory for mirrors, workspaces and spools")
	f.IntVar(&o.cfg.Capacity, "capacity", runner.DefaultCapacity, "runs executed at once; each claim asks the server for as many runs as slots are free (up to 100 in one answer)")
	f.BoolVar(&o.handover, "handover", true, "on SIGTERM, hand the runs over to the next process on this work directory and exit at once; false: stop like on SIGINT")
	f.DurationVar(&o.cfg.StopWait, "stop-wait", runner.DefaultStopWait, "on SIGINT (or SIGTERM with --handover=false), how long running runs may finish before they are cancelled (a second signal cancels at once)")
	f.Var(envflag.Size{P: &o.logLimit}, "log-limit", "most log bytes kept per step (e.g. 64Mi); past it a marker line, the step keeps running")
	f.Var(envflag.Size{P: &o.cacheSize}, "cache-size", "most bytes the workflows' caches: keep under --work/caches (e.g. 10Gi, 500M); past it the least recently used are evicted")
	f.StringVar(&o.cacheStore, "cache-store", "", "share the workflows' caches through this S3-compatible bucket: https://HOST[:PORT]/BUCKET[/PREFIX] or s3://BUCKET[/PREFIX]; credentials from AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, ~/.aws/credentials or a role, never a flag; empty: this disk only")
	f.StringVar(&o.cacheRegion, "cache-store-region", "", "the --cache-store bucket's region (empty: us-east-1, or what the store says)")
	f.BoolVar(&o.cacheDirect, "cache-store-direct", false, "job environments may reach the --cache-store bucket: they download caches themselves from presigned URLs (a read of one object, valid for the transfer's bound), bytes that do not cross this runner nor, in Kubernetes, the API server; where one cannot, the runner brings the cache; default off: the runner brings every cache (docs/storage.md)")
	f.IntVar(&o.cacheUnusedDays, "cache-unused-days", cache.DefaultUnusedDays, "remove caches not restored or saved for this many days, on this disk and in the --cache-store bucket; 0: never")
	f.Var(envflag.Size{P: &o.cacheRepoSize}, "cache-repo-size", "most bytes of caches one repository keeps (e.g. 10Gi; stored size in the bucket, apparent size on this disk); past it its least recently used are removed; 0: no bound")
	f.Var(o.envs, "env", "NAME=VALUE given to every step (repeatable; the workflow's env wins; not for secrets: not masked)")
	f.Var(o.envPass, "env-pass", envPassUsage)
	f.StringVar(&o.metricsListen, "metrics-listen", "", "serve Prometheus metrics at http://ADDR/metrics (and /healthz), e.g. 0.0.0.0:9090; empty: none")
	for flag, env := range map[string]string{"state": "KNOTLESS_STATE", "work": "KNOTLESS_WORK", "env-pass": "KNOTLESS_ENV_PASS",
		"capacity": "KNOTLESS_CAPACITY", "stop-wait": "KNOTLESS_STOP_WAIT", "handover": "KNOTLESS_HANDOVER", "log-limit": "KNOTLESS_LOG_LIMIT",
		"cache-size": "KNOTLESS_CACHE_SIZE", "metrics-listen": "KNOTLESS_METRICS_LISTEN", "cache-store": "KNOTLESS_CACHE_STORE",
		"cache-store-region": "KNOTLESS_CACHE_STORE_REGION", "cache-store-direct": "KNOTLESS_CACHE_STORE_DIRECT", "cache-unused-days": "KNOTLESS_CACHE_UNUSED_DAYS", "cache-repo-size": "KNOTLESS_CACHE_REPO_SIZE"} {
		envflag.BindAs(f, flag, env)
	}
}

// validate refuses a command line without --state and --work (a usage
// error, exit 2).
func (o *runOptions) validate() error {
	if o.statePath == "" || o.work == "" {
		return usagef("run needs --state FILE and --work DIR")
	}
	if o.cacheUnusedDays < 0 {
		return usagef("--cache-unused-days %d: want a number of days, 0 for never", o.cacheUnusedDays)
	}
	if o.cacheRepoSize < 0 {
		return usagef("--cache-repo-size: want a size such as 10Gi, 0 for no bound")
	}
	if o.cacheDirect && o.cacheStore == "" {
		return usagef("--cache-store-direct without --cache-store: name the bucket too")
	}
	if o.cacheStore != "" {
		if _, err := objstore.Open(objstore.Config{URL: o.cacheStore, Region: o.cacheRegion}); err != nil {
			return usagef("--cache-store: %v", err)
		}
	}
	return nil
}

// cacheOptions are the cache store's settings from the flags. With
// --cache-store it checks the bucket once (bounded): a store that does
// not answer is a warning, never a reason not to start (runs go on with
// this disk meanwhile, each run's setup log saying why).
func (o *runOptions) cacheOptions(ctx context.Context, log *slog.Logger) (cache.Options, error) {
	opts := cache.Options{UnusedFor: time.Duration(o.cacheUnusedDays) * 24 * time.Hour, RepoLimit: o.cacheRepoSize}
	if o.cacheStore == "" {
		return opts, nil
	}
	b, err := objstore.Open(objstore.Config{URL: o.cacheStore, Region: o.cacheRegion})
	if err != nil {
		return opts, err
	}
	cctx, cancel := context.WithTimeout(ctx, cache.DefaultLookupTimeout)
	defer cancel()
	if err := b.Check(cctx); err != nil {
		log.Warn("the cache store does not answer as it should; runs use this runner's disk until it does", "err", err)
	} else {
		log.Info("caches are shared through the cache store", "store", b.String())
	}
	opts.Bucket, opts.Direct = b, o.cacheDirect
	return opts, nil
}

// run starts the executor and the runner and runs it until it stops: its
// error is the runner's (runner.ErrNotRegistered, ...) or why it could not
// start (the executor, the state file, the metrics address).
func (o *runOptions) run() error {
	log := o.g.logger()
	cfg := o.cfg
	// The executor labels what it makes with the runner's name; a
	// state file that cannot be read is reported below, after the
	// executor's own complaints.
	name := ""
	if st, err := runner.LoadState(o.statePath); err == nil {
		name = st.Name
	}
	if o.metricsListen != "" {
		cfg.Metrics = runner.NewMetrics()
		o.exf.observer = cfg.Metrics
		stopMetrics, err := serveMetrics(o.metricsListen, cfg.Metrics, log)
		if err != nil {
			return err
		}
		defer stopMetrics()
	}
	o.exf.capacity = cfg.Capacity
	ex, err := o.exf.newExecutor(o.work, name, log, false)
	if err != nil {
		return err
	}
	if c, ok := ex.(executor.EnvironmentCounter); ok && cfg.Metrics != nil {
		cfg.Metrics.CountEnvironments(c)
	}
	st, err := runner.LoadState(o.statePath)
	if err != nil {
		return err
	}
	cfg.State, cfg.StatePath, cfg.Executor, cfg.WorkDir, cfg.Logger = st, o.statePath, ex, o.work, log
	cfg.LogLimit = o.logLimit
	cfg.CacheSize = o.cacheSize
	if cfg.CacheOptions, err = o.cacheOptions(context.Background(), log); err != nil {
		return err
	}
	var missing []string
	cfg.Env, missing = stepEnv(o.envPass, o.envs)
	if len(missing) > 0 {
		log.Warn("--env-pass names variables this process does not have: steps run without them", "names", missing)
	}
	r, err := runner.New(cfg)
	if err != nil {
		return err
	}
	// SIGTERM hands the runs over (unless --handover=false);
	// SIGINT stops gracefully; a second signal cancels running
	// runs at once.
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(sigs)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		sig := <-sigs
		if sig == syscall.SIGTERM && o.handover {
			log.Info("signal received: handing the runs over to the next knotless-run process (they go on running)", "signal", sig.String())
			r.Handover()
			return
		}
		log.Info("signal received: stopping (claiming no more runs; a second signal cancels running runs at once)",
			"signal", sig.String(), "stop_wait", cfg.StopWait)
		cancel()
		<-sigs
		r.StopNow()
	}()
	return r.Run(ctx)
}
