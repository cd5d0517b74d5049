// Package proto holds the protocol buffer definitions of the RPCs between
// nodes and their generated Go code, committed beside them. Regenerate
// with `go generate ./proto/` (protoc 3.21, protoc-gen-go v1.36.12,
// protoc-gen-go-grpc v1.6.0); CI checks that doing so changes nothing.
package proto

//go:generate protoc --go_out=. --go_opt=paths=source_relative --go-grpc_out=. --go-grpc_opt=paths=source_relative ledger.proto mesh.proto
