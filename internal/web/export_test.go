package web

// Loggable exposes loggable to the web_test package.
var Loggable = loggable
