package badinput_test

import (
	"errors"
	"fmt"
	"io"
	"testing"

	"pollux/testbed/badinput"
)

func TestMark(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		bad  bool
		msg  string
	}{
		{"nil", nil, false, ""},
		{"plain", io.EOF, false, "EOF"},
		{"marked", badinput.Mark(io.EOF), true, "EOF"},
		{"marked then wrapped", fmt.Errorf("sim: %w", badinput.Mark(io.EOF)), true, "sim: EOF"},
		{"errorf", badinput.Errorf("sim: --parallel %d: want at least 1", 0), true, "sim: --parallel 0: want at least 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := badinput.Is(tc.err); got != tc.bad {
				t.Errorf("Is = %v, want %v", got, tc.bad)
			}
			if tc.err != nil && tc.err.Error() != tc.msg {
				t.Errorf("message %q, want %q", tc.err.Error(), tc.msg)
			}
		})
	}
	if badinput.Mark(nil) != nil {
		t.Error("Mark(nil) is not nil")
	}
	if !errors.Is(badinput.Mark(io.EOF), io.EOF) {
		t.Error("a marked error does not unwrap to its cause")
	}
}

func ExampleMark() {
	err := badinput.Mark(errors.New("sim: --racks 0: want at least 1 rack"))
	fmt.Println(badinput.Is(err), err)
	// Output: true sim: --racks 0: want at least 1 rack
}
