package agent

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
)

// ClientHello is the client's Hello payload.
type ClientHello struct {
	// Versions are the protocol versions the client speaks.
	Versions []int `json:"versions"`
	// Client names the client, e.g. "knotless-run v1.2.3", for the agent's
	// log.
	Client string `json:"client,omitempty"`
}

// AgentHello is the agent's Hello payload.
type AgentHello struct {
	// Version is the protocol version the agent chose (one the client
	// offered), or 0 with Error set when there is none.
	Version int    `json:"version"`
	Error   string `json:"error,omitempty"`
	// Agent is the agent's program version.
	Agent string `json:"agent"`
	// Run is the environment's ID (Spec.ID) the agent was started for.
	Run string `json:"run"`
	// PID is the agent's process ID in its environment.
	PID int `json:"pid"`
	// Kill says how the agent ends a step's processes: "cgroup v2 (PATH) and
	// child subreaper" or "child subreaper (REASON no cgroup)".
	Kill string `json:"kill"`
	// Workdir is the steps' working directory, Home their HOME.
	Workdir string `json:"workdir"`
	Home    string `json:"home"`
	// Compression lists the copy-stream compressions the agent unpacks
	// and produces (CompressionZstd); an older agent lists none.
	Compression []string `json:"compression,omitempty"`
	// Steps are the steps the agent knows, in the order they started.
	Steps []StepInfo `json:"steps,omitempty"`
	// UID is the uid the agent runs as, in its own user namespace.
	UID int `json:"uid"`
	// UIDMap is the text of the agent's /proc/self/uid_map (empty when it
	// cannot be read): whether its user namespace is the node's
	// (UIDMapRemapped, DescribeUIDMap).
	UIDMap string `json:"uid_map,omitempty"`
	// Nproc is the process limit every step starts with (RLIMIT_NPROC,
	// Serve.Nproc), or 0 for none: the agent applies it only in a user
	// namespace of its own.
	Nproc int `json:"nproc,omitempty"`
	// Capabilities lists the requests beyond the first protocol the
	// agent serves (CapabilityFetch); an older agent lists none.
	Capabilities []string `json:"capabilities,omitempty"`
}

// StepInfo describes a step the agent started.
type StepInfo struct {
	ID      string `json:"id"`
	Running bool   `json:"running"`
	// Detached is set for a step started with Start.Detach.
	Detached bool `json:"detached,omitempty"`
	// Size is the step's output so far, in bytes.
	Size int64 `json:"size"`
	// Exit is set once the step ended.
	Exit *Exit `json:"exit,omitempty"`
}

// Start asks the agent to start a step, or to attach to it when it started
// a step with this ID already (then only ID and Offset count). The agent
// answers Started, then Output frames from Offset and finally Exit.
type Start struct {
	// ID names the step; unique within the environment.
	ID string `json:"id"`
	// Offset is where the output starts for this client, in bytes.
	Offset int64 `json:"offset"`
	// Chunk caps the output bytes per Output frame (0: OutputChunk); a
	// client whose connections keep breaking asks for smaller frames.
	Chunk int `json:"chunk,omitempty"`
	// Compression is "" or CompressionZstd: the client also reads
	// OutputZstd frames, which the agent sends where compressing a frame's
	// output makes it smaller (see CompressOutput). An agent that does not
	// know the field sends Output frames only.
	Compression string `json:"compression,omitempty"`
	// Script is the step's script, byte-exact; the agent writes it to a
	// private file and passes its path as the shell's last argument.
	Script []byte `json:"script"`
	// Shell is the interpreter and its flags, e.g. ["/bin/sh", "-e"].
	Shell []string `json:"shell"`
	// Env is the step's whole environment (secrets included), byte-exact.
	// The agent adds PATH and HOME when absent. Values never touch disk.
	Env map[string][]byte `json:"env"`
	// Dir is the working directory; empty means the agent's workdir.
	Dir string `json:"dir,omitempty"`
	// TimeoutMS bounds the step (0: none); GraceMS is SIGTERM → SIGKILL
	// (0: 10 s).
	TimeoutMS int64 `json:"timeoutMs,omitempty"`
	GraceMS   int64 `json:"graceMs,omitempty"`
	// Detach starts a service step (a workflow step with `detach: true`):
	// it runs beside the steps started after it (which do not wait for it
	// and whose end does not kill its processes: those of its process
	// group and cgroup), until it exits or a Stop ends it. The agent
	// answers Started only, without the output: a later Start with the
	// same ID (or Attach) follows it.
	Detach bool `json:"detach,omitempty"`
}

