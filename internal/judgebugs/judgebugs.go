//go:build judgebugs

package judgebugs

import "os"

// Env is the environment variable that names the bug a process plants.
const Env = "POLLUX_JUDGEBUG"

// Bug is a planted bug.
type Bug string

// The bugs.
const (
	// DropCompletion: the leader's allocator drops every completion of
	// the first job to complete (it never commits it).
	DropCompletion Bug = "drop-completion"
	// StaleAllocation: a few rounds after the leader saw a job it had
	// placed completed, it sends the nodes, for four rounds, the
	// allocation of the last round that placed the job (under a new
	// incarnation), as the current generation.
	StaleAllocation Bug = "stale-allocation"
	// StaleRead: a follower's API answers reads from the state it had
	// when it first served one, marked fresh (not stale).
	StaleRead Bug = "stale-read"
)

// Bugs are every planted bug.
var Bugs = []Bug{DropCompletion, StaleAllocation, StaleRead}

// Planted reports whether this process plants b.
func Planted(b Bug) bool { return os.Getenv(Env) == string(b) }
