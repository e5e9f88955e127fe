package jobspec

import (
	"errors"
	"strings"
	"testing"

	"pollux/optimizer/goodput"
)

// TestApplicationDefaults: a spec naming a built-in application takes
// its batch limits for the fields it leaves out; given fields win, and
// without the application's limits the batch size is still required.
func TestApplicationDefaults(t *testing.T) {
	apps := func(app string) (goodput.Limits, bool) {
		if app != "cifar10" {
			return goodput.Limits{}, false
		}
		return goodput.Limits{InitBatch: 128, MaxBatch: 4096, MinLocal: 32, MaxLocal: 512, Accumulation: true}, true
	}
	short := "name: c1\napplication: cifar10\nmin_replicas: 1\nmax_replicas: 8\n"
	tests := []struct {
		name  string
		spec  string
		apps  AppLimits
		want  Spec
		isErr error
	}{
		{"the application's limits", short, apps, Spec{Name: "c1", Application: "cifar10", MinReplicas: 1, MaxReplicas: 8,
			InitBatch: 128, MaxBatch: 4096, MinLocalBatch: 32, MaxLocalBatch: 512, Accumulation: true}, nil},
		{"given fields win", short + "init_batch_size: 256\naccumulation: false\n", apps, Spec{Name: "c1", Application: "cifar10",
			MinReplicas: 1, MaxReplicas: 8, InitBatch: 256, MaxBatch: 4096, MinLocalBatch: 32, MaxLocalBatch: 512}, nil},
		{"an application without limits", "name: c1\napplication: other\n", apps, Spec{}, ErrInvalid},
		{"no limits known", short, nil, Spec{}, ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseWith([]byte(tt.spec), tt.apps)
			if tt.isErr != nil {
				if !errors.Is(err, tt.isErr) {
					t.Fatalf("err %v, want %v", err, tt.isErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.Name != tt.want.Name || got.InitBatch != tt.want.InitBatch || got.MaxBatch != tt.want.MaxBatch ||
				got.MinLocalBatch != tt.want.MinLocalBatch || got.MaxLocalBatch != tt.want.MaxLocalBatch ||
				got.Accumulation != tt.want.Accumulation || got.MinReplicas != tt.want.MinReplicas || got.MaxReplicas != tt.want.MaxReplicas {
				t.Errorf("got  %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

// TestEveryErrorWithItsLine: a bad spec reports each of its mistakes,
// each with the line of its field.
func TestEveryErrorWithItsLine(t *testing.T) {
	spec := "name: Bad_Name\n" + // line 1: bad name
		"application: cifar10\n" +
		"min_replicas: 2.5\n" + // line 3: not an integer
		"colour: blue\n" + // line 4: unknown
		"init_batch_size: 128\n" +
		"max_batch_size: 64\n" + // line 6: below init_batch_size
		"epochs: -1\n" // line 7
	_, err := Parse([]byte(spec))
	if err == nil {
		t.Fatal("accepted")
	}
	for _, want := range []string{"name = \"Bad_Name\"", "(line 1)", `min_replicas = "2.5": want an integer (line 3)`,
		"colour = \"blue\": unknown field (line 4)", "max_batch_size = 64: must not be below init_batch_size (128) (line 6)",
		"epochs = -1: want 0 (not declared) to", "(line 7)"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
	if n := strings.Count(err.Error(), "jobspec: "); n != 5 {
		t.Errorf("%d errors, want 5:\n%v", n, err)
	}
	var fe *FieldError
	if !errors.As(err, &fe) || !errors.Is(err, ErrInvalid) {
		t.Errorf("the errors are not FieldErrors: %v", err)
	}
}
