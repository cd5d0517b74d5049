package node

// RPCAddr is the address of the node's gRPC listener, for tests that call
// its services as a peer would; "" without node.rpc.
func (n *Node) RPCAddr() string { return n.rpcAddr() }
