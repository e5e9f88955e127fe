package jsonout_test

import (
	"os"

	"pollux/internal/jsonout"
)

func ExampleWrite() {
	_ = jsonout.Write(os.Stdout, map[string]any{"jobs": 2, "policy": "pollux"})
	// Output:
	// {
	//   "jobs": 2,
	//   "policy": "pollux"
	// }
}
