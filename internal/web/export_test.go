package web

// Loggable exposes loggable to the web_test package.
var Loggable = loggable

// The caps on open live sockets.
const (
	MaxOwnerSockets = maxOwnerSockets
	MaxLinkSockets  = maxLinkSockets
)
