package emulator

import (
	"container/list"
	"sync"

	"github.com/llmesh/llmesh/route"
)

// storedResponsesKept bounds the responses an emulator keeps for
// retrieval and previous_response_id; the least recently used goes first.
const storedResponsesKept = 10000

// storedResponse is a response kept for GET /v1/responses/{id} and for
// follow-ups that name it.
type storedResponse struct {
	id   string
	body []byte          // the Response object as answered
	turn []route.Message // its input (the chain before it included) and output, for a follow-up's prompt
}

// responseStore is an LRU of stored responses.
type responseStore struct {
	mu    sync.Mutex
	order list.List // of *storedResponse, most recent first
	byID  map[string]*list.Element
}

func (s *responseStore) put(r *storedResponse) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.byID == nil {
		s.byID = map[string]*list.Element{}
	}
	if el, ok := s.byID[r.id]; ok {
		s.order.Remove(el)
	}
	s.byID[r.id] = s.order.PushFront(r)
	for s.order.Len() > storedResponsesKept {
		old := s.order.Remove(s.order.Back()).(*storedResponse)
		delete(s.byID, old.id)
	}
}

// get returns the response stored as id; it is not to be modified.
func (s *responseStore) get(id string) (*storedResponse, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	el, ok := s.byID[id]
	if !ok {
		return nil, false
	}
	s.order.MoveToFront(el)
	return el.Value.(*storedResponse), true
}

// remove deletes id and reports whether it was stored.
func (s *responseStore) remove(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	el, ok := s.byID[id]
	if ok {
		s.order.Remove(el)
		delete(s.byID, id)
	}
	return ok
}

// len is the number of responses stored.
func (s *responseStore) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.order.Len()
}
