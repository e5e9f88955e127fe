// Package dashboard is the web dashboard every server serves at /ui/
// next to its API: the cluster as racks, nodes and GPUs coloured by job
// (dead nodes marked), the jobs table and a page per job (its throughput
// model, its measured profile against the fitted curve, its speedup and
// its gradient-noise history), the control plane (leader, term,
// allocation generation, Raft peers with their racks, the last round),
// and time series of GPUs in use, jobs running and pending and cluster
// goodput over the last hours.
//
// Why a package of its own: the pages read the same replicated state as
// the API but also keep what the state does not (each server samples its
// own copy into a bounded in-memory ring every Config.SampleEvery, and
// every job's gradient statistics as they change), and they speak to a
// browser, whose credentials travel in a cookie rather than a header.
//
// Authentication is the API's own: the dashboard asks the API, in
// process, who a token is (GET /v1/acl/self) and sends cancels through
// the API's endpoint, so a read token is enough to look and nothing
// changes state that the token may not change. A browser signs in by
// POSTing the token from the sign-in page's form (or its URL fragment,
// which no server sees), never by a GET another site could trigger; the
// token then lives in an HttpOnly cookie named per port. Cancels also
// need the page's own header (X-Pollux-UI), which no other site's page
// can send.
//
// Every page is served with its data embedded, then polls its own
// server's PathOverview every second: a follower answers from its copy
// (flagged stale when it has not heard from a leader for
// Config.StaleAfter, or knows none), a leader that cannot reach a
// majority says so, and a page left open on a follower through a leader
// failover shows the new leader as soon as its server knows it. The
// assets (the page script, the stylesheet and uPlot, vendored under
// assets/uplot with its licence and version) are embedded in the binary.
package dashboard
