// Package static embeds the browser assets: the stylesheet, app.js, and htmx with its WebSocket
// extension vendored from npm (make vendor refreshes them).
package static

import "embed"

// FS holds app.css, app.js, countdown.js, notices.js, favicon.svg and vendor/.
//
//go:embed app.css app.js countdown.js notices.js favicon.svg vendor
var FS embed.FS
