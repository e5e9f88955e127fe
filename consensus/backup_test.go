package consensus

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"pollux/consensus/state"
	"pollux/internal/poll"
)

// TestSaveAndRestoreSnapshot: a backup saved on one cluster, restored
// on a new one, gives every server of it the same state; a bad backup
// and a follower are refused, changing nothing.
func TestSaveAndRestoreSnapshot(t *testing.T) {
	old := newCluster(t, 3, nil)
	ol := old.leader(old.members...)
	workload(t, ol.srv, ol.srv)
	backup, err := ol.srv.SaveSnapshot(ctxT(t, 5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(backup, encodingOf(t, ol.srv)) {
		t.Fatal("the backup is not the leader's state")
	}
	if _, err := old.followers(ol)[0].srv.SaveSnapshot(ctxT(t, time.Second)); !errors.Is(err, ErrNotLeader) {
		t.Errorf("a follower saved a backup: %v", err)
	}

	fresh := newCluster(t, 3, nil)
	nl := fresh.leader(fresh.members...)
	empty := encodingOf(t, nl.srv)
	if err := nl.srv.RestoreSnapshot(ctxT(t, 5*time.Second), backup[:len(backup)/2]); !errors.Is(err, state.ErrMalformed) {
		t.Errorf("a truncated backup: %v", err)
	}
	if err := fresh.followers(nl)[0].srv.RestoreSnapshot(ctxT(t, 5*time.Second), backup); !errors.Is(err, ErrNotLeader) {
		t.Errorf("a restore on a follower: %v", err)
	}
	if !bytes.Equal(encodingOf(t, nl.srv), empty) {
		t.Fatal("a refused restore changed the state")
	}
	if err := nl.srv.RestoreSnapshot(ctxT(t, 5*time.Second), backup); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(encodingOf(t, nl.srv), backup) {
		t.Fatal("the restored leader's state is not the backup")
	}
	for _, m := range fresh.followers(nl) {
		poll.Until(t, 5*time.Second, "the follower has the backup", func() bool {
			return bytes.Equal(state.EncodeState(m.srv.LocalState()), backup)
		})
	}
	// The restored cluster goes on writing.
	if err := nl.srv.SubmitJob(ctxT(t, 5*time.Second), "j3", testSpec(), 3); err != nil {
		t.Fatal(err)
	}
}
