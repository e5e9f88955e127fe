// Package pb holds the protobuf messages actors exchange across processes
// (protoactor-go sends only protobuf messages remotely). messages.pb.go and
// lease.pb.go are generated from messages.proto and lease.proto by `make
// proto` and committed, so builds need no protoc.
package pb
