package pb

// The names actors are spawned under. A remote peer addresses an actor as
// actor.NewPID(address, name), so these names are part of the wire contract
// as much as the messages are.
const (
	// NodeActor is every agent's node actor.
	NodeActor = "node"
	// JobHostActor is every server's job host, which spawns job actors.
	JobHostActor = "jobhost"
	// AllocatorActor is every server's allocator actor.
	AllocatorActor = "allocator"
	// LogsActor is every agent's logs actor, which answers LogRead.
	LogsActor = "logs"
)
