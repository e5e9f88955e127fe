package cluster

import (
	"errors"
	"strings"
	"testing"
)

func TestMetaRoundTrip(t *testing.T) {
	m := Meta{Role: RoleAgent, Rack: "r7", Topology: "rack=r7,zone=z1", GPUType: "a100", GPUs: 4, ActorAddr: "127.0.0.1:8000"}
	b, err := m.Encode()
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeMeta(b)
	if err != nil || got != m {
		t.Fatalf("DecodeMeta = %+v, %v", got, err)
	}
}

func TestDecodeMetaRejects(t *testing.T) {
	for _, in := range []string{
		``, `garbage`, `{"role":"boss"}`, `{"role":"agent","gpus":-1}`, `{"role":"agent","gpus":100000}`,
		`{"role":"agent","extra":1}`, `{"role":"agent"} {}`, `{"role":"server","raft":"nohost"}`,
		`{"role":"agent","rack":"` + strings.Repeat("r", 65) + `"}`,
		`{"role":"agent","rack":"` + strings.Repeat("r", 600) + `"}`,
		`{"role":"agent","rack":"r1","topology":"rack=r2"}`,
		`{"role":"agent","rack":"r1","topology":"zone=z1,rack=r1"}`,
		`{"role":"agent","topology":"rack="}`,
		`{"role":"agent","rack":"r1","topology":"rack=r1,zone"}`,
		`{"role":"agent","gpu_type":"A100"}`,
		`{"role":"server","levels":"zone,rack"}`,
	} {
		if _, err := DecodeMeta([]byte(in)); !errors.Is(err, ErrBadMeta) {
			t.Errorf("DecodeMeta(%.40q) = %v, want ErrBadMeta", in, err)
		}
	}
}

func FuzzDecodeMeta(f *testing.F) {
	f.Add([]byte(`{"role":"server","actor":"127.0.0.1:1","raft":"127.0.0.1:2","http":"[::1]:3"}`))
	f.Add([]byte(`{"role":"agent","rack":"r","gpus":4}`))
	f.Add([]byte(`{"role":"agent","rack":"r1","topology":"rack=r1,zone=z1","gpu_type":"t4","gpus":4}`))
	f.Add([]byte(`{"role":"server","rack":"r1","topology":"rack=r1","levels":"rack,zone"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := DecodeMeta(b)
		if err != nil {
			return
		}
		enc, err := m.Encode()
		if err != nil {
			t.Fatalf("Encode of accepted %+v: %v", m, err)
		}
		again, err := DecodeMeta(enc)
		if err != nil || again != m {
			t.Fatalf("round trip %+v -> %+v, %v", m, again, err)
		}
	})
}
