package emulator

// vocabulary is what the emulator says: 64 words, each exactly one o200k
// token with its leading space, of lower-case ASCII letters only. o200k's
// pre-tokeniser splits text before every " word", so N words joined are N
// tokens, and the words need no JSON escaping.
var vocabulary = [64]string{
	" mesh", " route", " the", " token", " node", " region", " gateway", " stream",
	" model", " request", " reply", " provider", " latency", " quota", " budget", " lease",
	" raft", " gossip", " leader", " cache", " replica", " session", " policy", " data",
	" fast", " safe", " cost", " plan", " path", " peer", " hop", " trace",
	" signal", " edge", " cluster", " server", " client", " answer", " word", " light",
	" river", " stone", " green", " quiet", " bright", " window", " market", " simple",
	" steady", " north", " south", " east", " west", " world", " time", " line",
	" text", " chunk", " byte", " one", " two", " three", " each", " every",
}

// mix is splitmix64's finaliser: a well-spread 64-bit hash of x.
func mix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}

// Salts keep the draws of one request independent of each other.
const (
	saltError = iota + 1
	saltID
	saltText
	saltCall
)

// draw is the random number for one purpose of the request numbered seq.
func draw(seed int64, seq uint64, salt uint64) uint64 {
	return mix(mix(uint64(seed)^mix(seq)) + salt)
}

// word is token i of choice c of a completion whose text key is key.
func word(key uint64, c, i int) string { return vocabulary[wordIndex(key, c, i)] }

// wordIndex is the index in vocabulary of word(key, c, i).
func wordIndex(key uint64, c, i int) int {
	return int(mix(key+uint64(c)<<40+uint64(i)) % uint64(len(vocabulary)))
}

// appendWords appends the n tokens of choice c.
func appendWords(b []byte, key uint64, c, n int) []byte {
	for i := range n {
		b = append(b, word(key, c, i)...)
	}
	return b
}

const base62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

// appendID appends prefix and n base62 characters derived from x, as
// OpenAI's ids look.
func appendID(b []byte, prefix string, x uint64, n int) []byte {
	b = append(b, prefix...)
	for i := range n {
		if i%10 == 0 {
			x = mix(x + uint64(i))
		}
		b = append(b, base62[x%62])
		x /= 62
	}
	return b
}
