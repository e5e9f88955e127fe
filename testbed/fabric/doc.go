// Package fabric is the network that the trace-driven simulator and the
// emulated worker run their jobs on, the ground truth of what
// synchronising across racks costs. No trace measured a placement across
// racks, so this cost comes from a model of the links rather than from
// measurements, and no policy sees it: the jobs measure its effect on
// their step times and fit a term of their own (docs/fidelity.md,
// Part 3).
//
// Every node has a link of NodeBandwidth bytes per second; the traces,
// taken within one rack, measured synchronisation over such links. Each
// rack reaches the others through one uplink of its nodes' bandwidth
// divided by the oversubscription. A job spanning r > 1 racks
// synchronises hierarchically: within each rack as the traces measured,
// then across racks by a ring among the racks that moves 2(r-1)/r times
// its gradients through each spanned rack's uplink. The jobs crossing an
// uplink at one moment share it max-min fairly (progressive filling),
// each no faster than its own nodes in that rack can send; what that
// exchange takes beyond the time the same bytes would take at the job's
// own node links is added, exposed, to every synchronised step.
//
// A job's gradients are its model's parameters in 32-bit floats
// (GradientBytes, with the sources of the parameter counts).
package fabric
