package attack

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"pollux/actors/pb"
)

// forgedAssign sends a real Assign (protobuf, over protoactor's gRPC
// remote, as a leader would) to the agent's node actor, showing cert: a
// newer term and generation than any leader's and a run of a job that
// does not exist. Refused if the agent logged the refusal of the
// sender's connection (naming the address it came from) and, as the
// observer checks, no worker started.
func forgedAssign(cert func(*target) *tls.Certificate) func(context.Context, *target) (string, bool) {
	return func(ctx context.Context, t *target) (string, bool) {
		var mu sync.Mutex
		var locals []string
		dial := func(ctx context.Context, addr string) (net.Conn, error) {
			c, err := (&net.Dialer{Timeout: 3 * time.Second}).DialContext(ctx, "tcp", addr)
			if err == nil {
				mu.Lock()
				locals = append(locals, c.LocalAddr().String())
				mu.Unlock()
			}
			return c, err
		}
		sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return slog.New(slog.DiscardHandler) }))
		rem := remote.NewRemote(sys, remote.Configure("127.0.0.1", 0,
			remote.WithDialOptions(grpc.WithTransportCredentials(credentials.NewTLS(t.tlsConfig(cert(t), "h2"))), grpc.WithContextDialer(dial)),
			func(c *remote.Config) { c.MaxRetryCount = 1 }))
		rem.Start()
		// A graceful stop closes its gRPC connections before the next case
		// starts a remote (protoactor sets gRPC's process-wide logger).
		defer rem.Shutdown(true)
		msg := &pb.Assign{Generation: 1 << 40, Term: 1 << 40, ClusterId: "forged", CheckpointRoot: t.root,
			Runs: []*pb.RunJob{{Job: "attack-forged-assign", Incarnation: 1, Application: "ncf", Replicas: 1, WorldSize: 1, NumNodes: 1,
				InitBatch: 64, AtomicBatch: 64}}}
		offset := t.logSize(t.agent)
		sys.Root.Send(actor.NewPID(t.agent.Actor, pb.NodeActor), msg)
		deadline := time.Now().Add(10 * time.Second)
		for {
			mu.Lock()
			tried := append([]string(nil), locals...)
			mu.Unlock()
			for _, local := range tried {
				if line, ok := t.logLineAfter(t.agent, offset, "refused connection", "channel=actor", "peer="+local); ok {
					return fmt.Sprintf("Assign (term %d, generation %d, job attack-forged-assign) sent from %s; %s/%s logged: %s",
						msg.Term, msg.Generation, local, t.agent.Role, t.agent.ID, logMsg(line)), true
				}
			}
			if time.Now().After(deadline) {
				return fmt.Sprintf("Assign sent from %s; %s/%s logged no refusal of the connection", strings.Join(tried, ", "),
					t.agent.Role, t.agent.ID), false
			}
			select {
			case <-ctx.Done():
				return ctx.Err().Error(), false
			case <-time.After(200 * time.Millisecond):
			}
		}
	}
}
