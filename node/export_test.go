package node

// RPCAddr is the address of the node's gRPC listener, for tests that call
// its services as a peer would; "" without node.rpc.
func (n *Node) RPCAddr() string { return n.rpcAddr() }

// HoldsStored reports whether the node holds tenant's stored response
// id, and whether as the copy of a peer's.
func (n *Node) HoldsStored(tenant, id string) (held, copy bool) {
	r := n.responses.peek(tenant, id)
	return r != nil, r != nil && r.Copy
}
