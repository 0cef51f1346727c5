// Package apperr is Countersign's one application error type: a small set of codes that the HTTP
// edge maps to a status and a user message, with the underlying error kept for the log.
package apperr

import (
	"errors"
	"fmt"
)

// Code classifies an application error. The web edge maps each code to one HTTP status.
type Code string

// The codes. Anything that is not an *Error is treated as Internal.
const (
	Invalid          Code = "invalid"            // 400: the request is malformed or breaks a rule
	Unauthorized     Code = "unauthorized"       // 401: no or wrong credentials
	Forbidden        Code = "forbidden"          // 403: known caller, but not allowed this (an approver link without the right)
	NotFound         Code = "not_found"          // 404: no such thing, or not visible to the caller
	MethodNotAllowed Code = "method_not_allowed" // 405: the path has routes, none for this method (with an Allow header)
	Conflict         Code = "conflict"           // 409: the state changed under the caller (busy run, resolved approval)
	TooLarge         Code = "too_large"          // 413: a body or frame over its limit
	Internal         Code = "internal"           // 500: a bug or an environment failure; details only in the log
)

// Error is an application error: Code for the machine, Message for the user.
type Error struct {
	Code    Code
	Message string
}

// Error implements error.
func (e *Error) Error() string { return fmt.Sprintf("%s: %s", e.Code, e.Message) }

// Errorf returns an *Error with the given code and a formatted user message.
func Errorf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// CodeOf returns the code of the first *Error in err's chain, Internal otherwise ("" for nil).
func CodeOf(err error) Code {
	if err == nil {
		return ""
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return Internal
}

// MessageOf returns the user message of the first *Error in err's chain, "Internal error" otherwise.
func MessageOf(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Message
	}
	return "Internal error"
}

// Wrap prefixes a non-nil *errp with an operation name, keeping any *Error in the chain. Use it
// deferred: defer apperr.Wrap(&err, "DecideApproval(%s)", id).
func Wrap(errp *error, format string, args ...any) {
	if *errp != nil {
		*errp = fmt.Errorf("%s: %w", fmt.Sprintf(format, args...), *errp)
	}
}
