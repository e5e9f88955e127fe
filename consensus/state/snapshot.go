package state

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"

	"pollux/optimizer/goodput"
)

// A snapshot is the magic, a version byte, the canonical state and a
// CRC-32C; docs/replicated-state.md lists what each version added.
const (
	snapshotMagic   = "PLXS"
	SnapshotVersion = 15
	// MaxSnapshot bounds the size of an encoded state.
	MaxSnapshot = 1 << 30
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// EncodeState returns the canonical encoding of s: two states are equal
// exactly when their encodings are.
func EncodeState(s *State) []byte {
	w := &writer{b: make([]byte, 0, 256)}
	w.b = append(w.b, snapshotMagic...)
	w.byte(SnapshotVersion)
	w.str(s.Config.ID)
	w.str(s.Config.CheckpointRoot)
	w.f64(s.LastRound)
	w.strs(s.Config.Levels)
	w.str(s.Config.ReportKey)

	nodes := s.NodeIDs()
	w.uvarint(uint64(len(nodes)))
	for _, id := range nodes {
		encodeNode(w, s.Nodes[id])
		encodeNodeAttrs(w, s.Nodes[id])
	}

	jobs := s.JobIDs()
	w.uvarint(uint64(len(jobs)))
	for _, id := range jobs {
		j := s.Jobs[id]
		w.str(j.ID)
		encodeJobSpec(w, &j.Spec)
		w.byte(byte(j.State))
		w.f64(j.SubmitTime)
		w.f64(j.FinishTime)
		w.str(j.Reason)
		w.f64(j.Attained)
		w.int(j.Restarts)
		w.int(j.Epoch)
		w.f64(j.Progress)
		encodeTypedProfile(w, j.Profile)
		w.bool(j.HasGrad)
		w.f64(j.Grad.GradSqr)
		w.f64(j.Grad.GradVar)
		w.uvarint(j.Incarnation)
		encodeBid(w, &j.Bid)
		encodeTypeBids(w, j.Bid.Types)
		w.int(j.Crashes)
		w.int(j.CrashEpoch)
		w.uvarint(j.MeasSession)
		w.uvarint(j.MeasSeq)
		w.str(j.Submitter)
		w.str(j.SubmitterName)
		encodeProfileRacks(w, j.Profile)
		encodeBidRacks(w, &j.Bid)
		w.str(j.SubmitKey)
		w.str(j.CancelKey)
		w.f64(j.Bid.RestartDelay)
		encodeCheckpoint(w, &j.Checkpoint)
	}

	w.uvarint(s.Allocation.Generation)
	w.uvarint(s.Allocation.Term)
	encodePlacements(w, s.Allocation.Jobs)
	encodeACL(w, &s.ACL)
	encodeScale(w, &s.Scale)
	encodeFederation(w, s.Fed)
	encodeQuotas(w, &s.Quotas)
	encodeEvents(w, &s.Events)

	return binary.LittleEndian.AppendUint32(w.b, crc32.Checksum(w.b, castagnoli))
}

// DecodeState parses and validates an encoding made by EncodeState.
// Garbage is an error wrapping ErrMalformed, ErrUnknownVersion or
// ErrInvalid, never a panic.
func DecodeState(b []byte) (*State, error) {
	if len(b) < len(snapshotMagic)+1+4 || !bytes.HasPrefix(b, []byte(snapshotMagic)) {
		return nil, fmt.Errorf("%w: not a snapshot", ErrMalformed)
	}
	version := b[len(snapshotMagic)]
	if version < 1 || version > SnapshotVersion {
		return nil, fmt.Errorf("%w: snapshot version %d (this binary knows 1 to %d)", ErrUnknownVersion, version, SnapshotVersion)
	}
	body, sum := b[:len(b)-4], binary.LittleEndian.Uint32(b[len(b)-4:])
	if crc32.Checksum(body, castagnoli) != sum {
		return nil, fmt.Errorf("%w: snapshot checksum mismatch", ErrMalformed)
	}
	r := &reader{b: body[len(snapshotMagic)+1:]}
	s := New()
	if version >= 2 {
		s.Config.ID = r.str()
		s.Config.CheckpointRoot = r.str()
		s.LastRound = r.f64()
		if version >= 3 {
			s.Config.Levels = r.strs(maxLevels)
			s.Config.ReportKey = r.str()
		}
		if r.err == nil {
			if err := checkNonNeg("last round", s.LastRound); err != nil {
				return nil, err
			}
			if s.Config.ID != "" {
				if err := (&InitCluster{ID: s.Config.ID, CheckpointRoot: s.Config.CheckpointRoot, Levels: s.Config.Levels, ReportKey: s.Config.ReportKey}).validate(); err != nil {
					return nil, err
				}
			} else if s.Config.CheckpointRoot != "" || s.Config.Levels != nil || s.Config.ReportKey != "" {
				return nil, invalid("checkpoint root, topology levels or report key without a cluster id")
			}
		}
	}

	// Nodes and jobs must come in id order (ids are never empty), so only
	// the canonical encoding decodes.
	prev := ""
	n := r.length(maxList)
	for i := 0; i < n && r.err == nil; i++ {
		var node Node
		decodeNode(r, &node)
		if version >= 3 {
			decodeNodeAttrs(r, &node)
		}
		if r.err != nil {
			break
		}
		if err := (&RegisterNode{Node: node}).validate(); err != nil {
			return nil, err
		}
		if err := checkNodeLevels(&node, s.Config.Levels); err != nil {
			return nil, err
		}
		if node.ID <= prev {
			return nil, fmt.Errorf("%w: node %q out of order", ErrMalformed, node.ID)
		}
		prev = node.ID
		s.Nodes[node.ID] = &node
	}

	prev = ""
	n = r.length(maxList)
	for i := 0; i < n && r.err == nil; i++ {
		j := &Job{ID: r.str()}
		decodeSpec(r, &j.Spec)
		if version >= 3 {
			decodeSpecAttrs(r, &j.Spec)
		}
		if version >= 8 {
			j.Spec.Epochs = r.int()
		}
		if version >= 9 {
			j.Spec.ResumeFrom = r.str()
		}
		j.State = JobState(r.byte())
		j.SubmitTime = r.f64()
		j.FinishTime = r.f64()
		j.Reason = r.str()
		j.Attained = r.f64()
		j.Restarts = r.int()
		j.Epoch = r.int()
		j.Progress = r.f64()
		if version >= 6 {
			j.Profile = decodeTypedProfile(r)
		} else {
			j.Profile = decodeProfile(r)
		}
		j.HasGrad = r.bool()
		j.Grad.GradSqr = r.f64()
		j.Grad.GradVar = r.f64()
		j.Incarnation = r.uvarint()
		if version >= 2 {
			decodeBid(r, &j.Bid)
			if version >= 6 {
				j.Bid.Types = decodeTypeBids(r)
			}
			j.Crashes = r.int()
			j.CrashEpoch = r.int()
			j.MeasSession = r.uvarint()
			j.MeasSeq = r.uvarint()
		}
		if version >= 3 {
			j.Submitter = r.str()
			j.SubmitterName = r.str()
		}
		if version >= 10 {
			decodeProfileRacks(r, j.Profile)
			decodeBidRacks(r, &j.Bid)
		}
		if version >= 11 {
			j.SubmitKey = r.str()
			j.CancelKey = r.str()
		}
		if version >= 13 {
			j.Bid.RestartDelay = r.f64()
		}
		if version >= 15 {
			j.Checkpoint = decodeCheckpoint(r)
		}
		if r.err != nil {
			break
		}
		if err := validateJob(j); err != nil {
			return nil, err
		}
		if err := j.Spec.Topology.Validate(s.Config.Levels); err != nil {
			return nil, invalid("job %q: %v", j.ID, err)
		}
		if j.ID <= prev {
			return nil, fmt.Errorf("%w: job %q out of order", ErrMalformed, j.ID)
		}
		prev = j.ID
		j.specBytes = SpecSize(&j.Spec)
		s.Jobs[j.ID] = j
	}

	s.Allocation.Generation = r.uvarint()
	s.Allocation.Term = r.uvarint()
	s.Allocation.Jobs = decodePlacements(r)
	if version >= 3 && r.err == nil {
		acl, err := decodeACL(r)
		if err != nil {
			return nil, err
		}
		s.ACL = acl
	}
	if version >= 4 && r.err == nil {
		sc, err := decodeScale(r, version)
		if err != nil {
			return nil, err
		}
		s.Scale = sc
	}
	if version >= 7 && r.err == nil {
		fed, err := decodeFederation(r, s)
		if err != nil {
			return nil, err
		}
		s.Fed = fed
	}
	if version >= 9 && r.err == nil {
		q, err := decodeQuotas(r, &s.ACL)
		if err != nil {
			return nil, err
		}
		s.Quotas = q
	}
	if version >= 12 && r.err == nil {
		ev, err := decodeEvents(r, version)
		if err != nil {
			return nil, err
		}
		s.Events = ev
	}
	if err := r.done(); err != nil {
		return nil, err
	}
	if err := validateAllocation(s); err != nil {
		return nil, err
	}
	return s, nil
}

// validateJob checks a job read from a snapshot.
func validateJob(j *Job) error {
	sub := SubmitJob{ID: j.ID, Spec: j.Spec, SubmitTime: j.SubmitTime, Owned: j.Spec.ResumeFrom != ""}
	if err := sub.validate(); err != nil {
		return err
	}
	if !j.State.valid() {
		return invalid("job %q in state %d", j.ID, j.State)
	}
	if err := checkKey(j.SubmitKey); err != nil {
		return err
	}
	if err := checkKey(j.CancelKey); err != nil {
		return err
	}
	if j.CancelKey != "" && j.State != Cancelled {
		return invalid("job %q has a cancel key but is %v", j.ID, j.State)
	}
	if err := checkText("reason", j.Reason); err != nil {
		return err
	}
	for _, v := range []float64{j.FinishTime, j.Attained, j.Progress, j.Grad.GradSqr, j.Grad.GradVar} {
		if err := checkNonNeg("job "+j.ID+" figure", v); err != nil {
			return err
		}
	}
	if err := j.Checkpoint.validate(j.ID); err != nil {
		return err
	}
	if j.Checkpoint.Incarnation > j.Incarnation {
		return invalid("job %q has a checkpoint of incarnation %d, after its %d", j.ID, j.Checkpoint.Incarnation, j.Incarnation)
	}
	if j.Restarts < 0 || j.Epoch < 0 || j.Crashes < 0 || j.CrashEpoch < 0 {
		return invalid("job %q restarts %d, epoch %d, crashes %d at epoch %d", j.ID, j.Restarts, j.Epoch, j.Crashes, j.CrashEpoch)
	}
	if j.Bid.Version != 0 {
		if err := j.Bid.Validate(); err != nil {
			return fmt.Errorf("job %q: %w", j.ID, err)
		}
	} else if j.Bid.Session != 0 || j.Bid.RestartDelay != 0 || j.Bid.HasModel || j.Bid.HasGrad || j.Bid.Params != (goodput.Params{}) ||
		j.Bid.Grad != (goodput.GradStats{}) || j.Bid.MostProfiled != 0 || j.Bid.Single != nil || j.Bid.Multi != nil || j.Bid.Types != nil {
		return invalid("job %q has a bid of version 0", j.ID)
	}
	if (j.Submitter == "") != (j.SubmitterName == "") {
		return invalid("job %q has submitter %q named %q (want both or neither)", j.ID, j.Submitter, j.SubmitterName)
	}
	if j.Submitter != "" {
		if err := checkID("submitter", j.Submitter); err != nil {
			return err
		}
		if err := checkID("submitter name", j.SubmitterName); err != nil {
			return err
		}
	}
	if j.MeasSession == 0 && j.MeasSeq != 0 {
		return invalid("job %q acknowledges measurement %d of no session", j.ID, j.MeasSeq)
	}
	for i := range j.Profile {
		if err := j.Profile[i].validate(); err != nil {
			return err
		}
		if err := checkGPUType(j.Profile[i].GPUType); err != nil {
			return invalid("job %q profile: %v", j.ID, err)
		}
		if i > 0 && compareKey(j.Profile[i-1].key(), j.Profile[i].key()) >= 0 {
			return fmt.Errorf("%w: job %q profile out of order", ErrMalformed, j.ID)
		}
	}
	return nil
}

// validateAllocation checks the allocation read from a snapshot against
// its jobs and nodes.
func validateAllocation(s *State) error {
	a := &s.Allocation
	if len(a.Jobs) > 0 {
		if err := (&CommitAllocation{Generation: a.Generation, Term: a.Term, Jobs: a.Jobs}).validate(); err != nil {
			return err
		}
	}
	for id, slots := range a.Jobs {
		j, ok := s.Jobs[id]
		if !ok || j.State.Terminal() {
			return invalid("allocation places job %q, which is unknown or finished", id)
		}
		for _, sl := range slots {
			if _, ok := s.Nodes[sl.Node]; !ok && !borrowedID(sl.Node) {
				return invalid("allocation places job %q on unknown node %q", id, sl.Node)
			}
		}
	}
	return nil
}
