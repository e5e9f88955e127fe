package workerlog

import (
	"errors"
	"strings"

	"github.com/asynkron/protoactor-go/actor"

	"pollux/actors/pb"
)

// Props is the logs actor of an agent named node (spawned as
// pb.LogsActor): it answers every *pb.LogRead with a *pb.LogChunk from
// s. The actor channel it is reached on admits only the cluster's
// certified members.
func Props(node string, s *Store) *actor.Props {
	return actor.PropsFromFunc(func(ctx actor.Context) {
		if m, ok := ctx.Message().(*pb.LogRead); ok {
			ctx.Respond(Answer(node, s, m))
		}
	})
}

// Answer is the logs actor's answer to m.
func Answer(node string, s *Store, m *pb.LogRead) *pb.LogChunk {
	out := &pb.LogChunk{Node: node}
	k := Key{Job: m.GetJob(), Incarnation: m.GetIncarnation(), Rank: int(m.GetRank())}
	c, err := s.Read(k, m.GetOffset(), int(m.GetTail()), int(m.GetMaxBytes()))
	switch {
	case errors.Is(err, ErrNoLog):
		return out
	case err != nil:
		out.Error = err.Error()
		return out
	}
	out.Found, out.Incarnation, out.Next, out.Skipped, out.Closed = true, c.Incarnation, c.Next, c.Skipped, c.Closed
	for _, l := range c.Lines {
		var t int64
		if !l.Time.IsZero() {
			t = l.Time.UnixNano()
		}
		// Protobuf strings are UTF-8; a worker's bytes need not be.
		out.Lines = append(out.Lines, &pb.LogLine{TimeUnixNano: t, Text: strings.ToValidUTF8(l.Text, "\uFFFD")})
	}
	return out
}
