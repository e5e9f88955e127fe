package cpuset

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	tests := []struct {
		in   string
		want []int
		err  string // a part of the error; "" when valid
	}{
		{"0", []int{0}, ""},
		{"0-3,6", []int{0, 1, 2, 3, 6}, ""},
		{" 6, 0-1 ,1", []int{0, 1, 6}, ""},
		{"2-2", []int{2}, ""},
		{"1023", []int{1023}, ""},
		{"", nil, "empty"},
		{"  ", nil, "empty"},
		{"0,", nil, `"" is not a CPU id`},
		{",0", nil, `"" is not a CPU id`},
		{"a", nil, `"a" is not a CPU id`},
		{"-1", nil, `"" is not a CPU id`},
		{"1-", nil, `"" is not a CPU id`},
		{"3-1", nil, `range "3-1" runs backwards`},
		{"0-1-2", nil, `"1-2" is not a CPU id`},
		{"+1", nil, `"+1" is not a CPU id`},
		{"1024", nil, "CPU 1024 above 1023"},
		{"99999999999999999999", nil, "above 1023"},
		{"0x1", nil, `"0x1" is not a CPU id`},
	}
	for _, tc := range tests {
		got, err := Parse(tc.in)
		switch {
		case tc.err == "" && (err != nil || !reflect.DeepEqual(got, tc.want)):
			t.Errorf("Parse(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		case tc.err != "" && (err == nil || !errors.Is(err, ErrSyntax) || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("Parse(%q) = %v, %v; want an ErrSyntax saying %q", tc.in, got, err, tc.err)
		}
	}
}

func TestFormat(t *testing.T) {
	tests := []struct {
		cpus []int
		want string
	}{
		{nil, ""},
		{[]int{0}, "0"},
		{[]int{0, 1}, "0,1"},
		{[]int{0, 1, 2, 3, 6}, "0-3,6"},
		{[]int{1, 3, 4, 5, 7, 8}, "1,3-5,7,8"},
	}
	for _, tc := range tests {
		if got := Format(tc.cpus); got != tc.want {
			t.Errorf("Format(%v) = %q, want %q", tc.cpus, got, tc.want)
		}
	}
}

func TestSplit(t *testing.T) {
	tests := []struct {
		cpus []int
		n    int
		want [][]int
	}{
		{[]int{0, 1}, 2, [][]int{{0}, {1}}},
		{[]int{0, 1, 2, 3}, 2, [][]int{{0, 1}, {2, 3}}},
		{[]int{0, 1, 2, 3, 4}, 2, [][]int{{0, 1}, {2, 3, 4}}},
		{[]int{2, 5, 7}, 3, [][]int{{2}, {5}, {7}}},
		{[]int{0, 1}, 1, [][]int{{0, 1}}},
		{[]int{0, 1}, 3, [][]int{{0}, {1}, {0}}},
	}
	for _, tc := range tests {
		if got := Split(tc.cpus, tc.n); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("Split(%v, %d) = %v, want %v", tc.cpus, tc.n, got, tc.want)
		}
	}
}

func TestWithin(t *testing.T) {
	if err := Within([]int{1, 3}, []int{0, 1, 2, 3}); err != nil {
		t.Errorf("a subset refused: %v", err)
	}
	err := Within([]int{0, 2, 3, 4}, []int{0, 1})
	if !errors.Is(err, ErrNotAllowed) || !strings.Contains(err.Error(), "cores not allowed: 2-4 (this process may use 0,1)") {
		t.Errorf("%v, want ErrNotAllowed naming 2-4", err)
	}
}

func TestAllowed(t *testing.T) {
	cpus, err := Allowed()
	if err != nil {
		t.Fatal(err)
	}
	if len(cpus) == 0 || !slices.IsSorted(cpus) {
		t.Fatalf("affinity %v: want a sorted, non-empty list", cpus)
	}
	if back, err := Parse(Format(cpus)); err != nil || !slices.Equal(back, cpus) {
		t.Errorf("affinity %v read back as %v, %v", cpus, back, err)
	}
}

// FuzzParse: any input is parsed or refused with ErrSyntax, never a
// panic; what parses is sorted, distinct and in range, and reads back
// the same after Format.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"0", "0-3,6", "3-1", "", ",", "1023", "0-1023", "1,1,1", "1-2-3", " 4 , 5 "} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		cpus, err := Parse(s)
		if err != nil {
			if !errors.Is(err, ErrSyntax) {
				t.Fatalf("Parse(%q): %v does not wrap ErrSyntax", s, err)
			}
			return
		}
		if len(cpus) == 0 || !slices.IsSorted(cpus) || len(slices.Compact(slices.Clone(cpus))) != len(cpus) || cpus[0] < 0 || cpus[len(cpus)-1] > MaxCPU {
			t.Fatalf("Parse(%q) = %v", s, cpus)
		}
		back, err := Parse(Format(cpus))
		if err != nil || !slices.Equal(back, cpus) {
			t.Fatalf("Parse(%q) = %v, formatted %q, read back %v, %v", s, cpus, Format(cpus), back, err)
		}
	})
}

func ExampleParse() {
	cpus, err := Parse("0-3,6")
	fmt.Println(cpus, err)
	fmt.Println(Format(cpus))
	fmt.Println(Split(cpus, 2))
	// Output:
	// [0 1 2 3 6] <nil>
	// 0-3,6
	// [[0 1] [2 3 6]]
}
