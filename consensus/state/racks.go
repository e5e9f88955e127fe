package state

// Racks came after the first encodings too. A profile entry measured
// across racks carries how many it spanned (ProfileEntry.Racks; 0 for
// one rack, the only value an older entry has), and a bid the
// cross-rack term of its models (goodput.Params.AlphaX; 0 while
// unknown). In a Round they are flagged (bit 0x40 of an update) and
// encoded after the rest of the update, only when one is set, so that an
// update without them encodes as before; snapshots of version 10 always
// carry them, after the rest of each job.

// roundHasRacks reports whether update u carries something of racks.
func roundHasRacks(u *RoundJob) bool {
	return (u.HasBid && bidHasRacks(&u.Bid)) || (u.HasMeas && profileHasRacks(u.Meas.Profile))
}

func bidHasRacks(b *Bid) bool {
	if b.Params.AlphaX != 0 {
		return true
	}
	for i := range b.Types {
		if b.Types[i].Params.AlphaX != 0 {
			return true
		}
	}
	return false
}

func profileHasRacks(es []ProfileEntry) bool {
	for i := range es {
		if es[i].Racks != 0 {
			return true
		}
	}
	return false
}

// encodeBidRacks writes the cross-rack terms of b: its own, then each
// per-type part's.
func encodeBidRacks(w *writer, b *Bid) {
	w.f64(b.Params.AlphaX)
	for i := range b.Types {
		w.f64(b.Types[i].Params.AlphaX)
	}
}

func decodeBidRacks(r *reader, b *Bid) {
	b.Params.AlphaX = r.f64()
	for i := range b.Types {
		b.Types[i].Params.AlphaX = r.f64()
	}
}

// encodeProfileRacks writes the racks of every entry of es, in order.
func encodeProfileRacks(w *writer, es []ProfileEntry) {
	for i := range es {
		w.int(es[i].Racks)
	}
}

func decodeProfileRacks(r *reader, es []ProfileEntry) {
	for i := range es {
		es[i].Racks = r.int()
	}
}
