package suite

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"

	"pollux/internal/jsonout"
	"pollux/testbed/chaos/labloss"
)

// LabLoss runs the lab-loss scenario and prints its result; it fails
// unless the run passed. o.Logger must be set.
func LabLoss(ctx context.Context, o labloss.Options, jsonOut bool, w io.Writer) error {
	res, err := labloss.Run(ctx, o)
	if err != nil {
		if res != nil && res.Dir != "" {
			o.Logger.Error("chaos: lab-loss: the run is kept", "dir", res.Dir)
		}
		return fmt.Errorf("%w: %w", ErrFailed, err)
	}
	if res.Dir != "" {
		o.Logger.Warn("chaos: lab-loss: the run is kept", "dir", res.Dir)
	}
	return PrintLabLoss(res, jsonOut, w)
}

// PrintLabLoss prints a lab-loss result (JSON, or a table) and fails
// unless the run passed.
func PrintLabLoss(res *labloss.Result, jsonOut bool, w io.Writer) error {
	if jsonOut {
		if err := jsonout.Write(w, res); err != nil {
			return err
		}
	} else {
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "scenario\tlost lab\tleases at loss\tlent/borrowed at loss\tlease held max / bound (s)\tTTL (s)\tother labs' jobs\tcompleted\tlost\tpeer jobs resumed (of)\tlost lab's jobs\tcompleted\tresumed (of)\tviolations\ttook (s)\t")
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d/%d\t%.2f / %.2f\t%.0f\t%d\t%d\t%d\t%d (%d)\t%d\t%d\t%d (%d)\t%d\t%.0f\t\n", res.Scenario, res.LostLab, res.LeasesAtLoss,
			res.LostLabLentAtLoss, res.LostLabBorrowedAtLoss, res.LeaseHeldMaxS, res.LeaseExpiryBoundS, res.LeaseTTLS, res.JobsSubmitted, res.JobsCompleted,
			res.LostJobs, res.PeerJobsResumed, res.PeerJobsToResume, res.LostLabJobs, res.LostLabCompleted, res.LostLabResumed, res.LostLabToResume,
			res.Violations, res.ElapsedS)
		if err := tw.Flush(); err != nil {
			return err
		}
		if res.Dir != "" {
			fmt.Fprintln(w, "kept:", res.Dir)
		}
		for _, f := range res.Failures {
			fmt.Fprintln(w, "FAIL:", f)
		}
	}
	if !res.Pass() {
		return fmt.Errorf("%w: lab-loss: %d failures (%d lost jobs, %d violations)", ErrFailed, len(res.Failures), res.LostJobs, res.Violations)
	}
	return nil
}
