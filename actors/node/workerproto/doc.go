// Package workerproto is the wire format between the control plane and a
// training process (a worker), as documented in docs/worker-protocol.md:
// the environment a worker is started with (Env) and the JSON-lines
// reports it sends back (Report, Decode, Reader), and the report tokens
// that authenticate them (ReportToken).
//
// It holds no behaviour beyond encoding and strict validation, so that the
// node actor, the job actor and the emulated worker all agree on one
// definition. Everything a worker sends is outside input: Decode rejects
// unknown fields, non-finite or negative metrics and oversized lines with an
// error, never a panic. Whether a report belongs to a live job and
// incarnation is for the caller to decide.
package workerproto
