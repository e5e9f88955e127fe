package attack

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"pollux/actors/server/api"
	"pollux/testbed/launch"
)

// Attacks of one tenant (the attackers' submit token) on another's jobs
// and on the cluster's shared budget: checkpoint squatting, a job
// resuming another's checkpoints, report-token theft between jobs, the
// quotas and the state budget, a link swapped into the checkpoint root.
var tenantAttacks = []attack{
	{name: "checkpoint-squatting-a-live-jobs-directory", run: tenantSubmit(func(t *target) []byte {
		return t.appSpec("attack-squat-live", "checkpoint_dir: "+filepath.Join(t.root, "attack-victim")+"\n")
	}, http.StatusConflict, `held by job \"attack-victim\"`, "")},
	{name: "checkpoint-squatting-a-future-jobs-directory", run: tenantSubmit(func(t *target) []byte {
		return t.appSpec("attack-squat-next", "checkpoint_dir: "+filepath.Join(t.root, "victims-next-job")+"\n")
	}, http.StatusForbidden, "is not its own", "")},
	{name: "resume-from-another-tenants-job", run: tenantSubmit(func(t *target) []byte {
		return t.appSpec("attack-resume", "resume_from: attack-victim\n")
	}, http.StatusForbidden, "a job resumes only from jobs of the token that submits it", "")},
	{name: "report-token-theft-between-jobs", run: tokenTheft},
	{name: "reused-job-name-getting-a-pruned-jobs-checkpoints", run: reusedName},
	{name: "quota-submissions-per-second", run: withQuota(api.SetQuota{Quota: api.Quota{Rate: 0.01, Burst: 1}}, rateLimited)},
	{name: "submit-rate-spread-over-servers", run: withQuota(api.SetQuota{Quota: api.Quota{Rate: 0.011, Burst: spreadBurst}}, rateSpread)},
	{name: "idempotent-retry-spends-no-rate-token", run: retryFree},
	{name: "quota-spec-bytes", run: withQuota(api.SetQuota{Quota: api.Quota{SpecBytes: 16}}, tenantSubmit(attackSpec("attack-quota-bytes"),
		http.StatusTooManyRequests, "bytes of job specs", "30"))},
	{name: "quota-running-and-pending-jobs", run: withQuota(api.SetQuota{Quota: api.Quota{Jobs: 1}}, jobsQuota)},
	{name: "state-budget-full", run: stateBudgetFull},
	{name: "checkpoint-symlink-swap", run: deniedJob("attack-swap", func(t *target) []byte {
		// Someone who can write in the root puts a link out of it
		// where the job's own directory will be.
		if err := os.MkdirAll(t.root, 0o755); err != nil {
			panic(err)
		}
		if err := os.Symlink(t.marker, filepath.Join(t.root, "attack-swap")); err != nil && !os.IsExist(err) {
			panic(err)
		}
		return t.appSpec("attack-swap", "")
	}, "outside the checkpoint root")},
}

// tenantAnswer is one API answer to the attackers' tenant.
type tenantAnswer struct {
	code       int
	body       string
	retryAfter string
}

// request sends an API request to the leader with secret.
func (t *target) request(ctx context.Context, secret, method, path string, body []byte) (tenantAnswer, error) {
	return t.requestTo(ctx, t.leader, secret, "", method, path, body)
}

// requestTo sends an API request to server m with secret and, if not
// empty, idempotency key.
func (t *target) requestTo(ctx context.Context, m *launch.Member, secret, key, method, path string, body []byte) (tenantAnswer, error) {
	hc := t.c.HTTPClient(10 * time.Second)
	req, err := http.NewRequestWithContext(ctx, method, "https://"+m.HTTP+path, bytes.NewReader(body))
	if err != nil {
		return tenantAnswer{}, err
	}
	req.Header.Set("Authorization", "Bearer "+secret)
	if key != "" {
		req.Header.Set(api.HeaderIdempotencyKey, key)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return tenantAnswer{}, err
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 2048))
	return tenantAnswer{code: resp.StatusCode, body: strings.TrimSpace(string(msg)), retryAfter: resp.Header.Get("Retry-After")}, nil
}

// tenantAccessor is the accessor of the attackers' submit token.
func (t *target) tenantAccessor(ctx context.Context) (string, error) {
	a, err := t.request(ctx, t.tokens.submitter, http.MethodGet, api.PathACLSelf, nil)
	if err != nil || a.code != http.StatusOK {
		return "", fmt.Errorf("who am I: %v %d %s", err, a.code, a.body)
	}
	var tok api.Token
	if err := json.Unmarshal([]byte(a.body), &tok); err != nil {
		return "", err
	}
	return tok.Accessor, nil
}

