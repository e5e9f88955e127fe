package attack

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"pollux/actors/pb"
)

// forgerCerts are the certificates forged Assigns are sent with, by the
// name of their sender (forgedAssign's argument).
var forgerCerts = map[string]func(*target) *tls.Certificate{
	"agent":       otherAgentCert,
	"client":      clientCert,
	"self-signed": selfSigned,
}

// forger is the one protoactor remote the forged Assigns are sent from:
// it shows the certificate cert holds in every TLS handshake, and
// records the local addresses of the connections it opens. One remote
// serves every case because protoactor's Remote.Start sets gRPC's
// process-wide logger, which gRPC's goroutines read: a second remote
// started in the process after the first one's goroutines ran is a data
// race.
type forger struct {
	sys    *actor.ActorSystem
	rem    *remote.Remote
	cert   atomic.Pointer[tls.Certificate]
	mu     sync.Mutex
	locals []string
	ended  map[string]int // endpoints terminated, by address
}

// endedAt is how many of f's endpoints to address have terminated.
func (f *forger) endedAt(address string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.ended[address]
}

// tried are the local addresses of the connections f has opened.
func (f *forger) tried() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.locals...)
}

// startForger starts the forger.
func (t *target) startForger() {
	f := &forger{ended: map[string]int{}}
	dial := func(ctx context.Context, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{Timeout: 3 * time.Second}).DialContext(ctx, "tcp", addr)
		if err == nil {
			f.mu.Lock()
			f.locals = append(f.locals, c.LocalAddr().String())
			f.mu.Unlock()
		}
		return c, err
	}
	cfg := t.tlsConfig(nil, "h2")
	cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return f.cert.Load(), nil }
	f.sys = actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return slog.New(slog.DiscardHandler) }))
	f.rem = remote.NewRemote(f.sys, remote.Configure("127.0.0.1", 0,
		remote.WithDialOptions(grpc.WithTransportCredentials(credentials.NewTLS(cfg)), grpc.WithContextDialer(dial)),
		func(c *remote.Config) { c.MaxRetryCount = 1 }))
	f.rem.Start()
	// Subscribed after the remote, so told after its endpoint manager
	// dropped the endpoint: the next send to the address dials anew.
	f.sys.EventStream.Subscribe(func(evt any) {
		if e, ok := evt.(*remote.EndpointTerminatedEvent); ok {
			f.mu.Lock()
			f.ended[e.Address]++
			f.mu.Unlock()
		}
	})
	t.forger = f
}

// awaitEnded waits, up to 10 s, until more than ended of the forger's
// endpoints to the agent have terminated.
func (t *target) awaitEnded(ctx context.Context, ended int) {
	deadline := time.Now().Add(10 * time.Second)
	for t.forger.endedAt(t.agent.Actor) <= ended && time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// stopForger stops the forger.
func (t *target) stopForger() { t.forger.rem.Shutdown(true) }

// forgedAssign sends a real Assign (protobuf, over protoactor's gRPC
// remote, as a leader would) to the agent's node actor, showing the
// certificate of sender (a key of forgerCerts): a newer term and
// generation than any leader's and a run of a job that does not exist.
// Refused if the agent logged the refusal of a connection the forger
// opened for it (naming the address it came from) and, as the observer
// checks, no worker started.
func forgedAssign(sender string) func(context.Context, *target) (string, bool) {
	return func(ctx context.Context, t *target) (string, bool) {
		f := t.forger
		f.cert.Store(forgerCerts[sender](t))
		sys, before, ended := f.sys, len(f.tried()), f.endedAt(t.agent.Actor)
		msg := &pb.Assign{Generation: 1 << 40, Term: 1 << 40, ClusterId: "forged", CheckpointRoot: t.root,
			Runs: []*pb.RunJob{{Job: "attack-forged-assign", Incarnation: 1, Application: "ncf", Replicas: 1, WorldSize: 1, NumNodes: 1,
				InitBatch: 64, AtomicBatch: 64}}}
		offset := t.logSize(t.agent)
		sys.Root.Send(actor.NewPID(t.agent.Actor, pb.NodeActor), msg)
		deadline := time.Now().Add(10 * time.Second)
		for {
			tried := f.tried()[before:]
			for _, local := range tried {
				if line, ok := t.logLineAfter(t.agent, offset, "refused connection", "channel=actor", "peer="+local); ok {
					// The next case's Assign must open a connection of
					// its own, with its own certificate.
					t.awaitEnded(ctx, ended)
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
