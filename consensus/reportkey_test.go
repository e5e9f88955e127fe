package consensus

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"strings"
	"testing"
)

// TestReportKeyIsSetOnce: the first configuration's report key stays; a
// configuration written before report keys existed gets one from the
// next InitCluster of the same root, and only that once.
func TestReportKeyIsSetOnce(t *testing.T) {
	k1, k2 := strings.Repeat("a", ReportKeyLen), strings.Repeat("b", ReportKeyLen)
	a := &fsmApplier{f: NewFSM()}
	a.must(t, 1, &InitCluster{ID: "c", CheckpointRoot: "/r", ReportKey: k1},
		&InitCluster{ID: "d", CheckpointRoot: "/r", ReportKey: k2})
	if cfg := a.f.State().Config; cfg.ID != "c" || cfg.ReportKey != k1 {
		t.Fatalf("config %+v", cfg)
	}

	old := &fsmApplier{f: NewFSM()}
	old.must(t, 1, &InitCluster{ID: "c", CheckpointRoot: "/r"})
	if cfg := old.f.State().Config; cfg.ReportKey != "" {
		t.Fatalf("config %+v", cfg)
	}
	if err := old.apply(t, 1, &InitCluster{ID: "x", CheckpointRoot: "/other", ReportKey: k1}); !errors.Is(err, ErrClusterConfig) {
		t.Fatalf("another root: %v", err)
	}
	old.must(t, 1, &InitCluster{ID: "x", CheckpointRoot: "/r", ReportKey: k1},
		&InitCluster{ID: "y", CheckpointRoot: "/r", ReportKey: k2})
	if cfg := old.f.State().Config; cfg.ID != "c" || cfg.ReportKey != k1 {
		t.Fatalf("upgraded config %+v", cfg)
	}
}

func TestInitClusterEncoding(t *testing.T) {
	// An entry written before report keys decodes without one.
	b, err := Encode(&InitCluster{ID: "c", CheckpointRoot: "/r"})
	if err != nil {
		t.Fatal(err)
	}
	c, err := Decode(b)
	if err != nil || c.(*InitCluster).ReportKey != "" {
		t.Fatalf("Decode = %+v, %v", c, err)
	}
	// An explicitly encoded empty key is not an encoding.
	if _, err := Decode(append(b, 0)); !errors.Is(err, ErrMalformed) {
		t.Errorf("empty key: %v", err)
	}
	for _, key := range []string{"abc", strings.Repeat("a", ReportKeyLen+2), strings.Repeat("z", ReportKeyLen)} {
		if _, err := Encode(&InitCluster{ID: "c", ReportKey: key}); !errors.Is(err, ErrInvalid) {
			t.Errorf("key %q: %v", key, err)
		}
	}
	n1, n2 := NewInitCluster("/r"), NewInitCluster("/r")
	if len(n1.ReportKey) != ReportKeyLen || len(n1.ID) != 16 || n1.ReportKey == n2.ReportKey || n1.ID == n2.ID || n1.CheckpointRoot != "/r" {
		t.Errorf("NewInitCluster: %q %s, %q %s", n1.ID, n1.ReportKey, n2.ID, n2.ReportKey)
	}
	b, err = Encode(&n1)
	if err != nil {
		t.Fatal(err)
	}
	if c, err := Decode(b); err != nil || *c.(*InitCluster) != n1 {
		t.Errorf("round trip: %+v, %v", c, err)
	}
}

// TestSnapshotKeepsTheReportKey: the key survives a snapshot; a version
// 3 snapshot (no key) still decodes, without one.
func TestSnapshotKeepsTheReportKey(t *testing.T) {
	a := populated(t)
	key := strings.Repeat("e", ReportKeyLen)
	a.must(t, 1, &InitCluster{ID: "c", CheckpointRoot: "/r", ReportKey: key})
	s, err := DecodeState(EncodeState(a.f.State()))
	if err != nil || s.Config.ReportKey != key {
		t.Fatalf("decoded config %+v, %v", s.Config, err)
	}

	// Version 3 is version 4 without the key's field (an empty string,
	// one zero byte after the last round's time).
	st := a.f.State()
	st.Config.ReportKey = ""
	v4 := EncodeState(st)
	at := len(snapshotMagic) + 1 + 1 + len("c") + 1 + len("/r") + 8
	if v4[at] != 0 {
		t.Fatalf("byte %d is %d, want the empty key's length", at, v4[at])
	}
	body := append(bytes.Clone(v4[:at]), v4[at+1:len(v4)-4]...)
	body[len(snapshotMagic)] = 3
	v3 := binary.LittleEndian.AppendUint32(body, crc32.Checksum(body, castagnoli))
	s, err = DecodeState(v3)
	if err != nil {
		t.Fatal(err)
	}
	if s.Config.ID != "c" || s.Config.ReportKey != "" || !bytes.Equal(EncodeState(s), v4) {
		t.Errorf("version 3 decoded as %+v", s.Config)
	}
	// A key without a cluster id is not a state.
	st.Config = ClusterConfig{ReportKey: key}
	if _, err := DecodeState(EncodeState(st)); !errors.Is(err, ErrInvalid) {
		t.Errorf("key without an id: %v", err)
	}
}