// countLines counts the lines of the log file path holding every one
// of subs, and returns the last of them.
func countLines(path string, subs ...string) (int, string) {
	b, _ := os.ReadFile(path)
	n, last := 0, ""
	for _, line := range strings.Split(string(b), "\n") {
		ok := line != ""
		for _, s := range subs {
			ok = ok && strings.Contains(line, s)
		}
		if ok {
			n, last = n+1, line
		}
	}
	return n, last
}

// tenantSubmit submits spec with the attackers' submit token: refused if
// the leader answers want mentioning mention (and Retry-After
// retryAfter, if set) and logs exactly one refusal naming the token;
// the observer checks no job appeared and nothing else changed.
func tenantSubmit(spec func(*target) []byte, want int, mention, retryAfter string) func(context.Context, *target) (string, bool) {
	return func(ctx context.Context, t *target) (string, bool) {
		acc, err := t.tenantAccessor(ctx)
		if err != nil {
			return err.Error(), false
		}
		subs := []string{"api: refused request", "accessor=" + acc, "status=" + strconv.Itoa(want)}
		before, _ := countLines(t.leader.Log, subs...)
		a, err := t.request(ctx, t.tokens.submitter, http.MethodPost, api.PathJobs, spec(t))
		if err != nil {
			return "request failed: " + err.Error(), false
		}
		if a.code != want || !strings.Contains(a.body, mention) {
			return fmt.Sprintf("answer %d %s", a.code, a.body), false
		}
		if retryAfter != "" && a.retryAfter != retryAfter {
			return fmt.Sprintf("answer %d %s with Retry-After %q, want %q", a.code, a.body, a.retryAfter, retryAfter), false
		}
		n, line := countLines(t.leader.Log, subs...)
		for deadline := time.Now().Add(5 * time.Second); n == before && time.Now().Before(deadline); {
			time.Sleep(50 * time.Millisecond)
			n, line = countLines(t.leader.Log, subs...)
		}
		if n -= before; n != 1 {
			return fmt.Sprintf("%d %s; %d refusal lines of %s naming the token %s, want 1", a.code, a.body, n, t.leader.ID, acc), false
		}
		return fmt.Sprintf("%d %s (Retry-After %q); %s/%s logged: %s", a.code, a.body, a.retryAfter, t.leader.Role, t.leader.ID, logMsg(line)), true
	}
}

// setQuota sets a quota with the launcher's admin token.
func (t *target) setQuota(ctx context.Context, q api.SetQuota) error {
	b, _ := json.Marshal(q)
	a, err := t.request(ctx, t.c.AdminToken(), http.MethodPost, api.PathACLQuotas, b)
	if err == nil && a.code != http.StatusOK {
		err = fmt.Errorf("%d %s", a.code, a.body)
	}
	if err != nil {
		return fmt.Errorf("setting quota %+v: %w", q, err)
	}
	return nil
}

// withQuota runs attack with the attackers' token under quota q (set by
// the admin), then gives it the defaults again.
func withQuota(q api.SetQuota, attack func(context.Context, *target) (string, bool)) func(context.Context, *target) (string, bool) {
	return func(ctx context.Context, t *target) (string, bool) {
		acc, err := t.tenantAccessor(ctx)
		if err != nil {
			return err.Error(), false
		}
		q.Accessor = acc
		if err := t.setQuota(ctx, q); err != nil {
			return err.Error(), false
		}
		how, refused := attack(ctx, t)
		if err := t.setQuota(ctx, api.SetQuota{Accessor: acc}); err != nil {
			return how + "; " + err.Error(), false
		}
		return how, refused
	}
}

// rateLimited spends the attackers' bucket (burst 1) on a submission
// the leader takes and the state refuses (the victim's name, 409), then
// submits a good one: refused with 429 and Retry-After.
func rateLimited(ctx context.Context, t *target) (string, bool) {
	first, err := t.request(ctx, t.tokens.submitter, http.MethodPost, api.PathJobs, t.appSpec("attack-victim", ""))
	if err != nil || first.code != http.StatusConflict {
		return fmt.Sprintf("the first submission (a name taken): %v %d %s", err, first.code, first.body), false
	}
	how, refused := tenantSubmit(attackSpec("attack-rate"), http.StatusTooManyRequests, "submissions per second", "")(ctx, t)
	return "after one submission of a taken name: " + how, refused
}

