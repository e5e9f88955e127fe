package client

import (
	"testing"

	"pollux/actors/server/api"
)

// The EPOCH column of pollux jobs shows the epochs a job declared.
func TestEpochColumn(t *testing.T) {
	for _, c := range []struct {
		job  api.Job
		want string
	}{
		{api.Job{Epoch: 30, Epochs: 90}, "30/90"},
		{api.Job{Epoch: 7}, "7"},
		{api.Job{}, "0"},
	} {
		if got := epochOf(c.job); got != c.want {
			t.Errorf("epochOf(%+v) = %q, want %q", c.job, got, c.want)
		}
	}
}
