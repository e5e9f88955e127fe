package node

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"

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
// as a directory of mode 0700 inside root and gives it, with everything
// in it, to owner (nil: left to the agent's user). Every step goes
// through an os.Root opened at root, so no symbolic link leads out of
// the root, even one swapped in while the directory is prepared; links
// in dir's path may point within the root (relatively). Links inside
// dir are given to owner themselves, never followed. A path that leaves
// the root, a dangling link or a file in the way is refused (an error
// wrapping errDenied, naming the component); nothing is created
// outside. Missing parents are created 0755. Other errors (a root that
// cannot be created, a full disk) wrap the file system's.
//
// submitter (a token accessor, "" none) is kept beside the directory
// (claim): a directory claimed by another submitter, or one holding
// files but no claim, is refused before anything in it is touched;
// resume says the cluster gave the job this directory as the one of a
// job of the same submitter it resumes (not ROOT/<job id>).
func prepareCheckpointDir(root, dir string, owner *RunAs, submitter string, resume bool) error {
	if err := os.MkdirAll(root, 0o755); err != nil {
		return fmt.Errorf("node: checkpoint root: %w", err)
	}
	rel, err := filepath.Rel(root, dir)
	if err != nil {
		return fmt.Errorf("node: checkpoint directory: %w", err)
	}
	r, err := os.OpenRoot(root)
	if err != nil {
		return fmt.Errorf("node: checkpoint root: %w", err)
	}
	defer r.Close()
	if parent := filepath.Dir(rel); parent != "." {
		if err := r.MkdirAll(parent, 0o755); err != nil {
			return explain(root, dir, err)
		}
	}
	if err := claim(r, rel, dir, submitter, resume); err != nil {
		return err
	}
	if err := r.Mkdir(rel, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return explain(root, dir, err)
	}
	sub, err := r.OpenRoot(rel)
	if err != nil {
		return explain(root, dir, err)
	}
	defer sub.Close()
	return own(sub, dir, owner)
}

// maxClaim bounds a claim file.
const maxClaim = 512

// claim checks and keeps whose checkpoint directory rel (below r) is: a
// file .<name>.submitter beside it (in its parent, which the agent
// made, so a job's workers, owning only the directory, cannot change
// it) holds the submitter of the job that first used it. A job of
// another submitter is refused (errDenied): an earlier job of the same
// name, pruned from the cluster's state since, left its checkpoints
// there. A directory without a claim is claimed for submitter if it is
// missing or empty, or if the job resumes (the cluster checked that the
// job it resumes is of the same submitter); one that holds files but no
// claim (left by a job run before claims or without tokens, or put
// there by hand) is refused: nothing says whose they are. An empty
// submitter (a cluster without tokens) neither checks nor claims.
func claim(r *os.Root, rel, dir, submitter string, resume bool) error {
	if submitter == "" {
		return nil
	}
	path := filepath.Join(filepath.Dir(rel), "."+filepath.Base(rel)+".submitter")
	err := heldBy(r, path, dir, submitter)
	if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if !resume {
		if err := unclaimedEmpty(r, rel, dir, path, submitter); err != nil {
			return err
		}
	}
	// Written whole under a name of its own, then linked into place,
	// which fails if the claim exists: agents sharing the root that
	// prepare the directory at once (a job's nodes) never read half a
	// claim.
	tmp := fmt.Sprintf("%s.%d.%d", path, os.Getpid(), claims.Add(1))
	if err := r.WriteFile(tmp, []byte(submitter+"\n"), 0o600); err != nil {
		return explain(r.Name(), dir, err)
	}
	err = r.Link(tmp, path)
	_ = r.Remove(tmp)
	if err == nil {
		return nil
	}
	if !errors.Is(err, fs.ErrExist) {
		return explain(r.Name(), dir, err)
	}
	return heldBy(r, path, dir, submitter)
}

