package web

import (
	"encoding/csv"
	"encoding/json"
	"net/http"
)

// exportFormat is the ?format= of a list page: "csv" or "json" asks for the list as a download
// (CONSOLE.md rule 11), "" for the page itself. ok is false (and a 400 written) for anything else.
func exportFormat(w http.ResponseWriter, r *http.Request) (format string, ok bool) {
	format = r.URL.Query().Get("format")
	switch format {
	case "", "csv", "json":
		return format, true
	}
	http.Error(w, "format must be csv or json", http.StatusBadRequest)
	return "", false
}

// writeExport writes a list as a CSV file (header, then rows; cells made safe for spreadsheets)
// or as JSON ({"<name>": [{header: cell, …}, …]}), named name-<UTC time>.
func (s *Server) writeExport(w http.ResponseWriter, r *http.Request, format, name string, header []string, rows [][]string) {
	file := name + "-" + s.deps.Now().UTC().Format("20060102-150405")
	w.Header().Set("Cache-Control", "no-store")
	if format == "json" {
		list := make([]map[string]string, 0, len(rows))
		for _, row := range rows {
			m := make(map[string]string, len(header))
			for i, h := range header {
				if i < len(row) {
					m[h] = row[i]
				}
			}
			list = append(list, m)
		}
		b, err := json.MarshalIndent(map[string]any{name: list}, "", "  ")
		if err != nil {
			s.serverError(w, r, err)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Disposition", `attachment; filename="`+file+`.json"`)
		_, _ = w.Write(append(b, '\n'))
		return
	}
	w.Header().Set("Content-Type", "text/csv; charset=utf-8")
	w.Header().Set("Content-Disposition", `attachment; filename="`+file+`.csv"`)
	cw := csv.NewWriter(w)
	_ = cw.Write(header)
	for _, row := range rows {
		rec := make([]string, len(row))
		for i, c := range row {
			rec[i] = csvSafe(c)
		}
		_ = cw.Write(rec)
	}
	cw.Flush()
}