// jobsQuota submits, with a quota of one live job, a first job (one the
// agents refuse to run, so that it fails soon after) and at once a
// second: refused with 429 while the first is pending; the first must
// then end failed by the agents' policy.
func jobsQuota(ctx context.Context, t *target) (string, bool) {
	const first = "attack-quota-first"
	t.expect[first] = "refuses to run it"
	a, err := t.request(ctx, t.tokens.submitter, http.MethodPost, api.PathJobs, t.commandSpec(first, []string{"/bin/sh", "-c", "true"}))
	if err != nil || a.code != http.StatusCreated {
		return fmt.Sprintf("the first submission: %v %d %s", err, a.code, a.body), false
	}
	how, refused := tenantSubmit(attackSpec("attack-quota-jobs"), http.StatusTooManyRequests, "running or pending jobs", "")(ctx, t)
	how = "with one job pending: " + how
	if msg, ok := t.waitFailed(ctx, first); !ok {
		return how + "; " + msg, false
	}
	return how, refused
}

// waitFailed waits up to a minute for job name (one the agents refuse
// to run) to end failed.
func (t *target) waitFailed(ctx context.Context, name string) (string, bool) {
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		j, found, _, ans := t.c.Client().Job(ctx, t.leader, name, 5*time.Second)
		if ans.OK() && found && j.State == "failed" {
			return "", true
		}
		if time.Now().After(deadline) {
			return fmt.Sprintf("job %s is %s, not failed, 60 s later", name, j.State), false
		}
	}
}

// stateBudgetFull sets the cluster's state budget to what the state
// holds; a submission then gets 507, and the budget is restored.
func stateBudgetFull(ctx context.Context, t *target) (string, bool) {
	a, err := t.request(ctx, t.c.AdminToken(), http.MethodGet, api.PathACLQuotas, nil)
	var qs api.Quotas
	if err != nil || a.code != http.StatusOK || json.Unmarshal([]byte(a.body), &qs) != nil {
		return fmt.Sprintf("listing the quotas: %v %d %s", err, a.code, a.body), false
	}
	if err := t.setQuota(ctx, api.SetQuota{StateBudget: qs.StateBytes}); err != nil {
		return err.Error(), false
	}
	how, refused := tenantSubmit(attackSpec("attack-budget"), http.StatusInsufficientStorage, "budget of "+strconv.FormatInt(qs.StateBytes, 10), "")(ctx, t)
	if err := t.setQuota(ctx, api.SetQuota{}); err != nil {
		return how + "; " + err.Error(), false
	}
	return fmt.Sprintf("budget set to the state's %d bytes: %s", qs.StateBytes, how), refused
}

