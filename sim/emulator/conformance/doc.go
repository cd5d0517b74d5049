// Package conformance validates llmesh's wire formats against OpenAI's
// OpenAPI document (a copy in testdata/openai, or $LLMESH_OPENAI_SPEC)
// with libopenapi-validator: the emulator's answers and Responses stream
// events, and a node's (the dev stack's, every provider behind a checker)
// answers, refusals and chat stream chunks on every OpenAI endpoint it
// serves, and every request it sends a provider.
//
// It is a module of its own so that the validator, which takes minutes to
// build with -race and about a minute to load the document, stays out of
// the main module and its test run. .ci/run runs it, without -race:
//
//	cd sim/emulator/conformance && go test -count=1 .
package conformance
