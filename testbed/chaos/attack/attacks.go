package attack

import (
	"context"
	"net/http"
	"path/filepath"
	"slices"
	"time"
)

// attack is one attempt on the cluster; run says what happened and
// whether it was refused as it should be (the observer then checks that
// nothing changed).
type attack struct {
	name string
	run  func(context.Context, *target) (how string, refused bool)
	// bound, for a case about availability, is how soon after it the
	// cluster must serve again if its leader changed during it; a leader
	// change during any other case fails the case.
	bound time.Duration
	// fed, instead of run, is a case of a peer lab's on two federated
	// labs of their own (federation.go).
	fed func(context.Context, *fedTarget) (how string, refused bool)
}

// attacks are run in this order, each on the cluster as the previous one
// left it: the groups below, each a slice of its own file's cases.
var attacks = slices.Concat(baseAttacks, floodAttacks, fileAttacks, loginAttacks, tenantAttacks, fedAttacks)

// Names are the names of every case, in the order they run.
func Names() []string {
	out := make([]string, len(attacks))
	for i, a := range attacks {
		out[i] = a.name
	}
	return out
}

// baseAttacks are the transport, token, gossip, job and report cases.
var baseAttacks = []attack{
	// Every port, without the right credentials.
	{name: "raft-plaintext", run: refusedConn(leader, raftAddr, nil, true, raftRPC)},
	{name: "raft-no-certificate", run: refusedConn(leader, raftAddr, noCert, false, raftRPC)},
	{name: "raft-self-signed-certificate", run: refusedConn(leader, raftAddr, selfSigned, false, raftRPC)},
	{name: "raft-expired-certificate", run: refusedConn(leader, raftAddr, expired, false, raftRPC)},
	{name: "raft-certificate-of-another-ca", run: refusedConn(leader, raftAddr, otherCA, false, raftRPC)},
	{name: "raft-agent-certificate", run: refusedConn(leader, raftAddr, agentCert, false, raftRPC)},
	{name: "forward-client-certificate", run: refusedConn(leader, raftAddr, clientCert, false, forward)},
	{name: "forward-agent-certificate", run: refusedConn(leader, raftAddr, agentCert, false, forward)},
	{name: "server-actor-plaintext", run: refusedConn(leader, serverActor, nil, true, h2Preface)},
	{name: "server-actor-client-certificate", run: refusedConn(leader, serverActor, clientCert, false, h2Preface)},
	{name: "server-actor-certificate-of-another-ca", run: refusedConn(leader, serverActor, otherCA, false, h2Preface)},
	{name: "api-plaintext", run: refusedConn(leader, apiAddr, nil, true, httpGet)},
	{name: "api-expired-client-certificate", run: refusedConn(leader, apiAddr, expired, false, httpGet)},
	{name: "api-self-signed-client-certificate", run: refusedConn(leader, apiAddr, selfSigned, false, httpGet)},
	{name: "agent-actor-plaintext", run: refusedConn(agent, agentActor, nil, true, h2Preface)},
	{name: "forged-assign-agent-certificate", run: forgedAssign("agent")},
	{name: "forged-assign-client-certificate", run: forgedAssign("client")},
	{name: "forged-assign-self-signed-server", run: forgedAssign("self-signed")},
	{name: "reports-plaintext", run: refusedConn(agent, reportAddr, nil, true, report)},
	// The API without the right token.
	{name: "api-submit-without-a-token", run: tokenAttack(noSecret, http.MethodPost, jobsPath, attackSpec("attack-anonymous"), http.StatusUnauthorized, "no token")},
	{name: "api-submit-with-a-made-up-token", run: tokenAttack(madeUpSecret, http.MethodPost, jobsPath, attackSpec("attack-made-up"), http.StatusUnauthorized, "unknown token")},
	{name: "read-token-submitting", run: tokenAttack(readerSecret, http.MethodPost, jobsPath, attackSpec("attack-reader"), http.StatusForbidden, "has role read")},
	{name: "revoked-token-submitting", run: tokenAttack(revokedSecret, http.MethodPost, jobsPath, attackSpec("attack-revoked"), http.StatusUnauthorized, "revoked")},
	{name: "submit-token-cancelling-anothers-job", run: tokenAttack(submitSecret, http.MethodPost, cancelVictimPath, nil, http.StatusForbidden, "only its submitter or an admin")},
	{name: "submit-token-making-an-admin-token", run: tokenAttack(submitSecret, http.MethodPost, tokensPath, newAdminToken, http.StatusForbidden, "needs admin")},
	{name: "submit-token-removing-the-leader", run: tokenAttack(submitSecret, http.MethodDelete, removeLeaderPath, nil, http.StatusForbidden, "needs admin")},
	{name: "submit-token-raising-the-quotas", run: tokenAttack(submitSecret, http.MethodPost, quotasPath, raisedQuotas, http.StatusForbidden, "needs admin")},
	{name: "submit-token-saving-a-snapshot", run: tokenAttack(submitSecret, http.MethodGet, snapshotPath, nil, http.StatusForbidden, "needs admin")},
	{name: "submit-token-restoring-a-snapshot", run: tokenAttack(submitSecret, http.MethodPut, snapshotPath, emptySnapshot, http.StatusForbidden, "needs admin")},
	// Gossip without the key.
	{name: "gossip-member-with-the-wrong-key", run: gossipJoin("intruder", 64, false)},
	{name: "gossip-impersonating-an-agent", run: gossipJoin("a0", 1000, false)},
	{name: "forged-agent-registration-without-key", run: gossipJoin("a9", 512, true)},
	// What a job may run and where it may write.
	{name: "job-command-not-allowed", run: deniedJob("attack-shell", func(t *target) []byte {
		return t.commandSpec("attack-shell", []string{"/bin/sh", "-c", "touch " + filepath.Join(t.marker, "shell")})
	}, "allow-list")},
	{name: "job-command-path-traversal", run: deniedJob("attack-traversal", func(t *target) []byte {
		return t.commandSpec("attack-traversal", []string{"/usr/bin/python3", "/opt/pollux/worker/../../../" + t.marker + "/x.py"})
	}, "allow-list")},
	{name: "checkpoint-dir-outside-the-root", run: rejectedSubmit("attack-ckpt-out", func(t *target) []byte {
		return t.appSpec("attack-ckpt-out", "checkpoint_dir: "+t.marker+"\n")
	}, "outside the cluster's checkpoint root")},
	{name: "checkpoint-dir-dot-dot", run: rejectedSubmit("attack-ckpt-dots", func(t *target) []byte {
		return t.appSpec("attack-ckpt-dots", "checkpoint_dir: "+t.root+"/../pwned\n")
	}, `has a ".."`)},
	// (A directory that is not the job's own is refused by the servers
	// now; checkpoint-symlink-swap has the agents refuse a link.)
	{name: "checkpoint-dir-symlink-out-of-the-root", run: tenantSubmit(func(t *target) []byte {
		link, err := t.escapeLink()
		if err != nil {
			panic(err)
		}
		return t.appSpec("attack-ckpt-link", "checkpoint_dir: "+link+"/job\n")
	}, http.StatusForbidden, "is not its own", "")},
	// Reports to the agents, as a local process or a compromised worker.
	{name: "report-without-its-token", run: forgedReport(victimReport(0, false, noToken, 0), "no report token")},
	{name: "done-without-its-token", run: forgedReport(victimReport(0, true, noToken, 0), "no report token")},
	{name: "done-from-rank-1", run: forgedReport(victimReport(1, true, rank1Token, 1), "only rank 0 reports done")},
	{name: "rank-1-posing-as-rank-0", run: forgedReport(victimReport(0, true, rank1Token, 0), "wrong report token")},
	{name: "done-with-a-made-up-token", run: forgedReport(victimReport(0, true, madeUpToken, 0), "wrong report token")},
	{name: "done-of-another-incarnation", run: forgedReport(nextIncReport, "does not run on this node")},
	{name: "done-of-an-unknown-job", run: forgedReport(unknownJobReport, "does not run on this node")},
	{name: "report-line-over-4-kib", run: forgedReport(victimReport(0, true, longToken, 0), "too long")},
	// Limits.
	{name: "api-100-mib-body", run: bigBody},
	{name: "api-slow-clients-holding-connections", run: slowAPI},
	{name: "reports-slow-clients-filling-the-port", run: slowReports},
}
