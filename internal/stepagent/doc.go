// Package stepagent is the step agent: the program (cmd/knotless-agent)
// that owns one run's environment. It starts each step detached from any
// client (its own process group, stdout and stderr into a file, the exit
// status recorded on disk), at most once per step ID; it is a child
// subreaper, so every process a step leaves behind is re-parented to it
// and killed when the step ends, and it gives each step a cgroup v2 of its
// own where its cgroup is delegated to it (it says which mechanism holds).
// Clients (internal/agent) connect, start or attach to a step, follow its
// output from any byte offset, stop it, and copy files in and out.
//
// It must never write a secret to disk (a step's environment lives in
// memory until the step's execve), never leave a step's process alive
// after reporting the step's end, and never depend on a client staying
// connected: a step goes on, and is reported, whoever is attached.
package stepagent
