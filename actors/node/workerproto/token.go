package workerproto

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"strconv"
)

// MaxTokenBytes bounds a report token (ReportToken makes 43 bytes).
const MaxTokenBytes = 128

// ReportToken is the report token of one rank of one job incarnation:
// HMAC-SHA256 under the incarnation's secret (HMAC-SHA256 of the job and
// incarnation under the cluster's report key), base64url without padding.
// The leader sends a node its ranks' tokens and the node hands each worker
// its own (POLLUX_REPORT_TOKEN), refusing reports without it. One rank's
// token tells nothing of another's or another incarnation's, so a worker
// cannot pose as rank 0, whose done report completes the job.
func ReportToken(key []byte, job string, incarnation uint64, rank int) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte("pollux report secret\x00"))
	m.Write([]byte(job))
	m.Write([]byte{0})
	m.Write(strconv.AppendUint(nil, incarnation, 10))
	secret := m.Sum(nil)
	m = hmac.New(sha256.New, secret)
	m.Write([]byte("rank\x00"))
	m.Write(strconv.AppendInt(nil, int64(rank), 10))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// SameToken compares a report's token with the expected one in constant
// time; an empty expected token matches nothing.
func SameToken(want, got string) bool {
	return want != "" && hmac.Equal([]byte(want), []byte(got))
}
