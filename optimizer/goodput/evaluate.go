package goodput

import (
	"fmt"
	"math"
	"sort"
	"sync"
)

// StepTimeErrors returns the mean and the largest relative error of the
// step time p predicts (one synchronised step) against each point's
// measured step time.
func StepTimeErrors(p Params, points []ProfilePoint) (mean, max float64) {
	if len(points) == 0 {
		return 0, 0
	}
	for _, q := range points {
		e := math.Abs(p.SyncTimeRacks(q.Racks, q.Nodes, q.Replicas, float64(q.LocalBatch))-q.StepTime) / q.StepTime
		mean += e
		max = math.Max(max, e)
	}
	return mean / float64(len(points)), max
}

// LeaveOneGroupOut measures how well the fit predicts placements it has not
// seen: for each distinct group label, it fits on every point of the other
// groups and predicts the group's points. It returns the mean relative
// step-time error over all predicted points. groups[i] labels points[i].
// The fits run on up to workers goroutines; the result does not depend on
// their number.
func LeaveOneGroupOut(points []ProfilePoint, groups []string, workers int) (float64, error) {
	if len(groups) != len(points) {
		return 0, fmt.Errorf("%w: %d group labels for %d points", ErrBadPoint, len(groups), len(points))
	}
	byGroup := map[string][]int{}
	for i, g := range groups {
		byGroup[g] = append(byGroup[g], i)
	}
	if len(byGroup) < 2 {
		return 0, fmt.Errorf("%w: leave-one-out needs at least two groups", ErrNoPoints)
	}
	labels := make([]string, 0, len(byGroup))
	for g := range byGroup {
		labels = append(labels, g)
	}
	sort.Strings(labels)
	sums := make([]float64, len(labels))
	errs := make([]error, len(labels))
	workers = max(1, min(workers, len(labels)))
	var wg sync.WaitGroup
	next := make(chan int)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for gi := range next {
				sums[gi], errs[gi] = predictGroup(points, groups, labels[gi], byGroup[labels[gi]])
			}
		}()
	}
	for gi := range labels {
		next <- gi
	}
	close(next)
	wg.Wait()
	total := 0.0
	for gi := range labels {
		if errs[gi] != nil {
			return 0, fmt.Errorf("leaving out %s: %w", labels[gi], errs[gi])
		}
		total += sums[gi]
	}
	return total / float64(len(points)), nil
}

// predictGroup fits on every point outside group g and returns the summed
// relative error over the group's points.
func predictGroup(points []ProfilePoint, groups []string, g string, members []int) (float64, error) {
	train := make([]ProfilePoint, 0, len(points)-len(members))
	for i, p := range points {
		if groups[i] != g {
			train = append(train, p)
		}
	}
	p, err := Fit(train)
	if err != nil {
		return 0, err
	}
	test := make([]ProfilePoint, len(members))
	for j, i := range members {
		test[j] = points[i]
	}
	mean, _ := StepTimeErrors(p, test)
	return mean * float64(len(test)), nil
}
