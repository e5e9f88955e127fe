package report

import "errors"

// errNoRuntimes: a published-runtimes file or a scale sweep without a
// runtime to show.
var errNoRuntimes = errors.New("no policy runtimes")
