package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"pollux/actors/node/worker"
	"pollux/actors/pb"
	"pollux/cluster"
)

func TestAgentRefusesBadCPUSlots(t *testing.T) {
	for _, args := range [][]string{
		{"agent", "--gpus", "2", "--cpu-slots", "2"},
		{"agent", "--cpu-slots", "-1"},
		{"agent", "--cpu-slots", fmt.Sprint(cluster.MaxGPUs + 1)},
		{"agent", "--cpus", "0"},
		{"agent", "--cpu-slots", "1", "--cpus", "0-"},
		{"agent", "--cpu-slots", "1", "--cpus", "1023"},
	} {
		if code := run(args); code != 2 {
			t.Errorf("pollux %v exited %d, want 2", args, code)
		}
	}
}

// TestAgentRunsARealJobOnCPUSlots: an agent offering two CPU slots runs
// the worker library's MLP example (Debian's python3 with torch) on both,
// as one job of two replicas, to completion: reports reach the job's
// owner through the node actor, rank 0 says done, both exit 0.
func TestAgentRunsARealJobOnCPUSlots(t *testing.T) {
	if testing.Short() {
		t.Skip("starts agent and worker processes")
	}
	if err := worker.CheckPython(context.Background()); err != nil {
		if os.Getenv("POLLUX_REQUIRE_TORCH") == "1" {
			t.Fatal(err)
		}
		t.Skipf("skipped: %v", err)
	}
	lib, err := worker.Install(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	c := newController(t)
	agent, ready := startAgent(t, "cpu1", "--cpu-slots", "2", "--grace", "5s", "--join", c.members.Addr(),
		"--allow-command", worker.Python+" "+lib.Dir+"/*.py **")
	if m := c.waitMember("cpu1", cluster.EventJoin); m.Meta.GPUs != 2 || !ready.CPUSlots {
		t.Fatalf("agent member %+v, ready %+v: want 2 CPU slots", m.Meta, ready)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close() // the rendezvous port of rank 0
	rj := c.withTokens(&pb.RunJob{
		Job: "digits-mlp", Incarnation: 1, Command: worker.Examples[0].Command(lib, "--report-every", "0.2"),
		Replicas: 2, WorldSize: 2, NumNodes: 1, MasterAddr: "127.0.0.1", MasterPort: uint32(port),
		InitBatch: 32, AtomicBatch: 16, Gain: 1, CheckpointDir: filepath.Join(c.root, "digits-mlp"), Owner: c.owner,
	})
	if ack := c.assign(ready.Actor, &pb.Assign{Generation: 1, Runs: []*pb.RunJob{rj}}); !ack.Ok {
		t.Fatal(ack.Error)
	}
	var reports, exits int
	done := false
	for !done || exits < 2 {
		switch m := c.next().(type) {
		case *pb.WorkerReport:
			reports++
			if m.Job != rj.Job || m.Node != "cpu1" || m.LocalBsz != 16 {
				t.Errorf("report %v", m)
			}
			done = done || m.Done && m.Rank == 0
		case *pb.WorkerExited:
			if m.ExitCode != 0 || m.Requested || m.Signal != "" {
				t.Fatalf("worker exit %v", m)
			}
			exits++
		}
	}
	t.Logf("%d reports, done", reports)
	if err := agent.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := agent.Wait(); err != nil {
		t.Errorf("agent exit: %v", err)
	}
}
