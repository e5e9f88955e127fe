package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"pollux/actors/server/api"
	"pollux/actors/server/api/client"
)

// A client submits a job and lists the cluster's jobs.
func Example() {
	srv, _ := newServer() // the real API over an in-memory cluster
	defer srv.Close()

	c, err := client.New(client.Config{Servers: []string{srv.URL}, Token: adminSecret})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	ctx := context.Background()
	id, err := c.Submit(ctx, []byte("name: resnet\napplication: cifar10\ninit_batch_size: 128\n"))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("submitted", id)
	jobs, err := c.Jobs(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, j := range jobs {
		fmt.Printf("%s %s %s by %s\n", j.ID, j.State, j.App, j.Submitter)
	}
	// Output:
	// submitted resnet
	// resnet pending cifar10 by bootstrap
}

// The client tries its servers in order: the first is down, the second
// answers.
func ExampleClient_Status() {
	srv, _ := newServer()
	defer srv.Close()
	down := "http://127.0.0.1:1" // nothing listens there

	c, err := client.New(client.Config{Servers: []string{down, srv.URL}, Token: readSecret})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	s, err := c.Status(context.Background())
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("leader %s, %d GPUs, %d used\n", s.Leader, s.GPUs, s.GPUsUsed)
	// Output:
	// leader s1, 4 GPUs, 0 used
}

// A refusal is an APIError, final: no other server is asked.
func ExampleAPIError() {
	srv, _ := newServer()
	defer srv.Close()

	c, err := client.New(client.Config{Servers: []string{srv.URL, srv.URL}, Token: readSecret})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	_, err = c.CreateToken(context.Background(), api.NewToken{Name: "alice", Role: "submit"})
	var refused *client.APIError
	if errors.As(err, &refused) {
		fmt.Println(refused.StatusCode)
	}
	// Output:
	// 403
}

// Raw keeps each answer as the server sent it, for a tool that prints
// the API's JSON unchanged.
func ExampleClient_Raw() {
	srv, _ := newServer()
	defer srv.Close()

	c, err := client.New(client.Config{Servers: []string{srv.URL}, Token: adminSecret})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	var raw json.RawMessage
	self, err := c.Raw(&raw).Self(context.Background())
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(self.Role)
	os.Stdout.Write(raw)
	// Output:
	// admin
	// {"accessor":"acc-admin","name":"bootstrap","role":"admin","create_time":1700000000,"revoked":false,"bootstrap":true}
}

// FromEnv reads the server list, CA, token and client certificate from
// the environment, as the pollux CLI does.
func ExampleFromEnv() {
	os.Setenv(client.EnvServers, "10.0.0.1:8080, 10.0.0.2:8080")
	defer os.Unsetenv(client.EnvServers)

	fmt.Println(client.FromEnv().Servers)
	// Output:
	// [10.0.0.1:8080 10.0.0.2:8080]
}

// WriteJobs prints jobs as the table of pollux jobs.
func ExampleWriteJobs() {
	jobs := []api.Job{
		{ID: "resnet", State: "running", App: "cifar10", GPUs: 4, Nodes: 1, Epoch: 12, Epochs: 90, Incarnation: 2, Submitter: "alice"},
		{ID: "bert", State: "pending", App: "bert"},
	}
	if err := client.WriteJobs(os.Stdout, jobs); err != nil {
		fmt.Println(err)
	}
	// Output:
	// JOB     STATE    APP      GPUS  NODES  EPOCH  RESTARTS  INCARNATION  SUBMITTER
	// resnet  running  cifar10  4     1      12/90  0         2            alice
	// bert    pending  bert     0     0      0      0         0            -
}

// WritePeers prints the Raft servers as pollux operator raft list-peers
// does, and warns when one rack holds a majority of the voters.
func ExampleWritePeers() {
	peers := []api.Peer{
		{ID: "s1", Address: "10.0.0.1:7000", Voter: true, Leader: true, Alive: true, Rack: "r1"},
		{ID: "s2", Address: "10.0.0.2:7000", Voter: true, Alive: true, Rack: "r1"},
		{ID: "s3", Address: "10.0.0.3:7000", Voter: true, Alive: true, Rack: "r2"},
	}
	if err := client.WritePeers(os.Stdout, peers); err != nil {
		fmt.Println(err)
	}
	// Output:
	// ID  ADDRESS        VOTER  LEADER  ALIVE  RACK
	// s1  10.0.0.1:7000  true   true    true   r1
	// s2  10.0.0.2:7000  true   false   true   r1
	// s3  10.0.0.3:7000  true   false   true   r2
	// warning: a majority of the voters (s1, s2) share rack r1: losing that rack loses the quorum; start servers in other racks (pollux server --topology rack=R)
}
