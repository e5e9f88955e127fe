package jobspec

import (
	"bytes"
	"errors"
	"os"
	"reflect"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"pollux/optimizer"
)

func TestParseTestdata(t *testing.T) {
	tests := []struct {
		file string
		want Spec
	}{
		{"emulated.yaml", Spec{
			Name: "cifar10-a", Application: "cifar10", MinReplicas: 1, MaxReplicas: 8,
			InitBatch: 128, MaxBatch: 4096, MinLocalBatch: 32, MaxLocalBatch: 512,
			Accumulation: true, CheckpointDir: "/var/lib/pollux/ckpt/cifar10-a",
		}},
		{"command.yaml", Spec{
			Name: "bert.finetune_2", Command: []string{"python3", "train.py", "--epochs", "2"},
			MinReplicas: 1, MaxReplicas: DefaultMaxReplicas,
			InitBatch: 12, MaxBatch: 12, MinLocalBatch: 1, MaxLocalBatch: 12,
		}},
	}
	for _, tc := range tests {
		t.Run(tc.file, func(t *testing.T) {
			f, err := os.Open("testdata/" + tc.file)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			got, err := Decode(f)
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

const base = "name: j\napplication: cifar10\ninit_batch_size: 128\n"

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name    string
		yaml    string
		want    error
		field   string // for a FieldError
		message string // a substring of the message
	}{
		{"empty", "", ErrSyntax, "", "empty spec"},
		{"not a mapping", "- a\n- b\n", ErrSyntax, "", "mapping"},
		{"two documents", base + "---\n" + base, ErrSyntax, "", "one YAML document"},
		{"broken yaml", "name: [unclosed\n", ErrSyntax, "", ""},
		{"unknown field", base + "replica: 3\n", ErrInvalid, "replica", "unknown field (line 4)"},
		{"duplicate field", base + "name: k\n", ErrInvalid, "name", "given twice"},
		{"wrong type", base + "min_replicas: three\n", ErrInvalid, "min_replicas", "want an integer (line 4)"},
		{"float for int", base + "max_replicas: 2.5\n", ErrInvalid, "max_replicas", "want an integer"},
		{"overflow", base + "max_batch_size: 99999999999999999999999\n", ErrInvalid, "max_batch_size", "want an integer"},
		{"list for string", "name: [a]\napplication: x\ninit_batch_size: 1\n", ErrInvalid, "name", "want a string"},
		{"alias", "n: &a 3\n", ErrInvalid, "n", "unknown field"},
		{"alias in value", "name: j\napplication: cifar10\ninit_batch_size: 128\ncommand: &c [a]\n", ErrInvalid, "application", "not both"},
		{"alias use", "name: &n j\napplication: *n\ninit_batch_size: 1\n", ErrInvalid, "application", "aliases are not allowed"},
		{"no name", "application: x\ninit_batch_size: 1\n", ErrInvalid, "name", "want 1-63"},
		{"bad name", strings.Replace(base, "name: j", "name: Job One", 1), ErrInvalid, "name", "want 1-63"},
		{"no program", "name: j\ninit_batch_size: 1\n", ErrInvalid, "command", "either command or application"},
		{"both programs", base + "command: [a]\n", ErrInvalid, "application", "not both"},
		{"bad application", strings.Replace(base, "cifar10", "CIFAR 10", 1), ErrInvalid, "application", "want 1-32"},
		{"empty program", "name: j\ncommand: ['']\ninit_batch_size: 1\n", ErrInvalid, "command", "program"},
		{"nul in arg", "name: j\ncommand: [a, \"b\\0c\"]\ninit_batch_size: 1\n", ErrInvalid, "command[1]", "NUL"},
		{"too many args", "name: j\ncommand: [" + strings.Repeat("a,", MaxArgs) + "a]\ninit_batch_size: 1\n", ErrInvalid, "command", "more than"},
		{"zero replicas", base + "min_replicas: 0\n", ErrInvalid, "min_replicas", "between 1 and 1024"},
		{"negative replicas", base + "min_replicas: -3\n", ErrInvalid, "min_replicas", "between 1 and 1024"},
		{"absurd replicas", base + "max_replicas: 1000000\n", ErrInvalid, "max_replicas", "between"},
		{"max below min", base + "min_replicas: 4\nmax_replicas: 2\nmax_batch_size: 1024\n", ErrInvalid, "max_replicas", "below min_replicas (4)"},
		{"no batch", "name: j\napplication: x\n", ErrInvalid, "init_batch_size", "between 1 and"},
		{"absurd batch", base + "max_batch_size: 1000000000\n", ErrInvalid, "max_batch_size", "between"},
		{"max batch below init", base + "max_batch_size: 64\n", ErrInvalid, "max_batch_size", "below init_batch_size (128)"},
		{"local range", base + "min_local_batch_size: 64\nmax_local_batch_size: 32\n", ErrInvalid, "max_local_batch_size", "below min_local_batch_size (64)"},
		{"min local above init", base + "min_local_batch_size: 256\nmax_local_batch_size: 512\nmax_batch_size: 1024\n", ErrInvalid, "min_local_batch_size", "exceed init_batch_size"},
		{"min replicas too big", base + "min_replicas: 8\nmin_local_batch_size: 32\n", ErrInvalid, "min_replicas", "exceed max_batch_size"},
		{"needs accumulation", base + "max_local_batch_size: 64\n", ErrInvalid, "max_local_batch_size", "accumulation: true"},
		{"relative checkpoint", base + "checkpoint_dir: ckpt\n", ErrInvalid, "checkpoint_dir", "absolute"},
		{"topology not a mapping", base + "topology: rack\n", ErrInvalid, "topology", "want a mapping"},
		{"topology unknown key", base + "topology: {needed: rack}\n", ErrInvalid, "topology.needed", "want required or preferred"},
		{"topology twice", base + "topology: {required: rack, required: zone}\n", ErrInvalid, "topology.required", "given twice"},
		{"topology both", base + "topology: {required: rack, preferred: zone}\n", ErrInvalid, "topology", "both required"},
		{"topology bad level", base + "topology: {required: Rack 1}\n", ErrInvalid, "topology", "lower-case"},
		{"topology level not a string", base + "topology: {required: 3}\n", ErrInvalid, "topology", "want required: LEVEL"},
		{"topology nested", base + "topology: {required: [rack]}\n", ErrInvalid, "topology", "want required: LEVEL"},
		{"gpu type upper-case", base + "gpu_type: A100\n", ErrInvalid, "gpu_type", "lower-case"},
		{"gpu type list", base + "gpu_type: [a100, t4]\n", ErrInvalid, "gpu_type", "want a string"},
		{"negative epochs", base + "epochs: -3\n", ErrInvalid, "epochs", "want 0 (not declared)"},
		{"too many epochs", base + "epochs: 1048577\n", ErrInvalid, "epochs", "to 1048576"},
		{"epochs not a number", base + "epochs: ninety\n", ErrInvalid, "epochs", "want an integer"},
		{"too large", base + "# " + strings.Repeat("x", MaxBytes) + "\n", ErrTooLarge, "", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.yaml))
			if !errors.Is(err, tc.want) {
				t.Fatalf("Parse error = %v, want %v", err, tc.want)
			}
			if !strings.Contains(err.Error(), tc.message) {
				t.Errorf("error %q does not mention %q", err, tc.message)
			}
			if tc.field == "" {
				return
			}
			var fe *FieldError
			if !errors.As(err, &fe) || fe.Field != tc.field {
				t.Errorf("error %v does not name field %q", err, tc.field)
			}
		})
	}
}

