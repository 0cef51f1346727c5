// Package static embeds the browser assets: the stylesheet, app.js, and htmx with its WebSocket
// extension vendored from npm (make vendor refreshes them).
package static

import "embed"

// FS holds the stylesheets, the scripts (app.js and one file per feature, e.g. follow.js),
// favicon.svg and vendor/.
//
//go:embed *.css *.js *.svg vendor
var FS embed.FS
