// Package refsnap reads the allocator snapshots captured from the public
// Python Pollux artifact (../shared/pollux-artifact/allocator-snapshots:
// one JSON file per allocation round plus reference-fitness.json) into the
// optimizer's Snapshot type, so that tests and `pollux bench allocator` can
// check our objective and search against the reference's.
//
// Decoding is strict about what the objective needs: a missing or
// malformed field, an allocation naming an unknown node, or a job asking
// for anything but one GPU per replica is an error naming the job or node.
package refsnap
