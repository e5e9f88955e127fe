package main

import (
	"bufio"
	"bytes"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"pollux/testbed/launch"
)

// TestCheckpointRootIsSetOnce: a cluster bootstrapped with a checkpoint
// root keeps it; its server restarted with another root refuses to run,
// with a message naming both; restarted with the same one, it runs.
func TestCheckpointRootIsSetOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("starts server processes")
	}
	dir := t.TempDir()
	// Every port pinned: a listener on "any free port" started before the
	// HTTP one could otherwise be given the HTTP port between two starts.
	ports, err := launch.FreePorts(4)
	if err != nil {
		t.Fatal(err)
	}
	raftAddr, httpAddr := fmt.Sprintf("127.0.0.1:%d", ports[0]), fmt.Sprintf("127.0.0.1:%d", ports[1])
	rootA, rootB := filepath.Join(dir, "ckpt-a"), filepath.Join(dir, "ckpt-b")
	server := func(root string) (*exec.Cmd, *bytes.Buffer) {
		args := append(slices.Clone(selfExec), "server", "--id", "ts0", "--data-dir", filepath.Join(dir, "ts0"),
			"--raft", raftAddr, "--http", httpAddr, "--peers", "ts0="+raftAddr+"="+httpAddr, "--bootstrap",
			"--checkpoint-root", root, "--log-level", "info",
			"--gossip-port", fmt.Sprint(ports[2]), "--actor-port", fmt.Sprint(ports[3]))
		args = append(args, testBundle().Flags("ts0")...)
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Env = append(os.Environ(), "POLLUX_TEST_PROCESS=1")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if cmd.ProcessState == nil {
				_ = cmd.Process.Kill()
				_ = cmd.Wait()
			}
		})
		go func() {
			sc := bufio.NewScanner(out)
			for sc.Scan() {
			}
		}()
		return cmd, &stderr
	}
	hc, err := testBundle().HTTPClient(5 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	// The first start sets the root.
	first, _ := server(rootA)
	token := bootstrapTokens(t, httpAddr)
	deadline := time.Now().Add(30 * time.Second)
	for {
		req, _ := http.NewRequest(http.MethodPost, "https://"+httpAddr+"/v1/jobs", strings.NewReader("name: j\napplication: cifar10\ninit_batch_size: 128\n"))
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := hc.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusCreated {
				break // no checkpoint_dir: accepted, so the root is set
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("the bootstrapped server never took a job without a checkpoint directory")
		}
		time.Sleep(100 * time.Millisecond)
	}
	_ = first.Process.Signal(syscall.SIGTERM)
	_ = first.Wait()

	// Another root: refused.
	second, stderr := server(rootB)
	done := make(chan error, 1)
	go func() { done <- second.Wait() }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(stderr.String(), rootA) || !strings.Contains(stderr.String(), rootB) {
			t.Fatalf("restart with another root: %v\n%s", err, stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a server with another checkpoint root kept running")
	}

	// The same root: runs. A port another test's process took meanwhile
	// is not this test's question: that start is tried again.
	for attempt := 1; ; attempt++ {
		third, stderr := server(rootA)
		exited := make(chan error, 1)
		go func() { exited <- third.Wait() }()
		select {
		case err := <-exited:
			if attempt < 3 && strings.Contains(stderr.String(), "address already in use") {
				t.Logf("start %d found a port taken; again: %s", attempt, stderr.String())
				time.Sleep(time.Second)
				continue
			}
			t.Fatalf("the server restarted with its own root exited: %v\n%s", err, stderr.String())
		case <-time.After(3 * time.Second):
		}
		_ = third.Process.Signal(syscall.SIGTERM)
		if err := <-exited; err != nil {
			t.Errorf("stopping: %v\n%s", err, stderr.String())
		}
		return
	}
}
