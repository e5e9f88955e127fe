//go:build !race

package optimizer_test

// raceEnabled reports whether the race detector is on (it slows the
// reference GA tenfold).
const raceEnabled = false
