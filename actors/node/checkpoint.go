package node

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"pollux/actors/jobspec"
)

// checkCheckpointDir checks, without touching the file system, that dir
// is a clean absolute path strictly below root (jobspec.CheckCheckpointDir,
// which the API also applies at submission). The error wraps errDenied.
func checkCheckpointDir(root, dir string) error {
	if err := jobspec.CheckCheckpointDir(root, dir); err != nil {
		return fmt.Errorf("%w: %w", errDenied, err)
	}
	return nil
}

// prepareCheckpointDir makes dir (checked by checkCheckpointDir) exist
// as a directory whose every component resolves inside root: a symbolic
// link below the root may point within it but never outside (that is
// refused, an error wrapping errDenied, and nothing is created outside).
// Missing directories are created (0755; the last one 0750), and with
// owner the last one is given to that user (the workers' --run-as user),
// so that they can write their checkpoints. Other errors (a root that
// cannot be created, a full disk) wrap the file system's.
func prepareCheckpointDir(root, dir string, owner *RunAs) error {
	if err := os.MkdirAll(root, 0o755); err != nil {
		return fmt.Errorf("node: checkpoint root: %w", err)
	}
	realRoot, err := filepath.EvalSymlinks(root)
	if err != nil {
		return fmt.Errorf("node: checkpoint root: %w", err)
	}
	rel, err := filepath.Rel(root, dir)
	if err != nil {
		return fmt.Errorf("node: checkpoint directory: %w", err)
	}
	cur := root
	parts := strings.Split(rel, "/")
	for i, part := range parts {
		cur = filepath.Join(cur, part)
		last := i == len(parts)-1
		mode := fs.FileMode(0o755)
		if last {
			mode = 0o750
		}
		if err := os.Mkdir(cur, mode); err != nil && !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("node: checkpoint directory: %w", err)
		}
		real, err := filepath.EvalSymlinks(cur)
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("%w: checkpoint directory %s: %s is a dangling link", errDenied, dir, cur)
		}
		if err != nil {
			return fmt.Errorf("node: checkpoint directory: %w", err)
		}
		if !jobspec.Within(realRoot, real) {
			return fmt.Errorf("%w: checkpoint directory %s: %s is a link to %s, outside the checkpoint root", errDenied, dir, cur, real)
		}
		st, err := os.Stat(real)
		if err != nil {
			return fmt.Errorf("node: checkpoint directory: %w", err)
		}
		if !st.IsDir() {
			return fmt.Errorf("%w: checkpoint directory %s: %s is not a directory", errDenied, dir, cur)
		}
		if last && owner != nil {
			if err := os.Lchown(real, int(owner.UID), int(owner.GID)); err != nil {
				return fmt.Errorf("node: checkpoint directory %s for user %s: %w", dir, owner.User, err)
			}
		}
	}
	return nil
}
