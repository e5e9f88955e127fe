package state

import (
	"errors"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// TestReportKeyIsSetOnce: the first configuration's report key stays; a
// configuration written before report keys existed gets one from the
// next InitCluster of the same root, and only that once.
func TestReportKeyIsSetOnce(t *testing.T) {
	k1, k2 := strings.Repeat("a", ReportKeyLen), strings.Repeat("b", ReportKeyLen)
	a := newApplier()
	a.must(t, 1, &InitCluster{ID: "c", CheckpointRoot: "/r", ReportKey: k1},
		&InitCluster{ID: "d", CheckpointRoot: "/r", ReportKey: k2})
	if cfg := a.state().Config; cfg.ID != "c" || cfg.ReportKey != k1 {
		t.Fatalf("config %+v", cfg)
	}

	old := newApplier()
	old.must(t, 1, &InitCluster{ID: "c", CheckpointRoot: "/r"})
	if cfg := old.state().Config; cfg.ReportKey != "" {
		t.Fatalf("config %+v", cfg)
	}
	if err := old.apply(t, 1, &InitCluster{ID: "x", CheckpointRoot: "/other", ReportKey: k1}); !errors.Is(err, ErrClusterConfig) {
		t.Fatalf("another root: %v", err)
	}
	old.must(t, 1, &InitCluster{ID: "x", CheckpointRoot: "/r", ReportKey: k1},
		&InitCluster{ID: "y", CheckpointRoot: "/r", ReportKey: k2})
	if cfg := old.state().Config; cfg.ID != "c" || cfg.ReportKey != k1 {
		t.Fatalf("upgraded config %+v", cfg)
	}
}

func TestInitClusterEncoding(t *testing.T) {
	// An entry written before report keys (and topology levels) decodes
	// without one.
	b, err := Encode(&InitCluster{ID: "c", CheckpointRoot: "/r"})
	if err != nil {
		t.Fatal(err)
	}
	c, err := Decode(b)
	if err != nil || c.(*InitCluster).ReportKey != "" || c.(*InitCluster).Levels != nil {
		t.Fatalf("Decode = %+v, %v", c, err)
	}
	// An explicitly encoded empty block (no levels, an empty key) is not
	// an encoding, nor is a block cut after the levels.
	for _, tail := range [][]byte{{0, 0}, {0}} {
		if _, err := Decode(append(slices.Clone(b), tail...)); !errors.Is(err, ErrMalformed) {
			t.Errorf("block %v: %v", tail, err)
		}
	}
	for _, key := range []string{"abc", strings.Repeat("a", ReportKeyLen+2), strings.Repeat("z", ReportKeyLen)} {
		if _, err := Encode(&InitCluster{ID: "c", ReportKey: key}); !errors.Is(err, ErrInvalid) {
			t.Errorf("key %q: %v", key, err)
		}
	}
	n1, n2 := NewInitCluster("/r"), NewInitCluster("/r", "rack")
	if len(n1.ReportKey) != ReportKeyLen || len(n1.ID) != 16 || n1.ReportKey == n2.ReportKey || n1.ID == n2.ID || n1.CheckpointRoot != "/r" ||
		n1.Levels != nil || n2.Levels != nil {
		t.Errorf("NewInitCluster: %+v, %+v", n1, n2)
	}
	// Every combination of the block's fields round-trips.
	for _, in := range []InitCluster{n1, NewInitCluster("/r", "rack", "zone"),
		{ID: "c", CheckpointRoot: "/r", Levels: []string{"rack", "zone"}}} {
		b, err = Encode(&in)
		if err != nil {
			t.Fatal(err)
		}
		c, err := Decode(b)
		if err != nil || !reflect.DeepEqual(*c.(*InitCluster), in) {
			t.Errorf("round trip of %+v: %+v, %v", in, c, err)
		}
	}
}

// TestSnapshotKeepsTheReportKey: the key survives a snapshot; a version
// 2 snapshot (written before report keys) decodes without one, and the
// next InitCluster of its root gives it one.
func TestSnapshotKeepsTheReportKey(t *testing.T) {
	a := populated(t)
	key := strings.Repeat("e", ReportKeyLen)
	a.must(t, 1, &InitCluster{ID: "c", CheckpointRoot: "/r", ReportKey: key})
	s, err := DecodeState(EncodeState(a.state()))
	if err != nil || s.Config.ReportKey != key {
		t.Fatalf("decoded config %+v, %v", s.Config, err)
	}

	v2, err := os.ReadFile("testdata/snapshot-v2.bin")
	if err != nil {
		t.Fatal(err)
	}
	s, err = DecodeState(v2)
	if err != nil {
		t.Fatal(err)
	}
	old := &applier{s: s}
	cfg := old.state().Config
	if cfg.ID != "c1" || cfg.ReportKey != "" {
		t.Fatalf("version 2 decoded as %+v", cfg)
	}
	old.must(t, 1, &InitCluster{ID: "new", CheckpointRoot: cfg.CheckpointRoot, ReportKey: key})
	if got := old.state().Config; got.ID != "c1" || got.ReportKey != key {
		t.Errorf("upgraded version 2 config %+v", got)
	}
	s, err = DecodeState(EncodeState(old.state()))
	if err != nil || s.Config.ReportKey != key {
		t.Errorf("upgraded state re-encoded: %+v, %v", s.Config, err)
	}

	// A key without a cluster id is not a state.
	st := a.state()
	st.Config = ClusterConfig{ReportKey: key}
	if _, err := DecodeState(EncodeState(st)); !errors.Is(err, ErrInvalid) {
		t.Errorf("key without an id: %v", err)
	}
}
