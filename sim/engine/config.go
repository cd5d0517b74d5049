package engine

import (
	"fmt"
	"math"
	"slices"
	"time"
)

// Config is an engine replica: its scheduler's caps, its KV cache and its
// speed. The zero value is not valid; start from a preset.
type Config struct {
	// MaxRunning is the most sequences in the batch at once, vLLM's
	// max_num_seqs; more wait in the queue.
	MaxRunning int
	// MaxBatchedTokens is the most tokens one step computes, a token for
	// each decoding sequence and chunks of prompts (vLLM's
	// max_num_batched_tokens with chunked prefill); at least MaxRunning.
	// 0 means 8192.
	MaxBatchedTokens int
	// KVBlocks is the KV cache's size in blocks (vLLM logs it as the
	// number of GPU blocks). A request holds blocks for its prompt and
	// its output while it runs; one that could never fit is refused.
	KVBlocks int
	// BlockTokens is the tokens one block holds, vLLM's block_size; 0
	// means 16. Prefix caching works in whole blocks.
	BlockTokens int
	// PrefillTokensPerSecond is how fast the prompt tokens not found in
	// the prefix cache are computed.
	PrefillTokensPerSecond float64
	// DecodeBase is a step's fixed cost (reading the weights), and
	// DecodePerSeq what each sequence decoding in it adds (its KV and
	// its share of compute): a step takes DecodeBase + DecodePerSeq ×
	// decoding sequences + its prefill tokens / PrefillTokensPerSecond,
	// and every sequence in the step gets one token. DecodeBase must be
	// above 0.
	DecodeBase   time.Duration
	DecodePerSeq time.Duration
}

// Defaults that Config's zero fields stand for.
const (
	defaultBlockTokens      = 16   // vLLM's block_size on CUDA
	defaultMaxBatchedTokens = 8192 // vLLM's max_num_batched_tokens for its API server on GPUs of 70 GiB and more
)

// Llama8BOnH100 is Llama 3.1 8B Instruct in BF16 on one H100 SXM (80 GB)
// under vLLM V1's defaults. The scheduler's caps are vLLM's own defaults
// for its API server on a GPU of 70 GiB or more (max_num_seqs 1024,
// max_num_batched_tokens 8192, in vllm/engine/arg_utils.py) and its
// block size 16. The rest is arithmetic on the model and the GPU:
//   - KV cache: 90% of 80 GiB (gpu_memory_utilization 0.9), less 15 GiB
//     of weights and about 4 GiB of activations and CUDA graphs, leaves
//     about 53 GiB; a token takes 128 KiB (2 × 32 layers × 8 KV heads ×
//     128 × 2 bytes), so about 430,000 tokens: 27,000 blocks.
//   - Prefill: 16 GFLOP a token (2 × 8e9 parameters) at about 40% of the
//     H100's 989 dense BF16 TFLOPS: 25,000 tokens/s, so a cold 4,000-token
//     prompt takes 160 ms.
//   - Decode: a step reads the 16 GB of weights at 3.35 TB/s (4.8 ms),
//     with launch and sampling overhead 6 ms; each sequence adds the KV
//     of a 2,000-token context (256 MiB, 0.08 ms) and its 16 GFLOP
//     (0.03 ms): 0.1 ms. 64 sequences decode at 12.4 ms a token, 256 at
//     31.6 ms.
func Llama8BOnH100() Config {
	return Config{MaxRunning: 1024, MaxBatchedTokens: 8192, KVBlocks: 27000, BlockTokens: 16,
		PrefillTokensPerSecond: 25000, DecodeBase: 6 * time.Millisecond, DecodePerSeq: 100 * time.Microsecond}
}

