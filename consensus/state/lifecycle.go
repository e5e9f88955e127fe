package state

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
)

// InitCluster sets the cluster's configuration the first time it is
// applied. Applied again with the same checkpoint root it changes nothing
// (the first ID and report key stay) but gives a cluster without a report
// key (one configured before report tokens existed) ReportKey; with
// another root it is refused (ErrClusterConfig), so a server started with
// a different --checkpoint-root learns that the root is not its own to
// choose. ReportKey is empty or ReportKeyLen long.
type InitCluster struct {
	ID             string
	CheckpointRoot string
	// Levels are the cluster's topology levels (nil: the rack alone, or,
	// applied to a configured cluster, whatever it has). Set with the
	// first InitCluster; a later one naming other levels is refused
	// (ErrClusterConfig).
	Levels []string
	// ReportKey is the cluster's report key (ClusterConfig.ReportKey);
	// it is set by the first InitCluster that has one.
	ReportKey string
	// Levels and ReportKey were added after the first encoding: they are
	// encoded last, as one block, and only when one of them is set, so
	// entries written before them still decode.
}

// NewInitCluster is the configuration of a new cluster: a random id (16
// hex digits) and report key, the checkpoint root and the topology
// levels (innermost first; none, or the rack alone, is the default).
func NewInitCluster(checkpointRoot string, levels ...string) InitCluster {
	id := make([]byte, 8)
	_, _ = rand.Read(id) // never fails (crypto/rand)
	return InitCluster{ID: hex.EncodeToString(id), CheckpointRoot: checkpointRoot, Levels: NormalizeLevels(levels), ReportKey: newReportKey()}
}

func newReportKey() string {
	k := make([]byte, ReportKeyLen/2)
	_, _ = rand.Read(k)
	return hex.EncodeToString(k)
}

// FinishJob ends a job exactly once, as Completed, Failed or Cancelled,
// and frees its GPUs (the allocation generation does not change). A
// non-zero Incarnation must be the job's current one: a done report of a
// replaced incarnation does not complete the job. Meas (optional), the
// measurement the done report closed, is merged first as a Round would
// merge it, so that a finished job keeps its last epoch and profile.
type FinishJob struct {
	ID          string
	Incarnation uint64
	State       JobState
	Reason      string
	Time        float64
	Meas        *Measurement
}

// Prune forgets finished jobs and dead or departed nodes that hold no
// GPUs (retention). Entries that do not qualify (a live job, an alive
// node, an unknown id) are skipped and named in the Result; the rest are
// removed.
type Prune struct {
	Jobs  []string
	Nodes []string
}

func (c *InitCluster) kind() byte { return typeInitCluster }
func (c *InitCluster) encode(w *writer) {
	w.str(c.ID)
	w.str(c.CheckpointRoot)
	if c.Levels != nil || c.ReportKey != "" {
		w.strs(c.Levels)
		w.str(c.ReportKey)
	}
}
func (c *InitCluster) decode(r *reader) {
	c.ID = r.str()
	c.CheckpointRoot = r.str()
	if r.more() {
		c.Levels = r.strs(maxLevels)
		if c.ReportKey = r.str(); c.Levels == nil && c.ReportKey == "" {
			r.fail("cluster configuration with topology levels and report key encoded empty (they are left out instead)")
		}
	}
}

func (c *InitCluster) validate() error {
	if err := checkID("cluster", c.ID); err != nil {
		return err
	}
	if c.ReportKey != "" {
		if _, err := hex.DecodeString(c.ReportKey); err != nil || len(c.ReportKey) != ReportKeyLen {
			return invalid("report key of %d characters (want %d hex digits)", len(c.ReportKey), ReportKeyLen)
		}
	}
	if err := checkText("checkpoint root", c.CheckpointRoot); err != nil {
		return err
	}
	return checkLevels(c.Levels)
}

func (c *FinishJob) kind() byte { return typeFinishJob }
func (c *FinishJob) encode(w *writer) {
	w.str(c.ID)
	w.uvarint(c.Incarnation)
	w.byte(byte(c.State))
	w.str(c.Reason)
	w.f64(c.Time)
	// An optional trailing block, added later: the last measurement.
	if c.Meas != nil {
		encodeMeasurement(w, c.Meas)
		w.str(c.Meas.GPUType)
		if !c.Meas.Checkpoint.IsZero() {
			encodeCheckpoint(w, &c.Meas.Checkpoint)
		}
	}
}
func (c *FinishJob) decode(r *reader) {
	c.ID = r.str()
	c.Incarnation = r.uvarint()
	c.State = JobState(r.byte())
	c.Reason = r.str()
	c.Time = r.f64()
	if r.more() {
		c.Meas = &Measurement{}
		decodeMeasurement(r, c.Meas)
		c.Meas.GPUType = r.str()
		if r.more() {
			if c.Meas.Checkpoint = decodeCheckpoint(r); r.err == nil && c.Meas.Checkpoint.IsZero() {
				r.fail("finish checkpoint encoded empty (it is left out instead)")
			}
		}
	}
}

