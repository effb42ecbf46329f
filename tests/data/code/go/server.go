package api

import (
	"encoding/json"
	"log"
	"net/http"
	"strconv"
	"sync"
)

type Store struct {
	mu    sync.RWMutex
	items map[int]string
	next  int
}

func NewStore() *Store {
	return &Store{items: make(map[int]string), next: 1}
}

func (s *Store) Add(v string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	id := s.next
	s.items[id] = v
	s.next++
	return id
}

func (s *Store) Get(id int) (string, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	v, ok := s.items[id]
	return v, ok
}

type handler struct{ store *Store }

func (h handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodGet:
		id, err := strconv.Atoi(r.URL.Query().Get("id"))
		if err != nil {
			http.Error(w, "bad id", http.StatusBadRequest)
			return
		}
		v, ok := h.store.Get(id)
		if !ok {
			http.NotFound(w, r)
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"id": id, "value": v})
	case http.MethodPost:
		var body struct {
			Value string `json:"value"`
		}
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.WriteHeader(http.StatusCreated)
		json.NewEncoder(w).Encode(struct{ ID int }{h.store.Add(body.Value)})
	default:
		w.Header().Set("Allow", "GET, POST")
		w.WriteHeader(http.StatusMethodNotAllowed)
	}
}

func Serve(addr string) error {
	mux := http.NewServeMux()
	mux.Handle("/items", handler{NewStore()})
	log.Printf("listening on %s", addr)
	return http.ListenAndServe(addr, mux)
}
