package executor

import (
	"fmt"

	"github.com/spf13/pflag"

	"knotless.dev/knotless/internal/units"
)

// Options is one executor's part of knotless-run's command line (run,
// exec, doctor): its flags and how to make it from their values. The
// commands make fresh Options of every executor they offer; an executor is
// offered by adding its Options to runnercli's list.
type Options interface {
	// Name is the executor's name as --executor spells it.
	Name() string
	// UsesJob reports whether the executor runs jobs from an image and
	// reads Setup.Job, which the shared JobFlags fill: the command then
	// says in their help that this executor uses them.
	UsesJob() bool
	// AddFlags adds the executor's own flags to fs (e.g. --namespace); no
	// two executors may add the same name, nor a name of JobFlags. The
	// command adds to each flag's help its environment variable (KNOTLESS_
	// and the name in upper case, '-' as '_') and that only --executor
	// <Name> uses it.
	AddFlags(fs *pflag.FlagSet)
	// New makes the executor from the flags' values, after they were
	// parsed, and from setup (the runner's own flags). Errors say what to
	// fix.
	New(setup Setup) (Executor, error)
}

// Job is what every executor that runs images takes from the shared job
// flags (JobFlags): the defaults of a job environment, and the most a
// workflow's resources: may ask for.
type Job struct {
	// Image is the job image of workflows that name none ("": none, and
	// such a workflow is refused).
	Image string
	// CPUs is a count as Kubernetes spells it ("2", "0.5", "500m").
	CPUs string
	// Memory is in bytes.
	Memory int64
	// RunAs is the job container's user.
	RunAs RunAs
	// Pids is the process limit of a job container or pod (processes and
	// threads: docker's pids cgroup, kube's RLIMIT_NPROC in a pod with a
	// user namespace), or -1 for none; 0 is refused by Job.
	Pids int64
	// BuilderImage is the image of container builds' builder
	// (knotless-builder with BuildKit, docs/container-builds.md); "":
	// builds are refused (kube needs its --builds-namespace too).
	BuilderImage string
}

// Defaults of Job.
const (
	DefaultCPUs   = "1"
	DefaultMemory = 2 << 30 // bytes
	DefaultPids   = 1024
)

// JobFlags are the flags that mean the same to every executor that runs
// images (docker, kube): --image, --cpus, --memory, --run-as, --pids and
// --builder-image. A command adds them once; their values reach the
// chosen executor in Setup.Job.
type JobFlags struct {
	image, cpus, memory, runAs, builderImage string
	pids                                     int64
}

// Names of the JobFlags, for the commands' bookkeeping.
var JobFlagNames = []string{"image", "cpus", "memory", "run-as", "pids", "builder-image"}

// AddFlags adds the job flags to fs; users names the executors that read
// them, for the help ("docker, kube").
func (j *JobFlags) AddFlags(fs *pflag.FlagSet, users string) {
	fs.StringVar(&j.image, "image", "", "job image for workflows that name no image: (--executor "+users+")")
	fs.StringVar(&j.cpus, "cpus", DefaultCPUs, "CPUs of a job container or pod (2, 0.5 or 500m; kube: requests = limits), and the most a workflow's resources: may ask for, for the job and for each service (a service's own come on top: 1 CPU unless it says) (--executor "+users+")")
	fs.StringVar(&j.memory, "memory", "2Gi", "memory of a job container or pod (kube: requests = limits; docker: no swap, and the bound of each tmpfs: HOME, /tmp), and the most a workflow may ask for, for the job and for each service (a service's own come on top: 512Mi unless it says) (--executor "+users+")")
	fs.StringVar(&j.runAs, "run-as", DefaultRunAs.String(), "job container user: UID:GID, or image for the image's own user (docker: numeric and non-root; kube: root too where the pod has a user namespace, --user-namespace) (--executor "+users+")")
	fs.StringVar(&j.builderImage, "builder-image", "", "allow container builds (a workflow's container-builds: true) with a BuildKit builder of this image, never privileged (knotless-builder with BuildKit; docs/container-builds.md); kube: with --builds-namespace; empty: such workflows are refused before any pod or container exists (--executor "+users+")")
	fs.Int64Var(&j.pids, "pids", DefaultPids, "process limit of a job container or pod, counting threads (docker: the container's pids cgroup; kube: RLIMIT_NPROC of the pod's own uids, only in a pod with a user namespace); a fork bomb stops there, the node and other jobs unhurt (-1: none) (--executor "+users+")")
}

// Job reads the flags' values. Errors name the flag.
func (j *JobFlags) Job() (Job, error) {
	job := Job{Image: j.image, CPUs: j.cpus, Pids: j.pids, BuilderImage: j.builderImage}
	if j.pids == 0 || j.pids < -1 {
		return Job{}, fmt.Errorf("--pids %d: give a positive limit, or -1 for none", j.pids)
	}
	if _, err := units.ParseCPUs(j.cpus); err != nil {
		return Job{}, fmt.Errorf("--cpus %q: %v", j.cpus, err)
	}
	var err error
	if job.Memory, err = units.ParseSize(j.memory); err != nil {
		return Job{}, fmt.Errorf("--memory %q: %v", j.memory, err)
	}
	if job.Memory <= 0 {
		return Job{}, fmt.Errorf("--memory %q: want a positive size such as 2Gi", j.memory)
	}
	if job.RunAs, err = ParseRunAs(j.runAs); err != nil {
		return Job{}, err
	}
	return job, nil
}
