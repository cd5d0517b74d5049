// Package conformance validates llmesh's wire formats against OpenAI's
// OpenAPI document (a copy in testdata/openai, or $LLMESH_OPENAI_SPEC)
// with kin-openapi: the emulator's answers and stream events (Responses,
// chat and legacy completions), and a node's (the dev stack's, every
// provider behind a checker) answers, refusals and chat and completions
// stream chunks on every OpenAI endpoint it serves, and every request it
// sends a provider, chat included. Requests and answers are validated with
// openapi3filter against their operation, each stream event and refusal
// with VisitJSON against its component schema; nothing is skipped.
//
// The document declares OpenAPI 3.1 but writes some schemas as 3.0 and
// JSON Schema 2019-09 did; as31 reads those as 3.1 before loading it (see
// there). The legacy completions stream has no schema in it: its chunks
// are checked against CreateCompletionResponse with a null finish_reason
// admitted (see completionChunk). TestChecksRefuse shows each kind of check
// refusing a document broken in one place.
//
// It is a module of its own so that the validator and its dependencies
// stay out of the main module. .ci/run runs it, without -race:
//
//	cd sim/emulator/conformance && go test -count=1 .
package conformance
