// Package web is knotless-server's browser pages: sign-in with an account
// API token (a server-side session in an HttpOnly, SameSite=Lax cookie), a
// repository's Pipelines and Runners tabs, and a run's page with its logs
// following live over server-sent events that resume by byte offset.
//
// Pages are server-rendered html/template; the one script (static/app.js)
// and style sheet are files embedded in the program, served under
// /-/static/, so the Content-Security-Policy allows no inline script or
// style. Every state-changing request is a POST checked by
// http.CrossOriginProtection and, once signed in, by the session's form
// token.
//
// It must never decide who may see or change what: every read and action
// goes through Backend, which applies the API's own rules (the server
// implements it with the same functions as its XRPC methods). It never
// puts a log's bytes into markup unescaped: log text reaches the page as
// JSON and becomes DOM text nodes (textContent), never HTML.
package web
