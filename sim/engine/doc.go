// Package engine owns the model of an inference engine replica (vLLM's
// V1 engine, as far as routing can tell one replica from another): a
// scheduler that batches continuously, under a cap on running sequences
// and on the tokens of one step, with a waiting queue in arrival order;
// a KV cache of fixed-size blocks, reference counted, with prefix
// caching by chained hashes of full blocks of token ids and LRU eviction
// of the blocks no request holds; and step times in which prefill costs
// in proportion to the prompt tokens not found cached and decoding a
// token costs more the more sequences share the step.
//
// The model has no clock and starts no goroutine: its driver says when
// a step begins and ends. sim/emulator drives it in real time, one
// goroutine stepping it while requests wait for their tokens, and
// sim/des in virtual time, from its event queue. It is deterministic:
// the same calls give the same events, in the same order.
//
// engine imports only the standard library; sim/emulator and sim/des
// import it.
package engine