// StepList answers Steps: every step the agent started, in order, as
// AgentHello.Steps says them.
type StepList struct {
	Steps []StepInfo `json:"steps"`
}

// Started answers Start.
type Started struct {
	ID string `json:"id"`
	// Attached is true when the step had started before (this Start only
	// attached to it).
	Attached bool `json:"attached"`
}

// Attach asks for a started step's output from Offset, then its Exit.
type Attach struct {
	ID     string `json:"id"`
	Offset int64  `json:"offset"`
	Chunk  int    `json:"chunk,omitempty"` // as Start.Chunk
	// Compression is as Start.Compression.
	Compression string `json:"compression,omitempty"`
}

// Stop asks the agent to stop a running step: SIGTERM to its processes,
// SIGKILL after GraceMS (0: SIGKILL at once). Reason is recorded as the
// step's reason (api.ReasonCancelled, api.ReasonTimeout). Stopping a step
// that is stopping or has ended changes nothing, except that a Stop with
// GraceMS 0 cuts a running grace short.
type Stop struct {
	ID      string `json:"id"`
	Reason  string `json:"reason"`
	GraceMS int64  `json:"graceMs"`
}

// Exit reports how a step ended. It follows the step's last Output frame.
type Exit struct {
	ID string `json:"id"`
	// ExitCode is the shell's exit status, 128+N when signal N killed it,
	// -1 when the step could not start (Error says why).
	ExitCode int `json:"exitCode"`
	// Reason is "", "timeout", "cancelled" (a Stop), ...
	Reason string `json:"reason,omitempty"`
	// Size is the step's whole output, in bytes.
	Size int64 `json:"size"`
	// DurationMS is the step's run time, start to end.
	DurationMS int64 `json:"durationMs"`
	// Note is a line for the step's log from the agent (e.g. processes that
	// did not die), empty when all went as expected.
	Note string `json:"note,omitempty"`
	// OutputLost is set when the agent could not store all of the step's
	// output (its disk was full, say; Note says what failed): the step's
	// log is not whole, and the step must not read as a clean success.
	OutputLost bool `json:"outputLost,omitempty"`
	// Error is set when the step could not be started at all.
	Error string `json:"error,omitempty"`
}

// CopyIn announces a tar stream (Data frames, then DataEnd) to unpack at
// Dst: relative to the workdir unless absolute; a relative Dst may not leave
// the workdir. The agent answers CopyDone.
type CopyIn struct {
	Dst string `json:"dst"`
	// Compression is "" (the Data frames are the tar stream) or
	// CompressionZstd (they are the tar stream compressed with zstd); the
	// length and SHA-256 of DataEnd and CopyDone are of the bytes sent.
	// Only sent to an agent whose hello lists it.
	Compression string `json:"compression,omitempty"`
}

// CompressionZstd is the zstd compression of copy streams
// (github.com/klauspost/compress/zstd, frames with content checksums).
const CompressionZstd = "zstd"

// CopyOut asks for Src (relative to the workdir unless absolute) as a tar
// stream: the agent answers Data frames, then DataEnd.
type CopyOut struct {
	Src string `json:"src"`
	// Compression is as CopyIn's: the agent compresses the stream it
	// sends.
	Compression string `json:"compression,omitempty"`
}

// DataEnd ends a tar stream: its length and SHA-256 (hex), or the error
// that cut it short.
type DataEnd struct {
	Bytes  int64  `json:"bytes"`
	SHA256 string `json:"sha256"`
	Error  string `json:"error,omitempty"`
	// NotExist is set with Error when the source does not exist (the
	// client's error then wraps fs.ErrNotExist).
	NotExist bool `json:"notExist,omitempty"`
}

// CopyDone answers a CopyIn: what arrived (length and SHA-256 of the tar
// stream), and the error that stopped the unpacking, if any.
type CopyDone struct {
	Bytes  int64  `json:"bytes"`
	SHA256 string `json:"sha256"`
	Files  int    `json:"files"`
	Error  string `json:"error,omitempty"`
}

// Shutdown asks the agent to kill every step's processes at once and exit.
// It answers ShutdownDone once no process of any step is left, and exits
// right after; removing its directory is the caller's.
type Shutdown struct{}

// Adopt gives a warm agent (started in an environment made before any
// run claimed it: the kube executor's warm pods) its run. From then on the
// agent serves Run (its hello says so), and DeadlineMS (Unix
// milliseconds; 0: none) is the run's end, as Serve's --deadline would
// have been. The agent refuses it once a step started (a warm environment
// serves one run: the one that adopts it). Answered by Adopted, or Error.
type Adopt struct {
	Run        string `json:"run"`
	DeadlineMS int64  `json:"deadlineMs,omitempty"`
}