// reusedName submits, with the attackers' token, a job of a name
// another submitter used before: its earlier job, pruned from the
// state since (the state forgets it), left its directory ROOT/<name>
// with a checkpoint and the agents' claim for its submitter beside it.
// That leftover is made here as the agents left the victim's: a copy of
// the claim they keep for the victim's running job. Refused if the job
// ends failed by the agent's denial naming the other submitter, no
// worker of it runs, and the checkpoint left is untouched.
func reusedName(ctx context.Context, t *target) (string, bool) {
	const name = "attack-reused"
	held, err := os.ReadFile(filepath.Join(t.root, ".attack-victim.submitter"))
	if err != nil {
		return "the agents keep no claim beside the victim's checkpoint directory: " + err.Error(), false
	}
	dir := filepath.Join(t.root, name)
	ckpt := filepath.Join(dir, "checkpoint")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err.Error(), false
	}
	if err := os.WriteFile(ckpt, []byte("the earlier job's checkpoint\n"), 0o600); err != nil {
		return err.Error(), false
	}
	if err := os.WriteFile(filepath.Join(t.root, "."+name+".submitter"), held, 0o600); err != nil {
		return err.Error(), false
	}
	var before syscall.Stat_t
	if err := syscall.Stat(ckpt, &before); err != nil {
		return err.Error(), false
	}
	t.expect[name] = "refuses to run it"
	a, err := t.request(ctx, t.tokens.submitter, http.MethodPost, api.PathJobs, t.appSpec(name, ""))
	// Run again (the victim moved during the first run), the case finds
	// its job of the first run and judges that one, as deniedJob does.
	again := err == nil && takenByFirstRun(a.code, a.body)
	if err != nil || a.code != http.StatusCreated && !again {
		return fmt.Sprintf("the submission: %v %d %s", err, a.code, a.body), false
	}
	victim := strings.TrimSpace(string(held))
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if ws := t.findWorkers(name); len(ws) > 0 {
			return fmt.Sprintf("worker process %d of the job runs in the earlier job's directory", ws[0].pid), false
		}
		j, found, _, ans := t.c.Client().Job(ctx, t.leader, name, 5*time.Second)
		if ans.OK() && found && j.State == "failed" {
			if !strings.Contains(j.Reason, "token "+victim) {
				return fmt.Sprintf("failed, but for another reason: %q", j.Reason), false
			}
			var after syscall.Stat_t
			if err := syscall.Stat(ckpt, &after); err != nil || after.Uid != before.Uid || after.Mode != before.Mode {
				return fmt.Sprintf("failed (%q), but the earlier job's checkpoint changed: uid %d mode %o -> uid %d mode %o (%v)",
					j.Reason, before.Uid, before.Mode, after.Uid, after.Mode, err), false
			}
			for _, ag := range t.c.Agents {
				if line, ok := t.logLine(ag, "refusing to run a job", "job="+name); ok {
					return fmt.Sprintf("submitted (201); the job failed at once: %q; the checkpoint left is untouched; %s/%s logged: %s",
						j.Reason, ag.Role, ag.ID, logMsg(line)), true
				}
			}
			return fmt.Sprintf("failed (%q), but no agent logged the denial", j.Reason), false
		}
		if time.Now().After(deadline) {
			return fmt.Sprintf("not failed within 60 s: %s %s", j.State, j.Reason), false
		}
	}
}

// tokenTheft is what another job's worker on the victim's machine tries
// for the victim's report token: its environment (where it used to be)
// and the token file the agent wrote. Refused if no victim worker has
// its token in its environment, each token file is mode 0400 and owned
// by its worker's uid, and a process of another uid of the agents' range
// (when this runs as root and can switch uids) cannot read it.
func tokenTheft(_ context.Context, t *target) (string, bool) {
	if len(t.victim) == 0 {
		return "no victim workers", false
	}
	var notes []string
	for _, w := range t.victim {
		env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", w.pid))
		if err != nil {
			return fmt.Sprintf("victim worker %d: %v", w.pid, err), false
		}
		var file string
		for _, kv := range bytes.Split(env, []byte{0}) {
			k, v, _ := strings.Cut(string(kv), "=")
			switch k {
			case "POLLUX_REPORT_TOKEN":
				return fmt.Sprintf("victim worker %d (rank %d) has its report token in its environment", w.pid, w.rank), false
			case "POLLUX_REPORT_TOKEN_FILE":
				file = v
			}
		}
		if file == "" {
			return fmt.Sprintf("victim worker %d has no report token file", w.pid), false
		}
		var st, proc syscall.Stat_t
		if err := syscall.Stat(file, &st); err != nil {
			return fmt.Sprintf("token file %s: %v", file, err), false
		}
		if err := syscall.Stat(fmt.Sprintf("/proc/%d", w.pid), &proc); err != nil {
			return fmt.Sprintf("victim worker %d: %v", w.pid, err), false
		}
		if st.Mode&0o777 != 0o400 || st.Uid != proc.Uid {
			return fmt.Sprintf("token file %s has mode %o and owner %d, the worker runs as %d", file, st.Mode&0o777, st.Uid, proc.Uid), false
		}
		if os.Geteuid() != 0 {
			notes = append(notes, fmt.Sprintf("rank %d: no token in the environment, %s mode 0400 of uid %d (not root: the read as another uid was not tried)", w.rank, file, st.Uid))
			continue
		}
		thief := uint32(900999) // the last uid of the agents' default range
		if thief == st.Uid {
			thief--
		}
		cmd := exec.Command("/bin/cat", file)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: thief, Gid: thief}}
		out, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || !strings.Contains(string(out), "Permission denied") {
			return fmt.Sprintf("uid %d read the token file %s of uid %d: %v %q", thief, file, st.Uid, err, out), false
		}
		notes = append(notes, fmt.Sprintf("rank %d: no token in the environment; uid %d reading %s (0400, uid %d): %s", w.rank, thief, file, st.Uid, strings.TrimSpace(string(out))))
	}
	return strings.Join(notes, "; "), true
}