// heldBy checks the claim at path (below r) of directory dir against
// submitter: nil if it is submitter's, an error wrapping errDenied if
// another's, one wrapping fs.ErrNotExist if there is no claim.
func heldBy(r *os.Root, path, dir, submitter string) error {
	f, err := r.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if err != nil {
		return explain(r.Name(), dir, err)
	}
	defer f.Close()
	b := make([]byte, maxClaim)
	n, _ := io.ReadFull(f, b)
	if held := strings.TrimSpace(string(b[:n])); held != submitter {
		return fmt.Errorf("%w: checkpoint directory %s holds the checkpoints of a job of another submitter (token %s), an earlier job of this name: "+
			"it is not this job's (submitted by token %s)", errDenied, dir, held, submitter)
	}
	return nil
}

// unclaimedEmpty refuses (errDenied) the unclaimed directory rel (below
// r) if it holds anything; a missing one is empty.
func unclaimedEmpty(r *os.Root, rel, dir, path, submitter string) error {
	d, err := r.Open(rel)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return explain(r.Name(), dir, err)
	}
	defer d.Close()
	names, err := d.Readdirnames(1)
	if errors.Is(err, io.EOF) {
		return nil
	}
	if err != nil {
		return explain(r.Name(), dir, err)
	}
	return fmt.Errorf("%w: checkpoint directory %s holds files (%s ...) but no claim of a submitter: left by a job run before claims or without tokens, "+
		"nothing says whose they are, so it is not this job's (submitted by token %s); remove it, or write the accessor of the token it belongs to into %s",
		errDenied, dir, names[0], submitter, filepath.Join(r.Name(), path))
}

// claims numbers the temporary files of claim.
var claims atomic.Uint64

// own gives the directory of sub, mode 0700, and everything in it to
// owner (nil: only the mode).
func own(sub *os.Root, dir string, owner *RunAs) error {
	top, err := sub.Open(".")
	if err != nil {
		return fmt.Errorf("node: checkpoint directory %s: %w", dir, err)
	}
	defer top.Close()
	if owner != nil {
		uid, gid := int(owner.UID), int(owner.GID)
		err := fs.WalkDir(sub.FS(), ".", func(p string, _ fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if p == "." {
				return top.Chown(uid, gid)
			}
			return sub.Lchown(p, uid, gid)
		})
		if err != nil {
			return fmt.Errorf("node: checkpoint directory %s for user %s: %w", dir, owner.User, err)
		}
	}
	if err := top.Chmod(0o700); err != nil {
		return fmt.Errorf("node: checkpoint directory %s: %w", dir, err)
	}
	return nil
}

// explain turns err, from making dir below root through an os.Root, into
// a denial naming the component that is in the way (a link out of the
// root, a dangling link, a file), found by walking the path again
// without changing anything; an error it cannot place stays the file
// system's.
func explain(root, dir string, err error) error {
	realRoot, rerr := filepath.EvalSymlinks(root)
	if rerr != nil {
		return fmt.Errorf("node: checkpoint directory: %w", err)
	}
	rel, _ := filepath.Rel(root, dir)
	cur := root
	for _, part := range strings.Split(rel, "/") {
		cur = filepath.Join(cur, part)
		fi, lerr := os.Lstat(cur)
		if lerr != nil {
			break
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			target, _ := os.Readlink(cur)
			real, eerr := filepath.EvalSymlinks(cur)
			switch {
			case eerr != nil:
				return fmt.Errorf("%w: checkpoint directory %s: %s is a dangling link", errDenied, dir, cur)
			case !jobspec.Within(realRoot, real):
				return fmt.Errorf("%w: checkpoint directory %s: %s is a link to %s, outside the checkpoint root", errDenied, dir, cur, real)
			case filepath.IsAbs(target):
				return fmt.Errorf("%w: checkpoint directory %s: %s is an absolute link (to %s): links below the checkpoint root must be relative", errDenied, dir, cur, target)
			}
			fi, _ = os.Stat(cur)
		}
		if fi != nil && !fi.IsDir() {
			return fmt.Errorf("%w: checkpoint directory %s: %s is not a directory", errDenied, dir, cur)
		}
	}
	return fmt.Errorf("node: checkpoint directory: %w", err)
}
