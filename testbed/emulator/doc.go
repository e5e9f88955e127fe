// Package emulator is an emulated GPU worker: it follows an application
// profile (a testbed.Application: true step times, gradient statistics and
// epoch boundaries) at a configurable time scale, and behaves towards the
// control plane exactly as a real trainer following docs/worker-protocol.md
// would: it restores from its checkpoint directory on start, reports JSON
// lines to its report address, checkpoints and exits 0 when cancelled
// (SIGTERM), and sends a final "done" report when its epochs are finished.
//
// Workers running in one process may share a network of racks
// (Config.Links, package fabric: the simulator's link model), which adds
// to their synchronised steps what crossing racks costs at the moment;
// the control plane learns that cost from their reports alone.
//
// It is how a whole cluster runs on one machine: `pollux worker --emulate
// APP` is this package behind a command.
package emulator
