package check

import (
	"fmt"
	"testing"

	"pollux/testbed/chaos/history"
	"pollux/testbed/chaos/record"
)

// bigRun is a correct run of jobs jobs, one after another on one GPU each
// of 4 nodes, each checkpointing ckpts times, with a linearizable read of
// every job and a status read every 100 ms (the driver reads every
// 250 ms): the size of a long scenario.
func bigRun(jobs, ckpts int) Input {
	h := &hist{}
	h.ev(0, history.Event{Kind: history.RunBegin, Scenario: "bench"})
	var ws []record.Worker
	const life = 1000 // ms a job runs
	end := 0
	for j := range jobs {
		name := fmt.Sprintf("job-%03d", j)
		at := 10 + j*life/4
		h.submit(at, at+5, name, history.OK, 201)
		w := start(fmt.Sprintf("n%d", j%4), at+10, name, 1, 1000+j, (j/4)%4)
		w.restore(at+20, at+21, 0, 0, 0)
		for c := range ckpts {
			t := at + 30 + c*(life-100)/ckpts
			w.ckpt(t, t+1, c+1, float64(100*(c+1)), false)
		}
		w.done(at+life-50, ckpts, float64(100*ckpts)).exit(at + life - 40)
		ws = append(ws, w.w)
		end = at + life
	}
	gen := uint64(0)
	for t := 0; t < end+200; t += 100 {
		var view []history.Job
		for j := range jobs {
			at := 10 + j*life/4
			switch {
			case t < at+5:
			case t+10 >= at+life:
				view = append(view, jv(fmt.Sprintf("job-%03d", j), "completed", 1, ckpts, float64(100*ckpts)))
			default:
				view = append(view, jv(fmt.Sprintf("job-%03d", j), "running", 1, 0, 0))
			}
		}
		if t >= 15 { // after the first acknowledgement
			h.read(t+1, t+10, view...)
		}
		gen++
		h.op(t+2, t+9, history.Status, "", history.OK, 200, func(o *history.Op) {
			o.Status = &history.StatusView{Serving: "s0", Leader: "s0", Term: 1, Generation: gen}
		})
	}
	h.ev(end+300, history.Event{Kind: history.RunEnd})
	return Input{History: h.sorted(), Workers: ws}
}

func BenchmarkCheck(b *testing.B) {
	in := bigRun(100, 20)
	res, err := Check(in, Options{})
	if err != nil {
		b.Fatal(err)
	}
	if fs := res.Failures(); len(fs) != 0 || res.Outcomes.Completed != 100 {
		b.Fatalf("the big correct run fails (%d failures, first %.200q), outcomes %d completed", len(fs), fs, res.Outcomes.Completed)
	}
	b.ReportMetric(float64(len(in.History)), "lines")
	b.ResetTimer()
	for b.Loop() {
		if _, err := Check(in, Options{}); err != nil {
			b.Fatal(err)
		}
	}
}
