// Package job holds the job actors and the host that runs them on every
// server.
//
// A job actor owns one job's model. It receives its workers' reports
// (forwarded by the node actors to the owner named in each assignment),
// keeps the job's profile per GPU type (the type of the nodes each
// incarnation ran on, which the leader sends with its shape, with the
// racks it spans: a configuration across racks is its own profile
// point, from which the model's cross-rack term is fitted), fits a
// throughput model per type from that type's measurements alone,
// incrementally (only when there is new data: at once when a
// configuration is profiled for the first time, otherwise at most every
// RefitEvery, each fit warm-started from the type's last with
// goodput.Refit), tracks the gradient
// statistics, chooses the batch size, accumulation steps and gain it will
// run on every allocation shape it may be offered (one node or several,
// 1..K replicas up to its replica bound) and bids all that to the
// leader's allocator (pb.Bid): the top-level model and tables of the type
// it has measured most, and a part per type it has a model on (models.go).
// The allocator builds the job's goodput models from the bid alone and
// tells the workers the configuration the bid chose for the type they
// run on; the bid goes into the replicated state with the next round,
// so a new leader has it at once.
//
// Measurements reach the replicated state exactly once: an actor numbers
// what it aggregates between two bids (per session, a number the leader
// gives the actor when it is spawned), repeats every measurement the
// state has not acknowledged in each bid, and drops it once its server's
// replicated state acknowledges it (state.Round merges a measurement
// only if it continues the acknowledged sequence). A leader change loses
// nothing and merges nothing twice.
//
// Job actors live on every server, not only on the leader: every round
// the leader spreads the live jobs over the live servers by rendezvous
// hashing and tells each server's host (pb.HostJobs, the whole set each
// time) which job actors it runs. The host spawns the missing ones and
// stops the others. A job actor starts from its server's replicated state
// (profile, bid, progress), so when a server dies its jobs move to the
// others with their profiles and models intact.
package job