// Llama70BOn4H100 is Llama 3.1 70B Instruct in BF16 on four H100 SXM
// (80 GB) with tensor parallelism 4, under vLLM V1's defaults (as
// Llama8BOnH100). The rest is arithmetic:
//   - KV cache: 4 × 72 GiB less 131 GiB of weights and about 16 GiB of
//     activations and CUDA graphs leaves about 141 GiB; a token takes
//     320 KiB (2 × 80 layers × 8 KV heads × 128 × 2 bytes), so about
//     460,000 tokens: 28,000 blocks.
//   - Prefill: 141 GFLOP a token over 4 × 989 TFLOPS at about 35% (the
//     all-reduces of tensor parallelism cost more than one GPU's
//     efficiency): 10,000 tokens/s, so a cold 4,000-token prompt takes
//     400 ms.
//   - Decode: each GPU reads its 35 GB of weights at 3.35 TB/s (10.5 ms),
//     with 160 all-reduces and overhead 14 ms; each sequence adds the KV
//     of a 2,000-token context on each GPU (160 MiB, 0.05 ms) and 35 GFLOP
//     a GPU (0.06 ms): 0.11 ms. 64 sequences decode at 21 ms a token, 256
//     at 42 ms.
func Llama70BOn4H100() Config {
	return Config{MaxRunning: 1024, MaxBatchedTokens: 8192, KVBlocks: 28000, BlockTokens: 16,
		PrefillTokensPerSecond: 10000, DecodeBase: 14 * time.Millisecond, DecodePerSeq: 110 * time.Microsecond}
}

// presets are the presets by the names scenarios and flags give them.
var presets = map[string]func() Config{
	"llama-3.1-8b-h100":    Llama8BOnH100,
	"llama-3.1-70b-4xh100": Llama70BOn4H100,
}

// Preset returns the preset of that name (see PresetNames).
func Preset(name string) (Config, bool) {
	f, ok := presets[name]
	if !ok {
		return Config{}, false
	}
	return f(), true
}

// PresetNames lists the presets' names, sorted.
func PresetNames() []string {
	names := make([]string, 0, len(presets))
	for n := range presets {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// Validate reports the first field out of range.
func (c Config) Validate() error {
	c = c.normalized()
	switch {
	case c.MaxRunning < 1:
		return fmt.Errorf("engine: MaxRunning must be at least 1, got %d", c.MaxRunning)
	case c.MaxBatchedTokens < c.MaxRunning:
		return fmt.Errorf("engine: MaxBatchedTokens (%d) must be at least MaxRunning (%d), a token for each running sequence", c.MaxBatchedTokens, c.MaxRunning)
	case c.KVBlocks < 1:
		return fmt.Errorf("engine: KVBlocks must be at least 1, got %d", c.KVBlocks)
	case c.BlockTokens < 1 || c.BlockTokens > 1024:
		return fmt.Errorf("engine: BlockTokens must be between 1 and 1024 (0 means 16), got %d", c.BlockTokens)
	case math.IsNaN(c.PrefillTokensPerSecond) || math.IsInf(c.PrefillTokensPerSecond, 0) || c.PrefillTokensPerSecond <= 0:
		return fmt.Errorf("engine: PrefillTokensPerSecond must be a finite number above 0, got %v", c.PrefillTokensPerSecond)
	case c.DecodeBase <= 0:
		return fmt.Errorf("engine: DecodeBase must be above 0, got %s", c.DecodeBase)
	case c.DecodePerSeq < 0:
		return fmt.Errorf("engine: DecodePerSeq must not be negative, got %s", c.DecodePerSeq)
	}
	return nil
}

// normalized fills in the defaults of zero fields.
func (c Config) normalized() Config {
	if c.BlockTokens == 0 {
		c.BlockTokens = defaultBlockTokens
	}
	if c.MaxBatchedTokens == 0 {
		c.MaxBatchedTokens = defaultMaxBatchedTokens
	}
	return c
}

// Block is BlockTokens with its default filled in.
func (c Config) Block() int { return c.normalized().BlockTokens }

// StepTime is how long a step takes that decodes a token for each of
// decoding sequences and computes prefill prompt tokens.
func (c Config) StepTime(decoding, prefill int) time.Duration {
	d := c.DecodeBase + time.Duration(decoding)*c.DecodePerSeq
	return d + time.Duration(math.Round(float64(prefill)/c.PrefillTokensPerSecond*float64(time.Second)))
}
