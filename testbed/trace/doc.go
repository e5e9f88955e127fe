// Package trace loads the measured traces of the Pollux artifact (one
// directory per application holding placements.csv, scalability.csv and
// validation-<batch>.csv) and answers the simulator's ground-truth
// questions by interpolating them: step and sync time for any placement
// and atomic batch, gradient statistics for any total batch and epoch, and
// the progress at which each epoch ends.
//
// Every decoding error names the file and the line. The loaded data stays
// in memory only; nothing here writes trace rows anywhere.
package trace
