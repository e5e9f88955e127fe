package node

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// checkCheckpointDir checks, without touching the file system, that dir
// is a clean absolute path strictly below root (no "..", no "." and no
// doubled or trailing slash: the path is exactly what it says). The
// error wraps errDenied.
func checkCheckpointDir(root, dir string) error {
	switch {
	case root == "":
		return fmt.Errorf("%w: the cluster has no checkpoint root (pollux server --bootstrap --checkpoint-root DIR), so no checkpoint directory is allowed", errDenied)
	case !filepath.IsAbs(root) || filepath.Clean(root) != root:
		return fmt.Errorf("%w: checkpoint root %q is not a clean absolute path", errDenied, root)
	case !filepath.IsAbs(dir):
		return fmt.Errorf("%w: checkpoint directory %q is not an absolute path", errDenied, dir)
	case slices.Contains(strings.Split(dir, "/"), ".."):
		return fmt.Errorf("%w: checkpoint directory %q has a \"..\"", errDenied, dir)
	case filepath.Clean(dir) != dir:
		return fmt.Errorf("%w: checkpoint directory %q is not a clean path (want %q)", errDenied, dir, filepath.Clean(dir))
	case !within(root, dir) || dir == root:
		return fmt.Errorf("%w: checkpoint directory %q is outside the cluster's checkpoint root %s", errDenied, dir, root)
	}
	return nil
}

// within reports whether the clean path p is root or below it.
func within(root, p string) bool {
	return p == root || strings.HasPrefix(p, strings.TrimSuffix(root, "/")+"/")
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
		if !within(realRoot, real) {
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
