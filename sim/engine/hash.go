package engine

// BlockHash is the hash of a full block of token ids that follows the
// block whose hash is parent (0 for a prompt's first block): chained, as
// vLLM hashes blocks for its prefix cache, so that equal hashes mean
// equal prefixes and not merely equal blocks.
func BlockHash(parent uint64, tokens []int) uint64 {
	h := mix(parent ^ 0x70726566697863) // "prefixc"
	for _, t := range tokens {
		h = mix(h ^ uint64(uint32(t)))
	}
	return h
}

// HashBlocks returns the chained hashes of the full blocks of tokens, of
// blockTokens each; a last partial block has none.
func HashBlocks(tokens []int, blockTokens int) []uint64 {
	out := make([]uint64, 0, len(tokens)/blockTokens)
	var h uint64
	for i := 0; i+blockTokens <= len(tokens); i += blockTokens {
		h = BlockHash(h, tokens[i:i+blockTokens])
		out = append(out, h)
	}
	return out
}

// mix is splitmix64's finaliser, a bijection of 64-bit values.
func mix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}
