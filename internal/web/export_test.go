package web

import (
	"log/slog"
	"net/http"

	"github.com/a-h/templ"
)

// Loggable exposes loggable to the web_test package.
var Loggable = loggable

// The caps on open live sockets.
const (
	MaxOwnerSockets = maxOwnerSockets
	MaxLinkSockets  = maxLinkSockets
)

// RenderFor runs the server's render of c with status st (a zero Server logs to slog's default).
func RenderFor(w http.ResponseWriter, r *http.Request, st int, c templ.Component) {
	(&Server{log: slog.Default()}).render(w, r, st, c)
}

// RouteRow is one row of the route table as the web_test package sees it.
type RouteRow struct{ Pattern, Access string }

// Routes is the route table (routes): each pattern with its access class.
func Routes() []RouteRow {
	var rows []RouteRow
	for _, rt := range New(Config{}).routes(http.NewServeMux()) {
		rows = append(rows, RouteRow{rt.pattern, string(rt.access)})
	}
	return rows
}
