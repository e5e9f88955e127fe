package state

import (
	"path/filepath"
	"strings"
)

// The tenancy rules of an Owned submission: a job owns its checkpoint
// directory. The cluster gives it ROOT/<job id>. It may name another
// only to take over the checkpoints of a job it resumes (JobSpec.
// ResumeFrom): a job of the same submitter (compared by token accessor,
// the token that submitted both), whose directory no live job holds, so
// in practice a finished one. No submission gets a directory a live job
// holds: the same one, or one inside the other (ErrCheckpointHeld).

// admitOwned checks an Owned submission against the tenancy rules and
// its submitter's quota and the state budget (checkQuota), in one pass
// over the jobs, and returns the checkpoint directory its spec records:
// "" for ROOT/<id>, or the resumed job's directory.
func admitOwned(s *State, c *SubmitJob, name string) (string, error) {
	root := s.Config.CheckpointRoot
	if root == "" {
		return "", invalid("job %q: the cluster has no checkpoint root (pollux server --bootstrap --checkpoint-root DIR), and jobs checkpoint only below it", c.ID)
	}
	own, dir, record := filepath.Join(root, c.ID), "", ""
	if r := c.Spec.ResumeFrom; r != "" {
		from, ok := s.Jobs[r]
		if !ok {
			return "", invalid("job %q resumes from %q, which the cluster does not hold (never submitted, or pruned after its retention period)", c.ID, r)
		}
		if from.Submitter != c.Submitter {
			return "", fmtErr(ErrPermission, "job %q resumes from %q, which was submitted by %s: a job resumes only from jobs of the token that submits it",
				c.ID, r, submitterOf(from))
		}
		dir = s.CheckpointDir(from)
		record = dir
	} else {
		dir = own
	}
	sv := survey(s, c.Submitter, dir)
	if sv.holder != nil {
		return "", fmtErr(ErrCheckpointHeld, "job %q: checkpoint directory %s is held by job %q (%v)", c.ID, dir, sv.holder.ID, sv.holder.State)
	}
	if d := c.Spec.CheckpointDir; d != "" && d != dir {
		if held := survey(s, "", d).holder; held != nil {
			return "", fmtErr(ErrCheckpointHeld, "job %q: checkpoint directory %s is held by job %q (%v)", c.ID, d, held.ID, held.State)
		}
		if c.Spec.ResumeFrom != "" {
			return "", invalid("job %q resumes from %q, whose checkpoint directory is %s, not %s", c.ID, c.Spec.ResumeFrom, dir, d)
		}
		return "", fmtErr(ErrPermission, "job %q: checkpoint directory %s is not its own: a job checkpoints in %s, or resumes from a finished job of its submitter (resume_from)",
			c.ID, d, own)
	}
	spec := c.Spec
	spec.CheckpointDir = record
	if err := checkQuota(s, c.Submitter, name, SpecSize(&spec), sv); err != nil {
		return "", err
	}
	return record, nil
}

// surveyed is what one pass over the jobs finds for a submission: the
// live job of least id holding its checkpoint directory, what its
// submitter holds and the bytes of every job's spec.
type surveyed struct {
	holder *Job
	usage  Usage
	total  int64
}

// survey passes over the jobs once for a submission of accessor with
// checkpoint directory dir. It allocates nothing per job: it runs on
// every submission, over every job.
func survey(s *State, accessor, dir string) surveyed {
	var sv surveyed
	root := s.Config.CheckpointRoot
	for id, j := range s.Jobs {
		sv.total += j.specBytes
		live := !j.State.Terminal()
		if j.Submitter == accessor {
			sv.usage.SpecBytes += j.specBytes
			if live {
				sv.usage.Jobs++
			}
		}
		if !live || (sv.holder != nil && id >= sv.holder.ID) {
			continue
		}
		var hit bool
		switch d := j.Spec.CheckpointDir; {
		case d != "":
			hit = within(d, dir) || within(dir, d)
		case root != "":
			hit = overlapsChild(root, id, dir)
		}
		if hit {
			sv.holder = j
		}
	}
	return sv
}

// within reports whether the clean path p is root or below it.
func within(root, p string) bool {
	r := strings.TrimSuffix(root, "/")
	return p == root || (len(p) > len(r) && p[len(r)] == '/' && strings.HasPrefix(p, r))
}

// overlapsChild reports whether the directory root/name (name without a
// slash: a job id) and the clean path dir are one inside the other,
// without building root/name.
func overlapsChild(root, name, dir string) bool {
	if !within(root, dir) {
		return false
	}
	// Below the root: compare dir's first component with name.
	rest := strings.TrimPrefix(strings.TrimPrefix(dir, strings.TrimSuffix(root, "/")), "/")
	if rest == "" {
		return true // dir is the root, which holds root/name
	}
	first, _, _ := strings.Cut(rest, "/")
	return first == name
}