// Error reports a request the agent refused or failed; For is the request's
// type and Step its step, when it had one.
type Error struct {
	For     string `json:"for"`
	Step    string `json:"step,omitempty"`
	Message string `json:"message"`
}

func (e *Error) Error() string {
	if e.Step != "" {
		return fmt.Sprintf("agent: %s of step %s: %s", e.For, e.Step, e.Message)
	}
	return fmt.Sprintf("agent: %s: %s", e.For, e.Message)
}

// EncodeOutput makes an Output frame's payload: the step ID's length
// (2 bytes), the step ID, the byte offset of data in the step's output
// (8 bytes), all big-endian; data follows as the frame's last part.
func EncodeOutput(id string, offset int64) []byte {
	b := make([]byte, 2+len(id)+8)
	binary.BigEndian.PutUint16(b, uint16(len(id)))
	copy(b[2:], id)
	binary.BigEndian.PutUint64(b[2+len(id):], uint64(offset))
	return b
}

// DecodeOutput splits an Output payload into step ID, offset and data (a
// slice of p).
func DecodeOutput(p []byte) (id string, offset int64, data []byte, err error) {
	if len(p) < 2 {
		return "", 0, nil, fmt.Errorf("%w: output frame of %d bytes", ErrCorrupt, len(p))
	}
	n := int(binary.BigEndian.Uint16(p))
	if len(p) < 2+n+8 {
		return "", 0, nil, fmt.Errorf("%w: output frame of %d bytes, step ID of %d", ErrCorrupt, len(p), n)
	}
	id = string(p[2 : 2+n])
	offset = int64(binary.BigEndian.Uint64(p[2+n:]))
	return id, offset, p[2+n+8:], nil
}

// WriteJSON writes v as a JSON frame of type t.
func (fw *FrameWriter) WriteJSON(t Type, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("agent protocol: encode %s: %w", t, err)
	}
	return fw.WriteFrame(t, b)
}

// Decode unmarshals a JSON payload of a frame of type t.
func Decode(t Type, p []byte, v any) error {
	if err := json.Unmarshal(p, v); err != nil {
		return fmt.Errorf("%w: %s frame: %v", ErrCorrupt, t, err)
	}
	return nil
}

// Fetch asks the agent to download an archive itself, from URL, and to
// unpack some of its top-level members (see ExtractMembers): the route of
// a shared cache's entry where the job's environment may reach the object
// store, so that its bytes cross neither the runner nor the link to it.
// Only sent to an agent whose hello lists CapabilityFetch. Answered by
// Fetched (also on a failure: Fetched.Error), or Error for a request the
// agent refused.
type Fetch struct {
	// URL is an http or https URL that reads the archive with a plain GET
	// and no credentials of the agent's (a presigned URL, S3 SigV4 query
	// authentication): the agent never logs it nor quotes its query.
	URL string `json:"url"`
	// SHA256 (hex) and Bytes are the archive's as the store keeps them:
	// the agent reads at most Bytes+1 bytes and fails on a mismatch.
	SHA256 string `json:"sha256"`
	Bytes  int64  `json:"bytes"`
	// Compression is "" or CompressionZstd: of the whole archive.
	Compression string `json:"compression,omitempty"`
	// Members maps a top-level name of the archive (a copy-format tar:
	// "./NAME" below its root) to the absolute path it is unpacked at, a
	// directory merged into one already there (as CopyIn does); members
	// not listed are skipped.
	Members map[string]string `json:"members"`
	// StallMS fails the fetch when no byte arrived for that long (0:
	// DefaultFetchStall).
	StallMS int64 `json:"stallMs,omitempty"`
}

// Fetched answers a Fetch: the archive's bytes read and their SHA-256
// (hex), the entries unpacked, the members found, and the error that
// stopped it (empty on success). After a failure, every file, directory
// and link the fetch made is removed again; what it replaced in a
// directory already there stays replaced (see RunFetch).
type Fetched struct {
	Bytes   int64    `json:"bytes"`
	SHA256  string   `json:"sha256"`
	Files   int      `json:"files"`
	Members []string `json:"members,omitempty"`
	Error   string   `json:"error,omitempty"`
}

// CapabilityFetch is listed in AgentHello.Capabilities by an agent that
// serves Fetch.
const CapabilityFetch = "fetch"

// Frame types of Fetch (beyond frame.go's first protocol).
const (
	TypeFetch   Type = 0x25 // Fetch (JSON); answered by Fetched
	TypeFetched Type = 0x26 // Fetched (JSON)
)
