package state

import (
	"strings"

	"pollux/optimizer/topology"
)

// Per-GPU-type measurements and bids were added after the first
// encodings. A job actor's measurement carries the GPU type its
// incarnation ran on (Measurement.GPUType), the state records every
// profile entry under its type (ProfileEntry.GPUType), and a bid carries
// a part per type the job has a model on (Bid.Types). In a Round they
// are flagged and encoded last, only when set, so that an update without
// them encodes as before and old entries decode with no types; snapshots
// of version 5 always carry them.

// maxBidTypes bounds the per-type parts of one bid.
const maxBidTypes = 64

// checkGPUType accepts "" (untyped) or a valid GPU type name.
func checkGPUType(t string) error {
	if t == "" {
		return nil
	}
	return topology.CheckName("GPU type", t)
}

func encodeTypeBids(w *writer, ts []TypeBid) {
	w.uvarint(uint64(len(ts)))
	for i := range ts {
		t := &ts[i]
		w.str(t.GPUType)
		for _, v := range t.Params.Slice() {
			w.f64(v)
		}
		w.int(t.MostProfiled)
		encodeTables(w, t.Single, t.Multi)
	}
}

func decodeTypeBids(r *reader) []TypeBid {
	n := r.length(maxBidTypes)
	if n == 0 {
		return nil
	}
	ts := make([]TypeBid, 0, n)
	for i := 0; i < n && r.err == nil; i++ {
		var t TypeBid
		t.GPUType = r.str()
		t.Params = decodeParams(r)
		t.MostProfiled = r.int()
		t.Single, t.Multi = decodeTables(r)
		ts = append(ts, t)
	}
	return ts
}

// validateTypes checks a bid's per-type parts: sorted by unique, named
// GPU types, only beside a top-level model, each with an evaluable model
// and tables as long as the top-level ones.
func (b *Bid) validateTypes() error {
	if b.Types == nil {
		return nil
	}
	if len(b.Types) == 0 || len(b.Types) > maxBidTypes {
		return invalid("bid with %d per-type parts (want 1..%d, or none)", len(b.Types), maxBidTypes)
	}
	if !b.HasModel {
		return invalid("bid per-type models without a top-level model")
	}
	for i := range b.Types {
		t := &b.Types[i]
		if t.GPUType == "" {
			return invalid("bid part of an empty GPU type")
		}
		if err := checkGPUType(t.GPUType); err != nil {
			return invalid("bid part: %v", err)
		}
		if i > 0 && strings.Compare(b.Types[i-1].GPUType, t.GPUType) >= 0 {
			return invalid("bid parts not sorted by unique GPU type at %q", t.GPUType)
		}
		if err := checkParams(t.Params); err != nil {
			return invalid("bid part %q: %v", t.GPUType, err)
		}
		if t.MostProfiled < 0 || t.MostProfiled > b.MostProfiled {
			return invalid("bid part %q profiled at %d replicas (the bid's most is %d)", t.GPUType, t.MostProfiled, b.MostProfiled)
		}
		if len(t.Single) != len(b.Single) || len(t.Multi) != len(b.Multi) {
			return invalid("bid part %q tables of %d and %d shapes (the bid's are %d and %d)", t.GPUType,
				len(t.Single), len(t.Multi), len(b.Single), len(b.Multi))
		}
		if err := checkTables(t.Single, t.Multi); err != nil {
			return invalid("bid part %q: %v", t.GPUType, err)
		}
	}
	return nil
}

// encodeTypedProfile writes a profile as groups of one GPU type each, in
// type order (snapshots of version 5).
func encodeTypedProfile(w *writer, es []ProfileEntry) {
	var groups [][]ProfileEntry
	for i, e := range es {
		if i == 0 || es[i-1].GPUType != e.GPUType {
			groups = append(groups, nil)
		}
		groups[len(groups)-1] = append(groups[len(groups)-1], e)
	}
	w.uvarint(uint64(len(groups)))
	for _, g := range groups {
		w.str(g[0].GPUType)
		encodeProfile(w, g)
	}
}

func decodeTypedProfile(r *reader) []ProfileEntry {
	n := r.length(maxProfile)
	var es []ProfileEntry
	prev := ""
	for i := 0; i < n && r.err == nil; i++ {
		t := r.str()
		if i > 0 && t <= prev {
			r.fail("profile group of GPU type %q out of order", t)
		}
		prev = t
		g := decodeProfile(r)
		if len(g) == 0 {
			r.fail("profile group of GPU type %q encoded empty", t)
		}
		for _, e := range g {
			e.GPUType = t
			es = append(es, e)
		}
	}
	return es
}
