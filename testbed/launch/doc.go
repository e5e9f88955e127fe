// Package launch starts a whole Pollux cluster on one machine, as
// separate OS processes (servers, agents, and the workers the agents
// start), and is the one launcher behind `pollux demo`, `pollux
// chaos` and the multi-process tests. It drives the cluster only through
// command lines, signals and the HTTP API, as a user would.
//
// Agents run emulated GPUs, or with Options.CPUSlots CPU slots on which
// they run real workers (`pollux demo --real`, package realdemo); with at
// least as many cores as slots in all, each agent's slots get cores of
// their own (`pollux agent --cpus`, AgentCores), as on machines of their own.
//
// Processes talk over 127.0.0.1 (Loopback), or each runs in a network
// namespace of its own on a virtual LAN (Namespaces, package netns) that
// the fault-injection harness can partition and degrade.
//
// Every cluster runs secured, as the project's rule is: the launcher makes
// a CA, a certificate per server and agent (naming its address on the
// virtual LAN too) and a gossip key per run (Dir/tls, package pki), starts
// every process with them, and speaks HTTPS to the API. API tokens are on
// too: the launcher makes the run's admin secret (Dir/admin.token, 0600),
// bootstraps the cluster's tokens with it once the servers run (POST
// /v1/acl/bootstrap with the run's client certificate), and sends it with
// every request of its clients; AdminToken hands it to drivers, which
// make the narrower tokens they need with it (CreateToken). DashboardURL
// is a server's web dashboard signed in with a token, and ServerKeyPins
// what a browser that does not know the run's CA needs to trust the
// servers (pollux demo --ui, the dashboard's browser test).
//
// With Observe on, the launcher is also the harness's observer: every
// API operation its Client sends is recorded in the run's client-side
// history (package history) with its answer; so are the processes it
// starts, the signals it sends, their exits, and the worker processes it
// sees gone. Every agent's workers write their own records (package
// record) into a directory per agent. Nothing is read from the system's
// own logs.
//
// Stop and Close stop every process the launcher started, and every
// worker it saw, also when its caller is interrupted; a run's network
// namespaces and tmpfs mounts go with them. Every server and agent runs
// with a TMPDIR of its own in the run's directory (Member.TempDir), so
// that what a killed one leaves there, such as an agent's workers'
// report tokens, is removed with that directory.
package launch
