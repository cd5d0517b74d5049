// Package conformance validates the emulator's answers and stream events
// against OpenAI's OpenAPI document (../shared/openai/openapi.yaml beside
// the repository, or $LLMESH_OPENAI_SPEC) with libopenapi-validator.
//
// It is a module of its own so that the validator, which takes minutes to
// build and about a minute to load the document, stays out of the main
// module and its test run. Run it with:
//
//	cd sim/emulator/conformance && go test -count=1 .
package conformance
