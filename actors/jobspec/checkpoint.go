package jobspec

import (
	"path/filepath"
	"slices"
	"strings"
)

// CheckCheckpointDir checks, without touching any file system, that dir
// is a clean absolute path strictly below the cluster's checkpoint root
// (no "..", no "." and no doubled or trailing slash: the path is exactly
// what it says), the only checkpoint directories agents run jobs with.
// The error is a *FieldError of checkpoint_dir.
func CheckCheckpointDir(root, dir string) error {
	bad := func(format string, args ...any) error { return fieldErr("checkpoint_dir", dir, format, args...) }
	switch {
	case root == "":
		return bad("the cluster has no checkpoint root (pollux server --bootstrap --checkpoint-root DIR), and agents run jobs only under it")
	case !filepath.IsAbs(root) || filepath.Clean(root) != root:
		return bad("the checkpoint root %q is not a clean absolute path", root)
	case !filepath.IsAbs(dir):
		return bad("want an absolute path")
	case slices.Contains(strings.Split(dir, "/"), ".."):
		return bad(`has a ".."`)
	case filepath.Clean(dir) != dir:
		return bad("not a clean path (want %q)", filepath.Clean(dir))
	case dir == root || !Within(root, dir):
		return bad("outside the cluster's checkpoint root %s (leave checkpoint_dir out for %s/<job>)", root, strings.TrimSuffix(root, "/"))
	}
	return nil
}

// Within reports whether the clean path p is root or below it.
func Within(root, p string) bool {
	return p == root || strings.HasPrefix(p, strings.TrimSuffix(root, "/")+"/")
}
