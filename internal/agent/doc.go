// Package agent is the protocol spoken between the runner (an executor's
// session) and the step agent inside a job environment (cmd/knotless-agent,
// internal/stepagent): framing, messages, the copy format, and the client
// the executors use.
//
// The protocol runs over one byte stream: a Unix socket for the shell
// executor, the STDIN/STDOUT of an exec (`knotless-agent connect`) for kube
// and docker. It is built for a stream that can drop at any byte:
//
//   - Each side opens with Preamble and then a Hello frame; the client offers
//     the protocol versions it speaks, the agent picks one (a versioned
//     handshake). Anything else first (a shell's "not found") is reported as
//     such, not misread.
//   - Every frame carries its type, its length and a CRC-32C: a stream cut
//     mid-frame, or bytes that are not a frame, are detected, never taken
//     for a shorter message.
//   - No state lives only in the stream. The agent keeps each step's output
//     in a file and its exit status on disk; a client that reconnects starts
//     a step again by its ID (the agent attaches instead of starting it a
//     second time) and resumes the output at the raw byte offset it has.
//   - Both sides send Heartbeat frames while otherwise silent, so an idle
//     connection is neither cut by a proxy's idle timeout nor mistaken for a
//     live one when it is dead.
//   - Steps run one at a time, except detached ones (Start.Detach: a
//     workflow's `detach: true` service), which run beside the later steps
//     until they exit or a Stop ends them; Steps asks for every step's
//     state (a StepList), so a client can see a service end on its own.
//
// Secrets travel only inside Start frames, on the stream, never on a
// command line or in a file. This package must not log a frame's payload.
package agent
