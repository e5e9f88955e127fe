// Package rootgate is how tests that need root (network namespaces,
// mounts, another user's processes) skip without it: with a message
// naming what is missing, or, when POLLUX_REQUIRE_ROOT=1 (set by CI,
// which runs as root), with a failure, so that a CI run cannot pass by
// skipping them.
package rootgate
