package main

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	cdpruntime "github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"pollux/actors/server/api"
	"pollux/testbed/builtin"
	"pollux/testbed/launch"
)

// chromium is Debian's Chromium, which the browser test drives.
const chromium = "/usr/bin/chromium"

// screenshotsEnv names a directory into which TestDashboardInBrowser
// also writes the screenshots of docs/ (make screenshots).
const screenshotsEnv = "POLLUX_SCREENSHOTS_DIR"

// TestDashboardInBrowser starts a secured cluster (3 servers, 2 agents),
// runs four long jobs on it and drives headless Chromium through the
// dashboard of a follower, signed in with a read token through the URL
// `pollux demo --ui` prints: the page shows every node, and every job
// holding GPUs with the GPU count /v1/jobs gives it (in its list and in
// the grid); an unknown job is a 404 page; a read token is offered no
// control, an admin's cancel button cancels; the cancelled job's page
// shows the admin lines its worker wrote (its live log) and its
// timeline (submitted, placed, ..., cancelled), and a read token the
// timeline but not the log; after the leader is
// SIGKILLed the open page shows the new leader within 5 s; a job
// cancelled through the API leaves the running list; a killed agent's
// node is marked dead; a revoked token signs the page out; a server left
// without quorum says its data may be behind; the page's script throws
// nothing. It saves a screenshot of each view in its artifact directory
// (go test -artifacts keeps them), and the cluster view and a job page
// in $POLLUX_SCREENSHOTS_DIR when set.
func TestDashboardInBrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 5-process cluster and a browser")
	}
	needChromium(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	dir := t.TempDir()
	c := startCluster(ctx, t, launch.Options{Dir: dir,
		Servers: 3, Agents: 2, GPUsPerAgent: 4, GPUTypes: []string{"a100", "t4"}, Interval: time.Second, TimeScale: 20})
	defer c.finish()
	cat, err := builtin.Catalog()
	if err != nil {
		t.Fatal(err)
	}
	cl := c.Client()
	for _, j := range []launch.Job{{Name: "imagenet-a", App: "imagenet"}, {Name: "yolo-b", App: "yolov3"},
		{Name: "imagenet-c", App: "imagenet"}, {Name: "speech-d", App: "deepspeech2"}} {
		spec, err := j.Spec(cat, 8)
		if err != nil {
			t.Fatal(err)
		}
		if a := cl.SubmitAny(ctx, j.Name, spec, 200*time.Millisecond, 20*time.Second); !a.OK() {
			t.Fatalf("submitting %s: %v", j.Name, a)
		}
	}
	// Every job holds GPUs, and the cluster has grown them beyond one
	// each, before the browser looks.
	waitFor(t, ctx, 90*time.Second, "every job holding GPUs, 6 or more in all", func() (bool, string) {
		js, _, err := cl.JobsAny(ctx)
		if err != nil {
			return false, err.Error()
		}
		used := 0
		for _, g := range holding(js) {
			used += g
		}
		return len(holding(js)) == 4 && used >= 6, fmt.Sprint(holding(js))
	})
	tok, err := c.CreateToken(ctx, "dashboard-test", "read")
	if err != nil {
		t.Fatal(err)
	}
	leader, _, err := c.Leader(ctx, 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var follower *launch.Member
	for _, m := range c.Servers {
		if m != leader {
			follower = m
			break
		}
	}
	pins, err := c.ServerKeyPins()
	if err != nil {
		t.Fatal(err)
	}
	bctx, jsErrors := browser(t, ctx, pins)
	defer func() {
		// The page's script ran without an uncaught exception.
		for _, e := range jsErrors() {
			t.Errorf("the page threw: %s", e)
		}
	}()
	shots := t.ArtifactDir()
	t.Logf("screenshots in %s", shots)
	shot := func(name string) {
		t.Helper()
		png, err := chromedp.Run(within(bctx), chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatalf("screenshot %s: %v", name, err)
		}
		if err := os.WriteFile(filepath.Join(shots, name+".png"), png, 0o644); err != nil {
			t.Fatal(err)
		}
		if d := os.Getenv(screenshotsEnv); d != "" && (name == "cluster" || name == "job") {
			if err := os.WriteFile(filepath.Join(d, "dashboard-"+name+".png"), png, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	base := "https://" + follower.HTTP
	// do runs browser steps, each bounded: a page that never shows what
	// a step waits for fails the test in time.
	do := func(steps ...chromedp.Action[chromedp.Void]) error {
		ctx, cancel := context.WithTimeout(bctx, 30*time.Second)
		defer cancel()
		return chromedp.Do(ctx, steps...)
	}

	// Signed in by the URL's token, which leaves the address bar.
	if err := do(chromedp.Navigate(launch.DashboardURL(follower, tok.Secret)), chromedp.WaitVisible(chromedp.CSS("#grid"))); err != nil {
		t.Fatal(err)
	}
	loc, err := chromedp.Run(within(bctx), chromedp.Location())
	if err != nil {
		t.Fatal(err)
	}
	if loc != base+"/ui/" {
		t.Errorf("after sign-in the page is at %q, want %q (the token out of the URL)", loc, base+"/ui/")
	}
	// Every node of /v1/nodes, and nothing else.
	nodes, err := cl.Nodes(ctx, leader, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var wantNodes []string
	for _, n := range nodes {
		wantNodes = append(wantNodes, n.ID)
	}
	pageNodes, err := chromedp.Run(within(bctx), chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll("[data-node]")).map(e => e.dataset.node).sort()`))
	if err != nil {
		t.Fatal(err)
	}
	if slices.Sort(wantNodes); !slices.Equal(pageNodes, wantNodes) || len(wantNodes) != 2 {
		t.Errorf("page shows nodes %v, /v1/nodes %v", pageNodes, wantNodes)
	}
	// Every job holding GPUs, with the GPUs /v1/jobs gives it, in the
	// list and in the grid: compared at a moment when the leader's
	// answer did not change around the page's.
	type pageJobs struct {
		List map[string]int `json:"list"`
		Grid map[string]int `json:"grid"`
	}
	var last string
	waitFor(t, ctx, 30*time.Second, "the page showing /v1/jobs's GPUs", func() (bool, string) {
		before, _, err := cl.JobsAny(ctx)
		if err != nil {
			return false, err.Error()
		}
		pj, err := chromedp.Run(within(bctx), chromedp.Evaluate[pageJobs](`({
			list: Object.fromEntries(Array.from(document.querySelectorAll("#running-jobs tr[data-job]")).map(e => [e.dataset.job, +e.dataset.gpus])),
			grid: Array.from(document.querySelectorAll(".gpu[data-gpu-job]")).reduce((m, e) => (m[e.dataset.gpuJob] = (m[e.dataset.gpuJob] || 0) + 1, m), {})
		})`))
		if err != nil {
			return false, err.Error()
		}
		after, _, err := cl.JobsAny(ctx)
		if err != nil {
			return false, err.Error()
		}
		want := holding(before)
		last = fmt.Sprintf("API %v then %v, page list %v grid %v", want, holding(after), pj.List, pj.Grid)
		return maps.Equal(want, holding(after)) && maps.Equal(pj.List, want) && maps.Equal(pj.Grid, want), last
	})
	t.Log(last)
	shot("cluster")

	// The other views, and a 404 page for an unknown job.
	for _, v := range []struct{ path, wait, name string }{
		{"/ui/jobs", "#jobs-active tr[data-job]", "jobs"},
		{"/ui/jobs/imagenet-a", "#chart-fit canvas", "job-early"},
		{"/ui/control", "#peers tr[data-peer]", "control"},
		{"/ui/history", "#chart-gpus canvas", "history"},
		{"/ui/jobs/no-such-job", "#error-title", "not-found"},
	} {
		if err := do(chromedp.Navigate(base+v.path), chromedp.WaitVisible(chromedp.CSS(v.wait))); err != nil {
			t.Fatalf("%s: %v", v.path, err)
		}
		shot(v.name)
	}
	if text, err := chromedp.Run(within(bctx), chromedp.Text(chromedp.CSS("#error-title"))); err != nil || !strings.Contains(text, "404") {
		t.Errorf("unknown job page says %q (%v)", text, err)
	}
	// The agents have two GPU types: a job page draws a speedup curve per
	// type the job's bid has a model for, named after the type, among
	// them the type the API says it runs on.
	if err := do(chromedp.Navigate(base+"/ui/jobs/imagenet-a"), chromedp.WaitVisible(chromedp.CSS("#chart-speedup canvas"))); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, 30*time.Second, "imagenet-a's page with a speedup curve of the GPU type it runs on", func() (bool, string) {
		js, _, err := cl.JobsAny(ctx)
		if err != nil {
			return false, err.Error()
		}
		typ := ""
		for _, j := range js {
			if j.ID == "imagenet-a" && len(j.Placement) > 0 {
				typ = j.Placement[0].GPUType
			}
		}
		legend, err := chromedp.Run(within(bctx), chromedp.Text(chromedp.CSS("#chart-speedup")))
		if err != nil {
			return false, err.Error()
		}
		return typ != "" && strings.Contains(legend, typ+" (one GPU "), fmt.Sprintf("placed on %q; legend %q", typ, legend)
	})
	shot("job-types")
	// A read token is offered nothing that changes state.
	if err := do(chromedp.Navigate(base+"/ui/jobs"), chromedp.WaitVisible(chromedp.CSS("#jobs-active tr[data-job]"))); err != nil {
		t.Fatal(err)
	}
	if n, err := chromedp.Run(within(bctx), chromedp.Evaluate[int](`document.querySelectorAll("button, form, input").length`)); err != nil || n != 0 {
		t.Errorf("the jobs page offers a read token %d controls (%v)", n, err)
	}
	// An admin token is offered a cancel button per active job; then the
	// read token signs in again.
	if err := do(chromedp.Navigate(launch.DashboardURL(follower, c.AdminToken())), chromedp.WaitVisible(chromedp.CSS("#grid")),
		chromedp.Navigate(base+"/ui/jobs"), chromedp.WaitVisible(chromedp.CSS("#jobs-active button.cancel"))); err != nil {
		t.Fatal(err)
	}
	if n, err := chromedp.Run(within(bctx), chromedp.Evaluate[int](`document.querySelectorAll("#jobs-active tr[data-job] button.cancel").length -
		document.querySelectorAll("#jobs-active tr[data-job]").length`)); err != nil || n != 0 {
		t.Errorf("an admin's jobs page: %d more cancel buttons than active jobs (%v)", n, err)
	}
	// Its button cancels the job, through the page's own request (the
	// confirmation answered yes).
	if _, err := chromedp.Run(within(bctx), chromedp.Evaluate[chromedp.Void](`window.confirm = () => true`)); err != nil {
		t.Fatal(err)
	}
	if err := do(chromedp.Click(chromedp.CSS(`#jobs-active tr[data-job="speech-d"] button.cancel`))); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, 10*time.Second, "speech-d cancelled by the page's button", func() (bool, string) {
		j, found, err := cl.JobAny(ctx, "speech-d")
		if err != nil || !found {
			return false, fmt.Sprint(found, err)
		}
		return j.State == "cancelled" && strings.Contains(j.Reason, api.BootstrapName), j.State + " " + j.Reason
	})
	// The cancelled job's page, to the admin: its log shows lines its
	// worker wrote (the emulated worker's log lines name their job: on a
	// quiet machine its exit line, on a loaded one perhaps only its
	// complaints that it could not report in time), and its timeline the
	// events of the job from its submission to its cancellation.
	if err := do(chromedp.Navigate(base+"/ui/jobs/speech-d"), chromedp.WaitVisible(chromedp.CSS("#job-timeline"))); err != nil {
		t.Fatal(err)
	}
	type jobPage struct {
		Log    []string `json:"log"`
		Events []string `json:"events"`
		Status string   `json:"status"`
	}
	readJobPage := func() (jobPage, error) {
		return chromedp.Run(within(bctx), chromedp.Evaluate[jobPage](`({
			log: Array.from(document.querySelectorAll("#log-lines .log-line")).map(e => e.textContent),
			events: Array.from(document.querySelectorAll("#job-events tr[data-event-type]")).map(e => e.dataset.eventType).reverse(),
			status: (document.getElementById("log-status") || {}).textContent || ""
		})`))
	}
	waitFor(t, ctx, 60*time.Second, "speech-d's page showing lines its worker wrote and its timeline", func() (bool, string) {
		p, err := readJobPage()
		if err != nil {
			return false, err.Error()
		}
		wrote := slices.ContainsFunc(p.Log, func(l string) bool {
			return workerTime.MatchString(l) && strings.Contains(l, " job=speech-d ")
		})
		ordered := len(p.Events) >= 3 && p.Events[0] == "submitted" && p.Events[1] == "placed" && p.Events[len(p.Events)-1] == "cancelled"
		return wrote && ordered, fmt.Sprintf("log %q (%s); timeline %v", p.Log, p.Status, p.Events)
	})
	shot("job-log-timeline")
	// To the read token, the same page draws the timeline but says the
	// token may not read the log (the API's 403), showing none of it.
	if err := do(chromedp.Navigate(launch.DashboardURL(follower, tok.Secret)), chromedp.WaitVisible(chromedp.CSS("#grid")),
		chromedp.Navigate(base+"/ui/jobs/speech-d"), chromedp.WaitVisible(chromedp.CSS("#job-timeline"))); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, 30*time.Second, "speech-d's page to a read token: the timeline, and no log", func() (bool, string) {
		p, err := readJobPage()
		if err != nil {
			return false, err.Error()
		}
		return len(p.Log) == 0 && strings.Contains(p.Status, "only its submitter or an admin") && slices.Contains(p.Events, "cancelled"),
			fmt.Sprintf("log %q (%s); timeline %v", p.Log, p.Status, p.Events)
	})

	// Leader failover: the page, open on a follower and showing the
	// leader, shows the new leader within 5 s of the old one's SIGKILL.
	// (Leadership may have moved since the start, under load: the page
	// then moves to a server that does not lead, signing in there.)
	if err := do(chromedp.Navigate(base+"/ui/control"), chromedp.WaitVisible(chromedp.CSS("#peers"))); err != nil {
		t.Fatal(err)
	}
	pageLeader := func() string {
		s, _ := chromedp.Run(within(bctx), chromedp.Text(chromedp.CSS("#leader")))
		return strings.TrimSpace(s)
	}
	waitFor(t, ctx, 30*time.Second, "the page of a follower showing the leader", func() (bool, string) {
		cur, _, err := c.Leader(ctx, 5*time.Second)
		if err != nil {
			return false, err.Error()
		}
		leader = cur
		if cur == follower {
			for _, m := range c.Servers {
				if m != cur {
					follower = m
					break
				}
			}
			base = "https://" + follower.HTTP
			if err := do(chromedp.Navigate(launch.DashboardURL(follower, tok.Secret)), chromedp.WaitVisible(chromedp.CSS("#grid")),
				chromedp.Navigate(base+"/ui/control"), chromedp.WaitVisible(chromedp.CSS("#peers"))); err != nil {
				return false, err.Error()
			}
		}
		shown := pageLeader()
		return shown == cur.ID, fmt.Sprintf("the page on %s shows leader %q, the leader is %s", follower.ID, shown, cur.ID)
	})
	if err := c.Signal(leader, syscall.SIGKILL, "", 0); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	var shown string
	for time.Since(killed) < 5*time.Second {
		if shown = pageLeader(); shown != leader.ID && shown != "none" && shown != "" {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	took := time.Since(killed)
	newLeader, _, err := c.Leader(ctx, 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if shown != newLeader.ID || took > 5*time.Second {
		t.Errorf("%v after the SIGKILL of %s the page shows leader %q; the new leader is %s", took.Round(time.Millisecond), leader.ID, shown, newLeader.ID)
	} else {
		t.Logf("the page showed the new leader %s %v after the SIGKILL of %s", shown, took.Round(time.Millisecond), leader.ID)
	}
	shot("control-after-failover")

	// A cancelled job leaves the running list (and the active table).
	if err := do(chromedp.Navigate(base+"/ui/"), chromedp.WaitVisible(chromedp.CSS("#running-jobs"))); err != nil {
		t.Fatal(err)
	}
	if a := cl.CancelAny(ctx, "yolo-b", 200*time.Millisecond, 20*time.Second); !a.OK() {
		t.Fatalf("cancel: %v", a)
	}
	waitFor(t, ctx, 10*time.Second, "yolo-b leaving the running list", func() (bool, string) {
		in, err := chromedp.Run(within(bctx), chromedp.Evaluate[bool](`!!document.querySelector('#running-jobs tr[data-job="yolo-b"]')`))
		if err != nil {
			return false, err.Error()
		}
		return !in, fmt.Sprint("listed: ", in)
	})
	if err := do(chromedp.Navigate(base+"/ui/jobs"), chromedp.WaitVisible(chromedp.CSS(`#jobs-finished tr[data-job="yolo-b"][data-state="cancelled"]`))); err != nil {
		t.Errorf("cancelled job in the finished table: %v", err)
	}
	if activeHasIt, err := chromedp.Run(within(bctx), chromedp.Evaluate[bool](`!!document.querySelector('#jobs-active tr[data-job="yolo-b"]')`)); err != nil || activeHasIt {
		t.Errorf("cancelled job still among the active ones (%v)", err)
	}

	// A job's page once it has measured more (the screenshot of docs/).
	if err := do(chromedp.Navigate(base+"/ui/jobs/imagenet-a"), chromedp.WaitVisible(chromedp.CSS("#chart-speedup canvas"))); err != nil {
		t.Fatal(err)
	}
	shot("job")

	// A node whose agent is killed is marked dead.
	if err := do(chromedp.Navigate(base+"/ui/"), chromedp.WaitVisible(chromedp.CSS("#grid"))); err != nil {
		t.Fatal(err)
	}
	victim := c.Agents[1]
	if err := c.Signal(victim, syscall.SIGKILL, "", 0); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, 20*time.Second, "the killed agent's node marked dead", func() (bool, string) {
		h, err := chromedp.Run(within(bctx), chromedp.Evaluate[string](`(document.querySelector('[data-node="`+victim.ID+`"]') || {dataset: {}}).dataset.health || ""`))
		if err != nil {
			return false, err.Error()
		}
		return h == "dead", "health " + h
	})
	shot("cluster-dead-node")

	// Revoking the token signs the open page out. A 503 (the two servers
	// left lost their quorum for a moment: the write may or may not have
	// committed) is retried; 409 then says an earlier attempt committed.
	waitFor(t, ctx, 20*time.Second, "the token revoked", func() (bool, string) {
		resp, err := c.HTTPClient(10*time.Second).Post("https://"+follower.HTTP+api.PathACLTokens+"/"+tok.Accessor+"/revoke", "application/json", nil)
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		switch resp.StatusCode {
		case http.StatusOK, http.StatusConflict:
			return true, resp.Status
		case http.StatusServiceUnavailable:
			return false, resp.Status
		}
		t.Fatalf("revoking the token: %s", resp.Status)
		return false, ""
	})
	waitFor(t, ctx, 10*time.Second, "the page signed out after the token's revocation", func() (bool, string) {
		b, err := chromedp.Run(within(bctx), chromedp.Text(chromedp.CSS("#banner")))
		if err != nil {
			return false, err.Error()
		}
		return strings.Contains(b, "Signed out") && strings.Contains(b, "revoked"), "banner " + b
	})
	shot("signed-out")

	// Signed in again with a new token, the page of a server left alone
	// (the other live server killed: no quorum) says its data is stale
	// rather than showing it as current.
	tok2, err := c.CreateToken(ctx, "dashboard-test-2", "read")
	if err != nil {
		t.Fatal(err)
	}
	if err := do(chromedp.Navigate(launch.DashboardURL(follower, tok2.Secret)), chromedp.WaitVisible(chromedp.CSS("#grid"))); err != nil {
		t.Fatal(err)
	}
	for _, m := range c.Servers {
		if m != follower && m.Running() {
			if err := c.Signal(m, syscall.SIGKILL, "", 0); err != nil {
				t.Fatal(err)
			}
		}
	}
	waitFor(t, ctx, 20*time.Second, "the page saying its server has no quorum", func() (bool, string) {
		b, err := chromedp.Run(within(bctx), chromedp.Evaluate[[]string](`[document.getElementById("banner").dataset.health || "", document.getElementById("banner").textContent]`))
		if err != nil || len(b) != 2 {
			return false, fmt.Sprint(b, err)
		}
		return (b[0] == "stale" || b[0] == "no-quorum") && strings.Contains(b[1], "may be behind"), strings.Join(b, ": ")
	})
	shot("no-quorum")
}

// needChromium skips the test without Chromium (or fails it when
// POLLUX_REQUIRE_CHROMIUM is set, as in CI).
func needChromium(t *testing.T) {
	t.Helper()
	if _, err := os.Stat(chromium); err != nil {
		if os.Getenv("POLLUX_REQUIRE_CHROMIUM") != "" {
			t.Fatalf("POLLUX_REQUIRE_CHROMIUM is set but Chromium is missing at %s (Debian package chromium): %v", chromium, err)
		}
		t.Skipf("this browser test needs Chromium at %s (Debian package chromium: apt-get install -y chromium): %v", chromium, err)
	}
}

// within bounds one browser query (the context is dropped with the
// query's end; the tab lives on).
func within(bctx context.Context) context.Context {
	ctx, cancel := context.WithTimeout(bctx, 10*time.Second)
	context.AfterFunc(ctx, cancel)
	return ctx
}

// holding maps the jobs holding GPUs to their GPU counts.
func holding(js []api.Job) map[string]int {
	out := map[string]int{}
	for _, j := range js {
		if j.GPUs > 0 && j.State != "completed" && j.State != "failed" && j.State != "cancelled" {
			out[j.ID] = j.GPUs
		}
	}
	return out
}

// waitFor polls cond until it holds, failing the test with cond's last
// word after within.
func waitFor(t *testing.T, ctx context.Context, within time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		ok, why := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			t.Fatalf("no %s within %v: %s", what, within, why)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// browser starts headless Chromium with a fresh profile, trusting the
// servers' keys (pins) although it does not know the cluster's CA, and
// returns its context and the uncaught exceptions of the page's script
// so far; the test's end stops it.
func browser(t *testing.T, ctx context.Context, pins []string) (context.Context, func() []string) {
	t.Helper()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromium),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("ignore-certificate-errors-spki-list", strings.Join(pins, ",")),
		chromedp.UserDataDir(t.TempDir()),
		// Its own TMPDIR: Chromium stopped by the test's end leaves its
		// org.chromium.Chromium.* directory behind.
		chromedp.Env("TMPDIR=" + t.TempDir()),
		chromedp.WindowSize(1300, 1000),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	var mu sync.Mutex
	var thrown []string
	bctx, cancelBrowser := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf), chromedp.WithListener(func(ev any) {
		if e, ok := ev.(*cdpruntime.EventExceptionThrown); ok && e.ExceptionDetails != nil {
			mu.Lock()
			defer mu.Unlock()
			msg := e.ExceptionDetails.Text
			if e.ExceptionDetails.Exception != nil {
				msg += " " + e.ExceptionDetails.Exception.Description
			}
			thrown = append(thrown, fmt.Sprintf("%s (%s:%d)", msg, e.ExceptionDetails.URL, e.ExceptionDetails.LineNumber))
		}
	}))
	t.Cleanup(func() {
		cancelBrowser()
		cancelAlloc()
	})
	if err := chromedp.Do(bctx); err != nil {
		t.Fatalf("starting %s: %v", chromium, err)
	}
	return bctx, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(thrown)
	}
}
