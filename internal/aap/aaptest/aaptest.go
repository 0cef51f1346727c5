// Package aaptest checks messages against the Agent Approval Protocol v1's own schemas (the
// OpenAPI contract's components.schemas, copied into testdata/openapi-schemas.json with its
// source), for contract tests of Door 3 (SPEC §18, issue 32).
package aaptest

import (
	"bytes"
	_ "embed"
	"fmt"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

//go:embed testdata/openapi-schemas.json
var schemas []byte

const url = "https://countersign.invalid/aap/openapi-schemas.json"

var (
	once     sync.Once
	compiler *jsonschema.Compiler
	loadErr  error
	mu       sync.Mutex
	compiled = map[string]*jsonschema.Schema{}
)

// Validate checks the JSON document doc against the protocol's schema name (ApprovalRequest,
// CreateApprovalRequest, ErrorResponse, CancelledApprovalRequest, ProvisionInstanceRequest,
// ProvisionInstanceResponse, Instance, RequestResolvedEvent, WebhookVerification, …) with
// draft 2020-12, formats asserted (uuid, date-time, uri). It returns nil, or an error listing
// every violation (instance location and message).
func Validate(name string, doc []byte) error {
	once.Do(func() {
		raw, err := jsonschema.UnmarshalJSON(bytes.NewReader(schemas))
		if err != nil {
			loadErr = err
			return
		}
		compiler = jsonschema.NewCompiler()
		compiler.DefaultDraft(jsonschema.Draft2020)
		compiler.AssertFormat()
		compiler.AssertVocabs()
		loadErr = compiler.AddResource(url, raw)
	})
	if loadErr != nil {
		return loadErr
	}
	mu.Lock()
	sch, ok := compiled[name]
	if !ok {
		var err error
		if sch, err = compiler.Compile(url + "#/components/schemas/" + name); err != nil {
			mu.Unlock()
			return err
		}
		compiled[name] = sch
	}
	mu.Unlock()
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(doc))
	if err != nil {
		return fmt.Errorf("not JSON: %v", err)
	}
	if err := sch.Validate(v); err != nil {
		if ve, ok := err.(*jsonschema.ValidationError); ok {
			var lines []string
			var walk func(e *jsonschema.ValidationError)
			walk = func(e *jsonschema.ValidationError) {
				if len(e.Causes) == 0 {
					lines = append(lines, "/"+strings.Join(e.InstanceLocation, "/")+": "+e.Error())
				}
				for _, c := range e.Causes {
					walk(c)
				}
			}
			walk(ve)
			return fmt.Errorf("%s violates %s:\n%s", doc, name, strings.Join(lines, "\n"))
		}
		return err
	}
	return nil
}
