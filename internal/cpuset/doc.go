// Package cpuset reads and writes lists of CPU ids in Linux's cpu-list
// syntax ("0-3,6"), reads this process's CPU affinity, and shares cores
// among CPU slots or agents: what `pollux agent --cpus` and the
// launcher that gives agents on one machine their own cores need.
package cpuset
