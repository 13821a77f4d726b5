package stats

import (
	"encoding/json"
	"net/http"
)

// ServeHTTP answers with the Snapshot as JSON, for programs and scripts that
// read the stats without a metrics system (for example at /debug/zerodrop).
func (h *Hub) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	b, err := json.MarshalIndent(h.Snapshot(), "", "  ")
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Write(append(b, '\n'))
}