func TestAccumulationAllowsLargeInitBatch(t *testing.T) {
	s, err := Parse([]byte(base + "max_local_batch_size: 64\naccumulation: true\n"))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Limits().Validate(); err != nil {
		t.Errorf("Limits: %v", err)
	}
}

func TestDecodeReadsAtMostOneByteOverLimit(t *testing.T) {
	r := bytes.NewReader(bytes.Repeat([]byte("#"), 3*MaxBytes))
	if _, err := Decode(r); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("Decode = %v, want ErrTooLarge", err)
	}
	if left := r.Len(); left != 3*MaxBytes-(MaxBytes+1) {
		t.Errorf("Decode read %d bytes, want %d", 3*MaxBytes-left, MaxBytes+1)
	}
}

// FuzzParse checks that no input panics and that every accepted spec
// survives a marshal/parse round trip unchanged.
func FuzzParse(f *testing.F) {
	for _, name := range []string{"emulated.yaml", "command.yaml"} {
		b, err := os.ReadFile("testdata/" + name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(base + "min_replicas: -1\n"))
	f.Add([]byte("a: &a [*a]\n"))
	f.Add([]byte("name: j\ncommand: [x]\ninit_batch_size: 0x10\n"))
	f.Add([]byte(base + "topology: {required: rack}\n"))
	f.Add([]byte(base + "topology:\n  preferred: zone\n"))
	f.Add([]byte(base + "gpu_type: a100\ntopology: {required: rack}\n"))
	f.Add([]byte(base + "epochs: 90\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := Parse(b)
		if err != nil {
			return
		}
		if err := s.Validate(); err != nil {
			t.Fatalf("accepted spec fails Validate: %v", err)
		}
		out, err := yaml.Marshal(s)
		if err != nil {
			t.Fatalf("Marshal: %v", err)
		}
		again, err := Parse(out)
		if err != nil {
			t.Fatalf("re-parse of %q: %v", out, err)
		}
		if !reflect.DeepEqual(s, again) {
			t.Fatalf("round trip changed %+v into %+v", s, again)
		}
	})
}

func TestParseTopology(t *testing.T) {
	for yamlText, want := range map[string]optimizer.TopologyConstraint{
		base:                                    {},
		base + "topology: {required: rack}\n":   {Required: "rack"},
		base + "topology:\n  preferred: zone\n": {Preferred: "zone"},
		base + "topology: {}\n":                 {},
	} {
		s, err := Parse([]byte(yamlText))
		if err != nil {
			t.Fatalf("%q: %v", yamlText, err)
		}
		if s.Topology != want {
			t.Errorf("%q: topology %+v, want %+v", yamlText, s.Topology, want)
		}
	}
}

func TestParseEpochs(t *testing.T) {
	s, err := Parse([]byte(base + "epochs: 90\n"))
	if err != nil || s.Epochs != 90 {
		t.Fatalf("%+v, %v", s, err)
	}
	if s, err = Parse([]byte(base)); err != nil || s.Epochs != 0 {
		t.Fatalf("no epochs: %+v, %v", s, err)
	}
}

// TestParseUserSized checks that replicas and batch_size fix a job's
// configuration, and what they refuse.
func TestParseUserSized(t *testing.T) {
	type sized struct{ MinReplicas, MaxReplicas, MaxBatch, MinLocalBatch, MaxLocalBatch int }
	tests := []struct {
		name, extra string
		want        sized // zero: an error on field
		field       string
	}{
		{"replicas and batch", "replicas: 4\nbatch_size: 512\n",
			sized{MinReplicas: 4, MaxReplicas: 4, MaxBatch: 512, MinLocalBatch: 128, MaxLocalBatch: 128}, ""},
		{"one replica, large batch", "replicas: 1\nbatch_size: 256\n",
			sized{MinReplicas: 1, MaxReplicas: 1, MaxBatch: 256, MinLocalBatch: 256, MaxLocalBatch: 256}, ""},
		{"replicas only", "replicas: 2\n",
			sized{MinReplicas: 2, MaxReplicas: 2, MaxBatch: 128, MinLocalBatch: 1, MaxLocalBatch: 128}, ""},
		{"batch without replicas", "batch_size: 256\n", sized{}, "batch_size"},
		{"batch below init", "replicas: 2\nbatch_size: 64\n", sized{}, "batch_size"},
		{"batch not a multiple", "replicas: 3\nbatch_size: 256\n", sized{}, "batch_size"},
		{"replicas beside max_replicas", "replicas: 2\nmax_replicas: 4\n", sized{}, "replicas"},
		{"batch beside accumulation", "replicas: 2\nbatch_size: 256\naccumulation: true\n", sized{}, "batch_size"},
		{"negative replicas", "replicas: -1\n", sized{}, "replicas"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := Parse([]byte(base + tt.extra))
			if tt.want == (sized{}) {
				var fe *FieldError
				if !errors.As(err, &fe) || fe.Field != tt.field {
					t.Fatalf("got %+v, %v; want an error on %s", s, err, tt.field)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := sized{MinReplicas: s.MinReplicas, MaxReplicas: s.MaxReplicas, MaxBatch: s.MaxBatch,
				MinLocalBatch: s.MinLocalBatch, MaxLocalBatch: s.MaxLocalBatch}
			if got != tt.want {
				t.Fatalf("got %+v, want %+v", got, tt.want)
			}
			if err := s.Validate(); err != nil {
				t.Fatalf("the parsed spec does not validate again: %v", err)
			}
		})
	}
}

func TestParseGPUType(t *testing.T) {
	s, err := Parse([]byte(base + "gpu_type: a100\n"))
	if err != nil || s.GPUType != "a100" {
		t.Fatalf("%+v, %v", s, err)
	}
	if s, err = Parse([]byte(base)); err != nil || s.GPUType != "" {
		t.Fatalf("no gpu_type: %+v, %v", s, err)
	}
}