func (c *FinishJob) validate() error {
	if err := checkID("job", c.ID); err != nil {
		return err
	}
	if !c.State.Terminal() {
		return invalid("finishing job %q as %v (want completed, failed or cancelled)", c.ID, c.State)
	}
	if err := checkText("reason", c.Reason); err != nil {
		return err
	}
	if c.Meas != nil {
		if err := c.Meas.validate(c.ID); err != nil {
			return err
		}
	}
	return checkNonNeg("finish time", c.Time)
}

func (c *Prune) kind() byte { return typePrune }
func (c *Prune) encode(w *writer) {
	w.strs(c.Jobs)
	w.strs(c.Nodes)
}
func (c *Prune) decode(r *reader) {
	c.Jobs = r.strs(maxList)
	c.Nodes = r.strs(maxList)
}

func (c *Prune) validate() error {
	if len(c.Jobs)+len(c.Nodes) == 0 {
		return invalid("prune of nothing")
	}
	for _, ids := range [][]string{c.Jobs, c.Nodes} {
		if len(ids) > maxList {
			return invalid("prune of %d ids", len(ids))
		}
		if !slices.IsSorted(ids) || len(slices.Compact(slices.Clone(ids))) != len(ids) {
			return invalid("prune ids not sorted and unique")
		}
		for _, id := range ids {
			if err := checkID("pruned", id); err != nil {
				return err
			}
		}
	}
	return nil
}

// applyInit applies InitCluster.
func applyInit(s *State, c *InitCluster) error {
	switch {
	case s.Config.ID == "":
		for _, id := range s.NodeIDs() {
			if err := checkNodeLevels(s.Nodes[id], c.Levels); err != nil {
				return fmtErr(ErrClusterConfig, "topology levels %s do not fit a registered node: %v", strings.Join(c.Levels, ","), err)
			}
		}
		s.Config = ClusterConfig{ID: c.ID, CheckpointRoot: c.CheckpointRoot, Levels: slices.Clone(c.Levels), ReportKey: c.ReportKey}
		return nil
	case s.Config.CheckpointRoot != c.CheckpointRoot:
		return fmtErr(ErrClusterConfig, "the cluster's checkpoint root is %q (set at bootstrap), not %q", s.Config.CheckpointRoot, c.CheckpointRoot)
	case c.Levels != nil && !slices.Equal(c.Levels, s.Config.Levels):
		return fmtErr(ErrClusterConfig, "the cluster's topology levels are %s (set at bootstrap), not %s",
			strings.Join(s.Config.TopologyLevels(), ","), strings.Join(c.Levels, ","))
	case s.Config.ReportKey == "":
		s.Config.ReportKey = c.ReportKey
	}
	return nil
}

// applyFinish applies FinishJob.
func applyFinish(s *State, c *FinishJob) error {
	j, err := liveJob(s, c.ID, c.Incarnation)
	if err != nil {
		return err
	}
	if c.Meas != nil {
		// A stale measurement is left out: the job's end does not wait
		// for it.
		if mergeMeasurement(j, c.Meas) == nil {
			noteCheckpoint(s, j, &c.Meas.Checkpoint, c.Time)
		}
	}
	j.State, j.FinishTime, j.Reason = c.State, c.Time, c.Reason
	delete(s.Allocation.Jobs, c.ID)
	reason := c.Reason
	if reason == "" {
		reason = fmt.Sprintf("%v in incarnation %d at epoch %d", c.State, j.Incarnation, j.Epoch)
	}
	emit(s, finishEvent(c.State), c.Time, c.ID, "", reason)
	return nil
}

// applyPrune applies Prune and returns what it skipped.
func applyPrune(s *State, c *Prune) []Drop {
	var drops []Drop
	gone := map[string]bool{}
	for _, id := range c.Jobs {
		j, ok := s.Jobs[id]
		switch {
		case !ok:
			drops = append(drops, Drop{Job: id, Err: fmtErr(ErrUnknownJob, "%q", id)})
		case !j.State.Terminal():
			drops = append(drops, Drop{Job: id, Err: invalid("job %q is %v, not finished", id, j.State)})
		default:
			delete(s.Jobs, id)
			gone[id] = true
		}
	}
	s.Events.forget(gone)
	used := s.UsedGPUs()
	for _, id := range c.Nodes {
		n, ok := s.Nodes[id]
		switch {
		case !ok:
			drops = append(drops, Drop{Node: id, Err: fmtErr(ErrUnknownNode, "%q", id)})
		case n.Health != Dead && n.Health != Left:
			drops = append(drops, Drop{Node: id, Err: invalid("node %q is %v", id, n.Health)})
		case used[id] > 0:
			drops = append(drops, Drop{Node: id, Err: invalid("node %q still holds %d GPUs of the allocation", id, used[id])})
		default:
			delete(s.Nodes, id)
		}
	}
	return drops
}
