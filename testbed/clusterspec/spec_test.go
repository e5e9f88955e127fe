package clusterspec

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	tests := []struct {
		in   string
		want string
		gpus int
	}{
		{"aws:6,rtx:3,dgx-ext:2", "aws:6x4,rtx:3x8,dgx-ext:2x8", 64},
		{"hetero", "aws:6x4,dgx-ext:2x8,rtx:3x8", 64},
		{"homogeneous", "aws:16x4", 64},
		{"t4:16x4", "t4:16x4", 64},
		{" aws : 2 ", "aws:2x4", 8},
	}
	for _, tt := range tests {
		s, err := Resolve(tt.in)
		if err != nil {
			t.Errorf("%q: %v", tt.in, err)
			continue
		}
		if s.String() != tt.want || s.TotalGPUs() != tt.gpus {
			t.Errorf("%q: %s (%d GPUs), want %s (%d)", tt.in, s, s.TotalGPUs(), tt.want, tt.gpus)
		}
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct{ in, want string }{
		{"", "empty"},
		{"aws", "entry 1"},
		{"aws:6,rtx:x", "entry 2"},
		{"aws:0", "0 nodes"},
		{"aws:2x0", "0 GPUs per node"},
		{"h100:2", "no default GPUs per node"},
		{"aws:1,aws:2", "twice"},
		{"a b:1", "GPU type"},
	}
	for _, tt := range tests {
		_, err := Resolve(tt.in)
		if !errors.Is(err, ErrBadSpec) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q: %v, want ErrBadSpec mentioning %q", tt.in, err, tt.want)
		}
	}
}

func TestLoad(t *testing.T) {
	s, err := Resolve(filepath.Join("testdata", "hetero.csv"))
	if err != nil {
		t.Fatal(err)
	}
	if s.String() != "aws:6x4,dgx-ext:2x8,rtx:3x8" {
		t.Errorf("got %s", s)
	}
	tests := []struct{ file, want string }{
		{"zero-nodes.csv", "zero-nodes.csv:3: "},
		{"empty.csv", "empty.csv:1: "},
	}
	for _, tt := range tests {
		_, err := Load(filepath.Join("testdata", tt.file))
		if !errors.Is(err, ErrBadSpec) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v, want an error at %q", tt.file, err, tt.want)
		}
	}
}

func FuzzDecode(f *testing.F) {
	for _, name := range []string{"hetero.csv", "zero-nodes.csv", "empty.csv"} {
		data, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := Decode(strings.NewReader(string(data)), "fuzz.csv")
		if err != nil {
			if !errors.Is(err, ErrBadSpec) {
				t.Fatalf("error %v does not wrap ErrBadSpec", err)
			}
			return
		}
		if s.TotalGPUs() <= 0 {
			t.Fatalf("accepted a spec without GPUs: %+v", s)
		}
	})
}
