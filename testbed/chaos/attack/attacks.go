package attack

import (
	"context"
	"net/http"
	"path/filepath"
)

// attack is one attempt on the cluster; run says what happened and
// whether it was refused as it should be (the observer then checks that
// nothing changed).
type attack struct {
	name string
	run  func(context.Context, *target) (how string, refused bool)
}

// attacks are run in this order, each on the cluster as the previous one
// left it.
var attacks = []attack{
	// Every port, without the right credentials.
	{"raft-plaintext", refusedConn(leader, raftAddr, nil, true, raftRPC)},
	{"raft-no-certificate", refusedConn(leader, raftAddr, noCert, false, raftRPC)},
	{"raft-self-signed-certificate", refusedConn(leader, raftAddr, selfSigned, false, raftRPC)},
	{"raft-expired-certificate", refusedConn(leader, raftAddr, expired, false, raftRPC)},
	{"raft-certificate-of-another-ca", refusedConn(leader, raftAddr, otherCA, false, raftRPC)},
	{"raft-agent-certificate", refusedConn(leader, raftAddr, agentCert, false, raftRPC)},
	{"forward-client-certificate", refusedConn(leader, raftAddr, clientCert, false, forward)},
	{"forward-agent-certificate", refusedConn(leader, raftAddr, agentCert, false, forward)},
	{"server-actor-plaintext", refusedConn(leader, serverActor, nil, true, h2Preface)},
	{"server-actor-client-certificate", refusedConn(leader, serverActor, clientCert, false, h2Preface)},
	{"server-actor-certificate-of-another-ca", refusedConn(leader, serverActor, otherCA, false, h2Preface)},
	{"api-plaintext", refusedConn(leader, apiAddr, nil, true, httpGet)},
	{"api-expired-client-certificate", refusedConn(leader, apiAddr, expired, false, httpGet)},
	{"api-self-signed-client-certificate", refusedConn(leader, apiAddr, selfSigned, false, httpGet)},
	{"agent-actor-plaintext", refusedConn(agent, agentActor, nil, true, h2Preface)},
	{"forged-assign-agent-certificate", refusedConn(agent, agentActor, otherAgentCert, false, h2Preface)},
	{"forged-assign-client-certificate", refusedConn(agent, agentActor, clientCert, false, h2Preface)},
	{"forged-assign-self-signed-server", refusedConn(agent, agentActor, selfSigned, false, h2Preface)},
	{"reports-plaintext", refusedConn(agent, reportAddr, nil, true, report)},
	// The API without the right token.
	{"api-submit-without-a-token", tokenAttack(noSecret, http.MethodPost, jobsPath, attackSpec("attack-anonymous"), http.StatusUnauthorized, "no token")},
	{"api-submit-with-a-made-up-token", tokenAttack(madeUpSecret, http.MethodPost, jobsPath, attackSpec("attack-made-up"), http.StatusUnauthorized, "unknown token")},
	{"read-token-submitting", tokenAttack(readerSecret, http.MethodPost, jobsPath, attackSpec("attack-reader"), http.StatusForbidden, "has role read")},
	{"revoked-token-submitting", tokenAttack(revokedSecret, http.MethodPost, jobsPath, attackSpec("attack-revoked"), http.StatusUnauthorized, "revoked")},
	{"submit-token-cancelling-anothers-job", tokenAttack(submitSecret, http.MethodPost, cancelVictimPath, nil, http.StatusForbidden, "only its submitter or an admin")},
	{"submit-token-making-an-admin-token", tokenAttack(submitSecret, http.MethodPost, tokensPath, newAdminToken, http.StatusForbidden, "needs admin")},
	{"submit-token-removing-the-leader", tokenAttack(submitSecret, http.MethodDelete, removeLeaderPath, nil, http.StatusForbidden, "needs admin")},
	// Gossip without the key.
	{"gossip-member-with-the-wrong-key", gossipJoin("intruder", 64, false)},
	{"gossip-impersonating-an-agent", gossipJoin("a0", 1000, false)},
	{"forged-agent-registration-without-key", gossipJoin("a9", 512, true)},
	// What a job may run and where it may write.
	{"job-command-not-allowed", deniedJob("attack-shell", func(t *target) []byte {
		return t.commandSpec("attack-shell", []string{"/bin/sh", "-c", "touch " + filepath.Join(t.marker, "shell")})
	}, "allow-list")},
	{"job-command-path-traversal", deniedJob("attack-traversal", func(t *target) []byte {
		return t.commandSpec("attack-traversal", []string{"/usr/bin/python3", "/opt/pollux/worker/../../../" + t.marker + "/x.py"})
	}, "allow-list")},
	{"checkpoint-dir-outside-the-root", rejectedSubmit("attack-ckpt-out", func(t *target) []byte {
		return t.appSpec("attack-ckpt-out", "checkpoint_dir: "+t.marker+"\n")
	}, "outside the cluster's checkpoint root")},
	{"checkpoint-dir-dot-dot", rejectedSubmit("attack-ckpt-dots", func(t *target) []byte {
		return t.appSpec("attack-ckpt-dots", "checkpoint_dir: "+t.root+"/../pwned\n")
	}, `has a ".."`)},
	// (A directory that is not the job's own is refused by the servers
	// now; checkpoint-symlink-swap has the agents refuse a link.)
	{"checkpoint-dir-symlink-out-of-the-root", tenantSubmit(func(t *target) []byte {
		link, err := t.escapeLink()
		if err != nil {
			panic(err)
		}
		return t.appSpec("attack-ckpt-link", "checkpoint_dir: "+link+"/job\n")
	}, http.StatusForbidden, "is not its own", "")},
	// Reports to the agents, as a local process or a compromised worker.
	{"report-without-its-token", forgedReport(victimReport(0, false, noToken, 0), "no report token")},
	{"done-without-its-token", forgedReport(victimReport(0, true, noToken, 0), "no report token")},
	{"done-from-rank-1", forgedReport(victimReport(1, true, rank1Token, 1), "only rank 0 reports done")},
	{"rank-1-posing-as-rank-0", forgedReport(victimReport(0, true, rank1Token, 0), "wrong report token")},
	{"done-with-a-made-up-token", forgedReport(victimReport(0, true, madeUpToken, 0), "wrong report token")},
	{"done-of-another-incarnation", forgedReport(nextIncReport, "does not run on this node")},
	{"done-of-an-unknown-job", forgedReport(unknownJobReport, "does not run on this node")},
	{"report-line-over-4-kib", forgedReport(victimReport(0, true, longToken, 0), "too long")},
	// Limits.
	{"api-100-mib-body", bigBody},
	{"api-slow-clients-holding-connections", slowAPI},
	{"reports-slow-clients-filling-the-port", slowReports},
}
