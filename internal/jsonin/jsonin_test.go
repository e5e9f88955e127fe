package jsonin_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"pollux/internal/jsonin"
)

type point struct{ X, Y int }

func TestDecode(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    point
		wantErr string // "" for none, "trailing" for ErrTrailing
	}{
		{in: `{"X":1,"Y":2}`, want: point{1, 2}},
		{in: " {\"X\":1}\n", want: point{X: 1}},
		{in: `{"X":1,"Z":2}`, wantErr: `unknown field "Z"`},
		{in: `{"X":1} {"X":2}`, wantErr: "trailing"},
		{in: `{"X":1}]`, wantErr: "trailing"},
		{in: `{"X":1}}`, wantErr: "trailing"},
		{in: `{"X":1} x`, wantErr: "trailing"},
		{in: ``, wantErr: "EOF"},
		{in: `{"X":"a"}`, wantErr: "cannot unmarshal"},
	} {
		var p point
		err := jsonin.Decode([]byte(tc.in), &p)
		switch {
		case tc.wantErr == "" && err != nil:
			t.Errorf("%q: %v", tc.in, err)
		case tc.wantErr == "" && p != tc.want:
			t.Errorf("%q: got %+v, want %+v", tc.in, p, tc.want)
		case tc.wantErr == "trailing" && !errors.Is(err, jsonin.ErrTrailing):
			t.Errorf("%q: err %v, want ErrTrailing", tc.in, err)
		case tc.wantErr != "" && tc.wantErr != "trailing" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("%q: err %v, want one saying %q", tc.in, err, tc.wantErr)
		}
	}
}

func FuzzDecode(f *testing.F) {
	f.Add([]byte(`{"X":1,"Y":2}`))
	f.Add([]byte(`{"X":1} {}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var p point
		if jsonin.Decode(b, &p) == nil {
			var again point
			if err := jsonin.Decode(b, &again); err != nil || again != p {
				t.Fatalf("decoding %q twice: %+v then %+v, %v", b, p, again, err)
			}
		}
	})
}

func ExampleDecode() {
	var p point
	fmt.Println(jsonin.Decode([]byte(`{"X":1,"Y":2}`), &p), p)
	fmt.Println(jsonin.Decode([]byte(`{"X":1}{"X":2}`), &p))
	// Output:
	// <nil> {1 2}
	// trailing data after the JSON value
}
