package agent

import (
	"errors"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"

	"pollux/actors/node"
)

// passEnv is the part of the agent's environment named by --pass-env.
func passEnv(names []string) ([]string, error) {
	var env []string
	for _, name := range names {
		if name == "" || strings.ContainsAny(name, "=\x00") {
			return nil, fmt.Errorf("agent: --pass-env %q is not a variable name", name)
		}
		if v, ok := os.LookupEnv(name); ok {
			env = append(env, name+"="+v)
		}
	}
	return env, nil
}

// runAsRange resolves --run-as-range for an agent of effective uid euid
// with --run-as runAs: the range given, or node.DefaultUIDRange for
// root without --run-as; nil for the agent's own user or --run-as.
func runAsRange(s, runAs string, euid int) (*node.UIDRange, error) {
	switch {
	case s == "" && (runAs != "" || euid != 0):
		return nil, nil
	case s == "":
		r := node.DefaultUIDRange
		return &r, nil
	case runAs != "":
		return nil, fmt.Errorf("agent: --run-as %q and --run-as-range %q: want one (one user for every job, or one per job)", runAs, s)
	case euid != 0:
		return nil, fmt.Errorf("agent: --run-as-range %q needs the agent to run as root", s)
	}
	r, err := node.ParseUIDRange(s)
	if err != nil {
		return nil, fmt.Errorf("agent: --run-as-range: %w", err)
	}
	return &r, nil
}

// tokenDir makes the directory of the workers' report token files: the
// workers' users reach their own file in it (0711) but list nothing.
func tokenDir() (string, error) {
	dir, err := os.MkdirTemp("", "pollux-agent-tokens-")
	if err == nil {
		err = os.Chmod(dir, 0o711)
	}
	if err != nil {
		return "", fmt.Errorf("agent: report token directory: %w", err)
	}
	return dir, nil
}

// lookupRunAs resolves --run-as (a user name or uid) with its groups; ""
// is nil (the agent's own user).
func lookupRunAs(name string) (*node.RunAs, error) {
	if name == "" {
		return nil, nil
	}
	u, err := user.Lookup(name)
	if err != nil {
		var uerr error
		if u, uerr = user.LookupId(name); uerr != nil {
			return nil, fmt.Errorf("agent: --run-as %q: %w", name, err)
		}
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err := errors.Join(err1, err2); err != nil {
		return nil, fmt.Errorf("agent: --run-as %q: %w", name, err)
	}
	if os.Geteuid() != 0 && uint64(os.Geteuid()) != uid {
		return nil, fmt.Errorf("agent: --run-as %q needs the agent to run as root", name)
	}
	r := &node.RunAs{User: u.Username, UID: uint32(uid), GID: uint32(gid)}
	gids, err := u.GroupIds()
	if err != nil {
		return nil, fmt.Errorf("agent: --run-as %q: groups: %w", name, err)
	}
	for _, g := range gids {
		v, err := strconv.ParseUint(g, 10, 32)
		if err != nil {
			return nil, fmt.Errorf("agent: --run-as %q: group %q: %w", name, g, err)
		}
		r.Groups = append(r.Groups, uint32(v))
	}
	return r, nil
}

// workerCA copies the CA certificate (public) into a new directory every
// user can read, for workers running as --run-as; the caller removes it.
func workerCA(ca string) (string, error) {
	b, err := os.ReadFile(ca)
	if err != nil {
		return "", fmt.Errorf("agent: %w", err)
	}
	dir, err := os.MkdirTemp("", "pollux-agent-ca-")
	if err != nil {
		return "", fmt.Errorf("agent: %w", err)
	}
	if err := errors.Join(os.Chmod(dir, 0o755), os.WriteFile(filepath.Join(dir, filepath.Base(ca)), b, 0o644)); err != nil {
		os.RemoveAll(dir)
		return "", fmt.Errorf("agent: a CA file for the workers: %w", err)
	}
	return dir, nil
}
