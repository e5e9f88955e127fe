package node

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// UIDRange is a range of user ids, First to Last inclusive, that a node
// gives its runs: each run's workers get a uid of their own (and the
// group of the same number, no others) while the run is on the node.
type UIDRange struct {
	First, Last uint32
}

// DefaultUIDRange is the range of an agent that runs as root without
// --run-as or --run-as-range: ids no distribution gives its users.
var DefaultUIDRange = UIDRange{First: 900000, Last: 900999}

// ParseUIDRange reads FIRST-LAST (decimal uids, 0 < FIRST <= LAST <
// 2^32-1).
func ParseUIDRange(s string) (UIDRange, error) {
	a, b, ok := strings.Cut(s, "-")
	first, err1 := strconv.ParseUint(strings.TrimSpace(a), 10, 32)
	last, err2 := strconv.ParseUint(strings.TrimSpace(b), 10, 32)
	switch {
	case !ok || err1 != nil || err2 != nil:
		return UIDRange{}, fmt.Errorf("node: uid range %q: want FIRST-LAST, two decimal uids", s)
	case first == 0 || first > last || last == 1<<32-1:
		return UIDRange{}, fmt.Errorf("node: uid range %q: want 0 < FIRST <= LAST < 4294967295 (never root's)", s)
	}
	return UIDRange{First: uint32(first), Last: uint32(last)}, nil
}

func (r UIDRange) String() string { return fmt.Sprintf("%d-%d", r.First, r.Last) }

// errNoUID is returned when every uid of the range is taken: the run
// is refused (not denied), and the leader places it again.
var errNoUID = errors.New("node: every uid of --run-as-range is taken by a run")

// uidPool hands out the uids of a range, one per run.
type uidPool struct {
	r    UIDRange
	used map[uint32]runKey
	next uint32 // where the search for a free uid starts
}

func newUIDPool(r UIDRange) *uidPool {
	return &uidPool{r: r, used: map[uint32]runKey{}, next: r.First}
}

// take gives key a free uid, the least one at or after the last handed
// out (wrapping), so a uid given back is not reused at once.
func (p *uidPool) take(key runKey) (*RunAs, error) {
	n := uint64(p.r.Last-p.r.First) + 1
	for i := uint64(0); i < n; i++ {
		uid := p.r.First + uint32((uint64(p.next-p.r.First)+i)%n)
		if _, busy := p.used[uid]; !busy {
			p.used[uid] = key
			p.next = uid + 1
			if p.next > p.r.Last || p.next < p.r.First {
				p.next = p.r.First
			}
			return &RunAs{User: "uid " + strconv.FormatUint(uint64(uid), 10), UID: uid, GID: uid}, nil
		}
	}
	return nil, errNoUID
}

// give returns u's uid to the pool.
func (p *uidPool) give(u *RunAs) {
	if u != nil {
		delete(p.used, u.UID)
	}
}

// userFor is the user r's workers run as: a uid of the node's range of
// their own, or the node's one --run-as user (nil: the agent's).
func (a *nodeActor) userFor(key runKey) (*RunAs, error) {
	if a.uids != nil {
		return a.uids.take(key)
	}
	return a.cfg.RunAs, nil
}

// release gives back what run r holds on the node: its uid, its token
// files.
func (a *nodeActor) release(r *run) {
	if a.uids != nil {
		a.uids.give(r.user)
	}
	for _, f := range r.tokenFiles {
		if err := os.Remove(f); err != nil && !errors.Is(err, os.ErrNotExist) {
			a.cfg.Logger.Warn("node: cannot remove a report token file", "file", f, "err", err)
		}
	}
	r.tokenFiles = nil
}

// writeTokenFile writes the report token of one worker of r (rank) to a
// file of Config.TokenDir that only the worker's user reads (mode 0400,
// created by the agent's user and then given to it), and returns its
// name.
func (a *nodeActor) writeTokenFile(r *run, rank int, token string) (string, error) {
	name := filepath.Join(a.cfg.TokenDir, fmt.Sprintf("%s.%d.%d", r.key.job, r.key.incarnation, rank))
	if err := os.Remove(name); err != nil && !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("node: report token file: %w", err)
	}
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o400)
	if err != nil {
		return "", fmt.Errorf("node: report token file: %w", err)
	}
	_, err = f.WriteString(token + "\n")
	if err == nil && r.user != nil {
		err = f.Chown(int(r.user.UID), int(r.user.GID))
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(name)
		return "", fmt.Errorf("node: report token file: %w", err)
	}
	r.tokenFiles = append(r.tokenFiles, name)
	return name, nil
}
