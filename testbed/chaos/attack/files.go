package attack

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// fileAttacks are a local user's of a server or agent machine: reading
// the data directories (the Raft log and snapshots hold the report key),
// the keys, the token and the logs, and running with a key others read.
var fileAttacks = []attack{
	{name: "local-user-reading-data-and-keys", run: privateFiles},
	{name: "agent-with-a-readable-key", run: readableKey},
}

// privateFiles walks every server's and agent's data directory (the Raft
// database and any snapshot hashicorp/raft has written by then;
// consensus's TestDiskModes takes one), the logs, the private keys and
// the admin token: refused if no other user may enter a directory of
// them (0700) or read or write a file (0600).
func privateFiles(_ context.Context, t *target) (string, bool) {
	var open []string
	var checked, snaps int
	check := func(path string, want fs.FileMode) {
		st, err := os.Lstat(path)
		if err != nil {
			open = append(open, fmt.Sprintf("%s: %v", path, err))
			return
		}
		checked++
		if perm := st.Mode().Perm(); perm&0o077 != 0 {
			open = append(open, fmt.Sprintf("%s (mode %04o, want %04o)", path, perm, want))
		}
	}
	for _, m := range append(slices.Clone(t.c.Servers), t.c.Agents...) {
		check(m.Log, 0o600)
		_ = filepath.WalkDir(m.DataDir, func(path string, d fs.DirEntry, err error) error {
			switch {
			case err != nil:
				open = append(open, fmt.Sprintf("%s: %v", path, err))
			case d.IsDir():
				check(path, 0o700)
			case d.Type().IsRegular():
				if d.Name() == "state.bin" {
					snaps++
				}
				check(path, 0o600)
			}
			return nil
		})
	}
	b := t.c.TLS()
	for _, m := range append(slices.Clone(t.c.Servers), t.c.Agents...) {
		if _, key, err := b.Files(m.ID); err == nil {
			check(key, 0o600)
		}
	}
	check(b.GossipKey, 0o600)
	check(t.c.TokenFile(), 0o600)
	if len(open) > 0 {
		return fmt.Sprintf("%d of %d paths open to other users: %s", len(open), checked, strings.Join(open[:min(len(open), 8)], "; ")), false
	}
	return fmt.Sprintf("%d paths (data directories, %d Raft snapshots, logs, keys, gossip key, admin token): directories 0700, files 0600",
		checked, snaps), true
}

// readableKey starts an agent whose --key file others may read (a copy
// of an agent's key, mode 0644): refused if it exits with status 2
// before it joins anything, naming the file.
func readableKey(ctx context.Context, t *target) (string, bool) {
	b := t.c.TLS()
	cert, key, err := b.Files(t.agent.ID)
	if err != nil {
		return err.Error(), false
	}
	dir, err := os.MkdirTemp(t.dir, "readable-key-")
	if err != nil {
		return err.Error(), false
	}
	defer os.RemoveAll(dir)
	raw, err := os.ReadFile(key)
	if err != nil {
		return err.Error(), false
	}
	copyKey := filepath.Join(dir, "agent.key")
	if err := os.WriteFile(copyKey, raw, 0o600); err != nil {
		return err.Error(), false
	}
	if err := os.Chmod(copyKey, 0o644); err != nil {
		return err.Error(), false
	}
	o := t.c.Options()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	args := append(slices.Clone(o.Exec[1:]), "agent", "--name", "attack-readable-key", "--gpus", "1", "--bind", "127.0.0.1",
		"--data-dir", filepath.Join(dir, "data"), "--join", t.leader.Gossip, "--ca", b.CA, "--cert", cert, "--key", copyKey,
		"--gossip-key", b.GossipKey)
	cmd := exec.CommandContext(ctx, o.Exec[0], args...)
	cmd.Env = append(os.Environ(), o.Env...)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee) && ee.ExitCode() == 2 && strings.Contains(string(out), copyKey):
		line := ""
		for _, l := range strings.Split(string(out), "\n") {
			if strings.Contains(l, copyKey) {
				line = l
				break
			}
		}
		return fmt.Sprintf("the agent refused to start (exit 2): %.300s", line), true
	case err == nil:
		return "an agent with a world-readable key ran and exited 0", false
	default:
		return fmt.Sprintf("the agent ended with %v, not exit 2 naming %s: %.300s", err, copyKey, out), false
	}
}
