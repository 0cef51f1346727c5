package models

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"countersign/internal/agent"
	"countersign/internal/apperr"
)

// The default vendor models, offered when a vendor is configured without a model list.
const (
	DefaultOpenAIModel    = "gpt-4o-mini"
	DefaultAnthropicModel = "claude-sonnet-4-5"
)

// vendorRetries is how often the vendor models built by Vendors retry a request that failed
// before streaming began (a 429, a 5xx, an overloaded API): twice, the SDKs' own default, each
// retry shown with its wait and cancelled by Stop (retry.go).
const vendorRetries = 2

// VendorModel is one model of a configured vendor: its offered name, "openai:<model>",
// "openai-responses:<model>" or "anthropic:<model>", and the model itself (safe for concurrent
// use; share it).
type VendorModel struct {
	Name  string
	Model agent.Model
}

// VendorOptions are the server's settings for every vendor model (cmd/web's flags).
type VendorOptions struct {
	// IdleTimeout ends a model turn whose provider sends nothing (no response headers, no
	// event) for this long, with "timeout: no data from the provider for …"
	// (-model-idle-timeout); 0 means DefaultIdleTimeout.
	IdleTimeout time.Duration
}

// Vendors returns the vendor models configured by environment variables (SPEC §11, §17), read
// with getenv (os.Getenv in production), in this order:
//
//   - OpenAI Chat Completions, or any OpenAI-compatible server (Ollama, vLLM, LM Studio), when
//     OPENAI_API_KEY or OPENAI_BASE_URL is set: "openai:<model>" for each name in OPENAI_MODEL
//     (comma-separated; default "gpt-4o-mini");
//   - OpenAI's Responses API, with the same OPENAI_API_KEY and OPENAI_BASE_URL:
//     "openai-responses:<model>" for each name in OPENAI_RESPONSES_MODEL (comma-separated; none
//     when unset);
//   - Anthropic, when ANTHROPIC_API_KEY or ANTHROPIC_BASE_URL is set: "anthropic:<model>" for
//     each name in ANTHROPIC_MODEL (comma-separated; default "claude-sonnet-4-5"), with extended
//     thinking as ANTHROPIC_THINKING says: unset or "off" none, "adaptive", or a budget in
//     tokens (at least 1024).
//
// Each model retries a failed request twice (vendorRetries) and ends a stream silent for
// opts.IdleTimeout. Nothing is requested from the vendors here. The error names a variable whose
// value is refused (ANTHROPIC_THINKING).
func Vendors(getenv func(string) string, opts VendorOptions) ([]VendorModel, error) {
	var out []VendorModel
	env := func(k string) string { return strings.TrimSpace(getenv(k)) }
	if key, base := env("OPENAI_API_KEY"), env("OPENAI_BASE_URL"); key != "" || base != "" {
		for _, m := range modelList(env("OPENAI_MODEL"), DefaultOpenAIModel) {
			out = append(out, VendorModel{Name: "openai:" + m, Model: NewOpenAI(OpenAIConfig{
				APIKey: key, BaseURL: base, Model: m, MaxRetries: vendorRetries, IdleTimeout: opts.IdleTimeout,
			})})
		}
		if resp := env("OPENAI_RESPONSES_MODEL"); resp != "" {
			for _, m := range modelList(resp, "") {
				out = append(out, VendorModel{Name: "openai-responses:" + m, Model: NewResponses(ResponsesConfig{
					APIKey: key, BaseURL: base, Model: m, MaxRetries: vendorRetries, IdleTimeout: opts.IdleTimeout,
				})})
			}
		}
	}
	if key, base := env("ANTHROPIC_API_KEY"), env("ANTHROPIC_BASE_URL"); key != "" || base != "" {
		thinking, err := ParseAnthropicThinking(env("ANTHROPIC_THINKING"))
		if err != nil {
			return nil, fmt.Errorf("ANTHROPIC_THINKING: %w", err)
		}
		for _, m := range modelList(env("ANTHROPIC_MODEL"), DefaultAnthropicModel) {
			out = append(out, VendorModel{Name: "anthropic:" + m, Model: NewAnthropic(AnthropicConfig{
				APIKey: key, BaseURL: base, Model: m, MaxRetries: vendorRetries, Thinking: thinking,
				IdleTimeout: opts.IdleTimeout,
			})})
		}
	}
	return out, nil
}

// modelList splits a comma-separated list of model names, dropping blanks and repeats.
func modelList(list, def string) []string {
	var names []string
	for _, n := range strings.Split(list, ",") {
		if n = strings.TrimSpace(n); n != "" && !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	if len(names) == 0 && def != "" {
		return []string{def}
	}
	return names
}

// Catalog offers the models of another agent.Models (the faux Registry) followed by vendor
// models. It implements agent.Models.
type Catalog struct {
	base    agent.Models
	vendors []VendorModel
}

// NewCatalog returns a catalog of base's models and then vendors (from Vendors).
func NewCatalog(base agent.Models, vendors []VendorModel) *Catalog {
	return &Catalog{base: base, vendors: vendors}
}

// Names lists base's names, then the vendor models' in the order given.
func (c *Catalog) Names() []string {
	names := c.base.Names()
	for _, v := range c.vendors {
		names = append(names, v.Name)
	}
	return names
}

// Model returns the vendor model named name, or base's; an unknown name is an apperr.Invalid
// error naming every offered model.
func (c *Catalog) Model(name string) (agent.Model, error) {
	for _, v := range c.vendors {
		if v.Name == name {
			return v.Model, nil
		}
	}
	if m, err := c.base.Model(name); err == nil {
		return m, nil
	}
	return nil, apperr.Errorf(apperr.Invalid, "Unknown model %q; offered: %s.", name, strings.Join(c.Names(), ", "))
}

var _ agent.Models = (*Catalog)(nil)
